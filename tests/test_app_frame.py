import re
from pathlib import Path

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


def test_page_runs_take_turns_when_limited(monkeypatch):
    # ATTNLAB_MAX_RUNS caps the page scripts running at once; a run gives its turn back when done,
    # and a run that has to wait for one still renders its page.
    import threading
    import time

    from pages import turns
    from tests.apptest_util import open_page

    monkeypatch.setenv("ATTNLAB_MAX_RUNS", "1")
    at = open_page("pages/p2_gpu_check.py")
    assert at.title and not at.exception
    slots = turns._SLOTS[1]
    assert slots.acquire(blocking=False)  # the finished run gave its turn back; now held here
    threading.Timer(0.5, slots.release).start()  # ... for half a second
    start = time.perf_counter()
    at.run()
    assert time.perf_counter() - start >= 0.4 and not at.exception and at.title
    assert slots.acquire(blocking=False)
    slots.release()


def test_a_page_waiting_for_the_device_gives_its_turn_to_a_page_that_needs_none(monkeypatch):
    # With one turn: page A waits for the device (held by a timing); page B, which needs no device,
    # runs meanwhile instead of waiting for A. A goes on without a turn, and the turn is given back once.
    import threading

    from attnlab.queue import Budget, DeviceQueue
    from pages import turns

    monkeypatch.setenv("ATTNLAB_MAX_RUNS", "1")
    device = DeviceQueue(Budget(2**30, 2**30, False))
    timing, a_waiting, b_ran, a_ran = device.slot(exclusive=True), threading.Event(), threading.Event(), threading.Event()
    timing.__enter__()

    def page_a():
        with turns.turn():
            with device.slot(1, on_wait=lambda n: a_waiting.set()):
                a_ran.set()

    def page_b():
        with turns.turn():
            b_ran.set()

    a = threading.Thread(target=page_a)
    a.start()
    assert a_waiting.wait(10)
    b = threading.Thread(target=page_b)
    b.start()
    assert b_ran.wait(10) and not a_ran.is_set()  # B ran while A waited for the device
    timing.__exit__(None, None, None)
    a.join(10), b.join(10)
    assert a_ran.is_set()
    slots = turns._SLOTS[1]
    assert slots.acquire(blocking=False)  # the one turn is free again ...
    assert not slots.acquire(blocking=False)  # ... and there is only one (BoundedSemaphore: no double release)
    slots.release()


def test_which_backends_can_run_a_shape_is_worked_out_once_per_server_not_per_process(monkeypatch, tmp_path):
    from attnlab.shapes import AttentionShape
    from pages import common

    monkeypatch.setenv("ATTNLAB_RESULTS_DIR", str(tmp_path))
    shape = AttentionShape(batch=1, q_len=19, kv_len=19, heads=2, kv_heads=1, head_dim=8)
    first = common.unmet(shape)
    assert first["naive"] is None and list(first) == list(common.REGISTRY)
    assert [p.name for p in tmp_path.rglob("*.pkl") if "unmet" in p.name]  # in the store other processes read


def test_background_work_waits_until_no_page_has_run_for_a_moment():
    # The warm-up calls turns.wait_for_quiet between shapes: it must not return while a page runs,
    # nor the moment one ends (the browser is still drawing it), only after the settle time.
    import threading
    import time

    from pages import turns

    release, done = threading.Event(), []

    def page():
        with turns.turn():
            release.wait(10)
        done.append(time.perf_counter())

    t = threading.Thread(target=page)
    t.start()
    time.sleep(0.1)  # the page is running
    waiter = threading.Thread(target=lambda: (turns.wait_for_quiet(settle_s=0.3), done.append(time.perf_counter())))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive()  # still waiting: a page is running
    release.set()
    t.join(10), waiter.join(10)
    assert not waiter.is_alive() and done[1] - done[0] >= 0.25  # returned only after the settle time
    start = time.perf_counter()
    turns.wait_for_quiet(settle_s=0.05)  # nothing running: returns after the settle time alone
    assert time.perf_counter() - start < 1


def test_warm_up_pauses_before_every_shape(monkeypatch):
    from attnlab.shapes import AttentionShape
    from attnlab.studies import warm

    events = []
    monkeypatch.setattr(warm.runs, "run", lambda shape, names, **kw: events.append(("run", shape.q_len)) or [])
    shapes = [AttentionShape(q_len=8, kv_len=8), AttentionShape(q_len=16, kv_len=16)]
    warm.warm(shapes, preset_shapes=[AttentionShape(q_len=32, kv_len=32)], pause=lambda: events.append("pause"))
    assert events == ["pause", ("run", 8), "pause", ("run", 16), "pause", ("run", 32)]


def test_byte_axes_tick_at_whole_binary_sizes_not_powers_of_ten():
    # Vega's own ticks on a byte axis are powers of ten, labelled 977 KiB, 9.54 MiB: every tick here is
    # a whole number of B, KiB, MiB, GiB or TiB, and the ticks bracket the data
    from pages.common import binary_ticks

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
