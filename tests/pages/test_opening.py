"""pages/opening.py: the warm-up asks, at the codelab's shape, what pages 6 and 7 ask for as they open."""

import streamlit as st

from attnlab import backends, device, service
from attnlab.shapes import AttentionShape
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
    sent = sent_by(monkeypatch, "pages/p6_causal.py", "pages/p7_benchmarks.py")
    shape = AttentionShape()
    runnable = [n for n, why in backends.unmet(shape).items() if why is None]
    asked = opening.requests(shape, runnable, quick=opening.untuned_on_open(device.info().backend == "gpu"))
    assert len(asked) == 2 and {(r.fn, r.args, r.kwargs) for r in asked} <= sent, (asked, sent)


def test_after_the_warm_up_page_7_opens_at_the_codelab_shape_without_timing_anything(monkeypatch):
    st.cache_data.clear()
    service.client().forget()  # nothing kept from earlier tests: the warm-up's answers alone
    assert opening.warm() == 2
    runs = record_runs(monkeypatch)
    open_page("pages/p7_benchmarks.py")
    assert not [kw for kw in runs if kw.get("timed")], runs  # answered from what the worker kept
