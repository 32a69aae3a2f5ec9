import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_page_files_are_not_named_after_their_urls():
    # Until st.navigation first runs in a server process, Streamlit treats pages/ the old (v1) way:
    # a file named N_<url>.py would then be run on its own, without app.py's sidebar and shape.
    # Our files are pN_<name>.py with url paths of their own, so app.py always runs.
    pages = re.findall(r'st\.Page\("pages/(p\d)_(\w+)\.py".*?url_path="([\w-]+)"', (ROOT / "app.py").read_text())
    assert [p for p, _, _ in pages] == [f"p{i}" for i in range(1, 10)]
    for prefix, stem, url in pages:
        assert (ROOT / "pages" / f"{prefix}_{stem}.py").exists()
        v1_url = re.sub(r"^\d+_?", "", f"{prefix}_{stem}")  # v1 drops a leading number only
        assert v1_url != url and v1_url.startswith("p")


def test_the_core_never_imports_streamlit():
    for path in (ROOT / "attnlab").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"^\s*(import streamlit|from streamlit)", text, re.MULTILINE), path


def test_which_backends_can_run_a_shape_is_worked_out_once_by_the_worker_for_every_ui_process(monkeypatch):
    import streamlit as st

    from attnlab.backends import base
    from attnlab.shapes import AttentionShape
    from pages import common

    shape = AttentionShape(batch=1, q_len=19, kv_len=19, heads=2, kv_heads=1, head_dim=8)
    first = common.unmet(shape)
    assert first["naive"] is None and list(first) == list(common.REGISTRY)
    st.cache_data.clear()  # another UI process: nothing of this one's in its memory
    monkeypatch.setattr(base.Backend, "unmet", lambda *a: pytest.fail("worked out again"))
    assert common.unmet(shape) == first  # the worker kept it


def test_pages_never_use_jax_themselves():
    # every page computes through the device service (common.on_device) or on its own data; JAX in a page
    # process runs page 1's tiny example alone (attnlab.studies.weights, on the CPU: serve.py keeps this
    # process's JAX_PLATFORMS at cpu). A page file imports neither jax nor the device facts.
    import ast

    for p in sorted(Path(ROOT, "pages").glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not [n for n in names if n == "jax" or n.startswith("jax.")], (p, names)


def test_background_work_waits_until_no_page_has_run_for_a_moment():
    # The warm-up calls activity.wait_for_quiet between shapes: it must not return while a page runs,
    # nor the moment one ends (the browser is still drawing it), only after the settle time.
    import threading
    import time

    from pages import activity

    release, done = threading.Event(), []

    def page():
        with activity.page_running():
            release.wait(10)
        done.append(time.perf_counter())

    t = threading.Thread(target=page)
    t.start()
    time.sleep(0.1)  # the page is running
    waiter = threading.Thread(target=lambda: (activity.wait_for_quiet(settle_s=0.3), done.append(time.perf_counter())))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive()  # still waiting: a page is running
    release.set()
    t.join(10), waiter.join(10)
    assert not waiter.is_alive() and done[1] - done[0] >= 0.25  # returned only after the settle time
    start = time.perf_counter()
    activity.wait_for_quiet(settle_s=0.05)  # nothing running: returns after the settle time alone
    assert time.perf_counter() - start < 1


def test_warm_up_pauses_before_every_shape(monkeypatch):
    from attnlab.shapes import AttentionShape
    from attnlab.studies import warm

    events = []
    monkeypatch.setattr(warm.runs, "run", lambda shape, names, **kw: events.append(("run", shape.q_len)) or [])
    shapes = [(AttentionShape(q_len=t, kv_len=t), ("naive",)) for t in (8, 16, 32)]
    warm.warm(pause=lambda: events.append("pause"), shapes=shapes)
    assert events == ["pause", ("run", 8), "pause", ("run", 16), "pause", ("run", 32)]


def test_the_warm_up_asks_the_device_service_for_each_shape_as_a_page_would():
    from attnlab import service
    from attnlab.studies import warm

    sent = []
    lines = warm.warm(call=lambda fn, *args: sent.append((fn, args)) or service.call(fn, *args),
                      shapes=warm.plan()[:1])
    assert lines > 0 and sent[0][0] is warm.warm_shape and sent[0][1][0] == warm.SHAPES[0]


def test_byte_axes_tick_at_whole_binary_sizes_not_powers_of_ten():
    # Vega's own ticks on a byte axis are powers of ten, labelled 977 KiB, 9.54 MiB: every tick here is
    # a whole number of B, KiB, MiB, GiB or TiB, and the ticks bracket the data
    from pages.encodings import binary_ticks

    for values, log in (([1000, 8e9], True), ([3e6, 2.5e7], True), ([512], True), ([1e5, 1.3e11], True),
                        ([0, 1.5e6, 4.9e7], False), ([2**20, 2**24], False), ([300], False)):
        ticks = binary_ticks(values, log)
        assert 2 <= len(ticks) <= 9, (values, ticks)
        assert ticks[0] <= min(v for v in values if v > 0) and ticks[-1] >= max(values), (values, ticks)
        for t in ticks:
            unit = max([1] + [u for u in (2**10, 2**20, 2**30, 2**40) if t >= u])
            assert t % unit == 0, (values, ticks, t)
    assert binary_ticks([2**20, 2**24], log=True) == [2**20, 2**21, 2**22, 2**23, 2**24]
    assert binary_ticks([]) == [] and binary_ticks([0, None]) == []


def test_a_page_no_worker_answered_says_why_and_offers_to_try_again(monkeypatch):
    """No device worker answers (starting, restarting, or the class's GPUs off): the page says so and the app serves
    on, and a button runs the page again once one answers (the message says to try again: the learner can here)."""
    from attnlab import service
    from pages import workers
    from tests.apptest_util import open_page, texts

    real = service.workers
    monkeypatch.setattr(service, "workers", lambda: [])
    workers.worker_info.clear()
    at = open_page("pages/p4_naive_vs_fused.py")
    assert workers.NO_WORKER[False] in texts(at, "warning") and at.button(key="worker_lost_again")
    monkeypatch.setattr(service, "workers", real)  # a worker answers now
    at.button(key="worker_lost_again").click().run()
    assert not at.exception and workers.NO_WORKER[False] not in texts(at, "warning")
    assert any("Naive vs fused" in t.value for t in at.title)


def test_with_no_worker_answering_page_one_is_whole_and_a_device_page_draws_its_text_before_saying_why(monkeypatch):
    """Outside class hours (the GPUs at zero) or while the worker starts: page 1's formula and tiny example need no
    worker (its example runs in this process), so it is drawn whole, the sidebar saying no worker answers; page 4
    draws its title and text, then its first device call says why it stops (before 2026-12-06 the sidebar's badge
    and the shape's budget check asked the worker first, and every page was only the warning)."""
    from attnlab import service
    from pages import workers
    from tests.apptest_util import open_page, texts

    monkeypatch.setattr(service, "workers", lambda: [])
    workers.worker_info.clear()
    at = open_page("pages/p1_attention.py")
    assert not at.exception and any("How attention works" in t.value for t in at.title)
    assert workers.NO_WORKER[False] not in texts(at, "warning") and len(at.latex) >= 1
    assert any("No device worker answers" in w.value for w in at.sidebar.warning)
    at = open_page("pages/p4_naive_vs_fused.py")
    assert not at.exception and workers.NO_WORKER[False] in texts(at, "warning")
    assert any("Naive vs fused" in t.value for t in at.title)


def test_a_page_asks_the_absent_workers_once_and_try_again_asks_anew(monkeypatch):
    """A look that found no worker waited (up to 5 s in a class); the badge, the shape's budget and the page's own
    look in the same run then say so at once, instead of each waiting again; the next run ("Try again") asks anew."""
    from attnlab import service
    from pages import workers
    from tests.apptest_util import open_page, texts

    looks = []
    monkeypatch.setattr(service, "workers", lambda: looks.append(1) or [])
    workers.worker_info.clear()
    at = open_page("pages/p4_naive_vs_fused.py")
    assert workers.NO_WORKER[False] in texts(at, "warning")
    before = len(looks)
    at.button(key="worker_lost_again").click().run()  # one run: the badge, the budget, the page's own look
    assert workers.NO_WORKER[False] in texts(at, "warning") and len(looks) == before + 1
    at.run()
    assert len(looks) == before + 2  # and the next run asks anew
