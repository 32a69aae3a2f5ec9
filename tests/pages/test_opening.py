"""pages/opening.py: the warm-up asks, at the codelab's shape, what pages 6 and 7 ask for as they open."""

import streamlit as st

from attnlab import backends, device, service
from attnlab.shapes import AttentionShape
from attnlab.studies import kvcache
from pages import common, opening
from tests.apptest_util import open_page, record_runs


def sent_by(monkeypatch, *pages: str) -> set[tuple]:
    """Every request the pages send to the device worker as they open at the codelab's shape (fn, args, kwargs)."""
    sent, real = set(), common._on_device
    monkeypatch.setattr(common, "_on_device", lambda fn, args, kwargs: sent.add((fn, args, kwargs)) or real(fn, args, kwargs))
    for page in pages:
        open_page(page)
    return sent


def test_the_requests_asked_ahead_are_the_ones_pages_6_and_7_send_as_they_open(monkeypatch):
    sent = sent_by(monkeypatch, "pages/p6_causal.py", "pages/p7_benchmarks.py", "pages/p8_mha_gqa_mqa.py")
    shape = AttentionShape()
    runnable = [n for n, why in backends.unmet(shape).items() if why is None]
    p8 = opening.p8_names([backends.unmet(v, opening.P8_CANDIDATES) for v in kvcache.variants(shape)])
    asked = opening.requests(shape, runnable, quick=opening.untuned_on_open(device.info().backend == "gpu"), p8=p8)
    asked.append(opening.first_request(shape))
    assert len(asked) == 4 and {(r.fn, r.args, r.kwargs) for r in asked} <= sent, (asked, sent)


def test_the_warm_up_asks_the_codelab_shapes_then_what_pages_ask_there_then_the_presets_and_says_when_done(monkeypatch):
    from attnlab.studies import warm

    order, lines = [], []
    monkeypatch.setattr(opening, "warm", lambda: order.append("opening") or 3)
    opening.warm_up(call=lambda fn, shape, among: order.append(shape) or [], pause=lambda: None, log=lines.append)
    codelab, presets = [s for s, _ in warm.plan(presets=False)], [s for s, _ in warm.plan(codelab=False)]
    assert presets and order == codelab + ["opening"] + presets, order
    assert len(lines) == 1 and lines[0].startswith(warm.DONE), lines


def test_after_the_warm_up_pages_7_and_8_open_at_the_codelab_shape_without_timing_or_checking_anything(monkeypatch):
    st.cache_data.clear()
    service.client().forget()  # nothing kept from earlier tests: the warm-up's answers alone
    assert opening.warm() == 3
    runs = record_runs(monkeypatch)
    open_page("pages/p7_benchmarks.py")
    assert not [kw for kw in runs if kw.get("timed")], runs  # answered from what the worker kept
    open_page("pages/p8_mha_gqa_mqa.py")
    assert not runs, runs  # its variants' checks too


def test_the_class_shapes_are_read_as_links_and_a_bad_one_is_named_not_guessed():
    good, bad = opening.class_shapes(("?", "heads=8&kv_heads=2&dtype=bfloat16&causal=true", "?kv_heads=2&heads=8&causal=yes&dtype=bfloat16",
                                      "q_len=x", "kvheads=2", "heads=8&kv_heads=3"))
    assert good == ["", "kv_heads=2&dtype=bfloat16&causal=true"]  # the codelab's; the same shape named twice, once
    assert [b.split(" is not a shape ")[0] for b in bad] == [
        "ATTNLAB_CLASS_SHAPES: 'q_len=x'", "ATTNLAB_CLASS_SHAPES: 'kvheads=2'", "ATTNLAB_CLASS_SHAPES: 'heads=8&kv_heads=3'"]
    assert "kvheads: not a setting of the shape" in bad[1] and "q_len must be a positive whole number" in bad[0]


def test_without_class_shapes_nothing_is_visited():
    lines = []
    assert opening.visit_class_shapes("http://127.0.0.1:1", ["", "qkv"], (), log=lines.append) < 1.0
    assert lines == []


def test_a_device_worker_not_yet_warmed_is_warmed_after_the_quiet_and_a_known_one_is_not():
    """opening.keep_warm: warmed at once; a worker set that only loses members or comes back the same (Ray out of
    reach, then back) warms nothing; a new pid (the morning's GPU worker, one started again) warms once, after
    `quiet()`, and is then known."""
    answering = iter([{("device-0", 1)},  # after the first warm-up
                      set(), {("device-0", 1)},  # Ray out of reach, then the same worker back
                      {("device-0", 2)}, {("device-0", 2)},  # started again: new, then read again after its warm-up
                      {("device-0", 2)}])
    events, looks = [], iter(range(4))  # four looks
    opening.keep_warm(lambda: events.append("warm"), lambda: next(answering), lambda: events.append("quiet"),
                      look_s=0, stop=lambda: next(looks, None) is None, log=events.append)
    assert events == ["warm", "quiet", "attnlab: warming again: device worker(s) this server has not warmed: "
                                       "device-0 (pid 2)", "warm"]
