"""What a page says while it waits for the device (pages/waiting.py): every entry point has a phrase, a run says what
it times at which shape, and a request that takes time shows a spinner naming its work (a kept answer none)."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from attnlab.service import entries
from attnlab.service.request import Request
from attnlab.shapes import AttentionShape
from pages import waiting


def test_every_entry_point_has_a_phrase_a_learner_can_read():
    missing = [name for name, _ in entries.LISTED if name not in waiting.WORK]
    assert missing == []


def test_a_run_says_what_it_does_at_which_shape():
    shape = AttentionShape(q_len=256, kv_len=256)
    said = waiting.describe(Request.of("attnlab.measure.runs:run", shape, ("naive", "sdpa_xla", "sdpa_cudnn"),
                                       accuracy=False, timed=True, backward=True))
    assert said == f"timing 3 implementations (forward and backward) at {shape.describe()}"
    assert waiting.describe(Request.of("attnlab.measure.runs:run", shape, ("naive",))).startswith(
        "running and checking against float64 1 implementation at")


def test_every_device_request_of_a_page_waits_under_a_spinner_naming_its_work(monkeypatch):
    """common.on_device (every page's way to the device) waits inside waiting.spinner, whose text names the work
    and counts the seconds (Streamlit shows it only after half a second: a kept answer shows nothing)."""
    import contextlib

    from pages import common

    shown = []

    @contextlib.contextmanager
    def spinner(text, show_time=False):
        shown.append((text, show_time))
        yield

    monkeypatch.setattr(waiting.st, "spinner", spinner)
    monkeypatch.setattr(waiting, "line_now", lambda: " The device had 1 run going and 2 waiting a moment ago.")
    monkeypatch.setattr(common, "_on_device", lambda fn, args, kwargs: "answer")
    assert common.on_device("attnlab.yourturn.grade:check", 1) == "answer"
    assert shown == [("The device worker is checking your answer against float64 at every case … The device had 1 "
                      "run going and 2 waiting a moment ago.", True)]


def test_the_device_worker_is_told_once_of_a_closed_tab_waiting_and_never_of_an_open_one(monkeypatch):
    """pages/session_watch.py: a page's request carries its session; the sessions waiting that Streamlit no longer
    has are sent to the worker(s) (DeviceClient.drop, which drops a run only they wait for: tests/test_service.py)."""
    import threading
    import time

    from attnlab.service.request import Reply
    from pages import session_watch

    told, gate = [], threading.Event()

    class Client:
        def drop(self, sessions):
            told.append(sorted(sessions))
            return len(sessions)

    monkeypatch.setattr(session_watch.service, "client", lambda: Client())
    monkeypatch.setattr(session_watch.service, "send", lambda r: gate.wait(10) and Reply(value=r.session))
    replies = []
    threads = [threading.Thread(target=lambda s=s: replies.append(session_watch.send(Request("m:f", session=s))))
               for s in ("closed-tab", "open-tab")]
    [t.start() for t in threads]
    deadline = time.monotonic() + 5
    while len(session_watch._WAITING) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    open_only = lambda s: s == "open-tab"  # noqa: E731 (Streamlit's runtime.is_active_session)
    assert session_watch.check(open_only) == 1 and told == [["closed-tab"]]
    assert session_watch.check(open_only) == 0 and told == [["closed-tab"]]  # told once
    gate.set()
    [t.join(10) for t in threads]
    assert sorted(r.value for r in replies) == ["closed-tab", "open-tab"] and not session_watch._WAITING
    assert session_watch.stamped(Request("m:f")).session == ""  # outside a page: no session, never dropped


@pytest.mark.parametrize("page, button", [("pages/p4_naive_vs_fused.py", "btn_p4_time"),
                                          ("pages/p7_benchmarks.py", "btn_p7_here")])
def test_a_timing_button_the_cost_model_puts_over_20_s_says_so_before_it_is_pressed(monkeypatch, page, button):
    """Page 7 alone warned, and on the matmul's lower bound: a 2,000-token timing that took 45 s on this CPU was
    announced as nothing (issue 42). Every timing button takes the estimate at naive attention's measured rate."""
    from attnlab.measure import cost
    from tests.apptest_util import open_page, texts

    monkeypatch.setattr(cost, "attention_rate", lambda dtype: 1e9)  # a slow device: 1 GFLOP/s
    at = open_page(page, {"batch": "4", "q_len": "1024", "kv_len": "1024"})
    assert any(b.key == button for b in at.button)
    assert "This will hold the device for about" in texts(at, "warning")
    at.button(key=button).click().run()  # pressed: the warning stays above the work's spinner
    assert "This will hold the device for about" in texts(at, "warning")
    at.run()  # the page again, the work asked for: no button, the estimate beside it
    assert "The lab's cost model puts this at about" in texts(at, "caption")
    small = open_page(page, {"batch": "1", "q_len": "256", "kv_len": "256"})
    assert "This will hold the device" not in texts(small, "warning")
