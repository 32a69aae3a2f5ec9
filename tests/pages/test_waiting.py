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
    assert waiting.describe(Request.of("attnlab.measure.runs:run", shape, ("naive",))) == (
        f"running naive and checking it against float64 at {shape.describe()}")
    assert waiting.describe(Request.of("attnlab.measure.runs:run", shape, ("naive", "sdpa_xla"))) == (
        f"running 2 implementations and checking each against float64 at {shape.describe()}")
    # a program asked alone (pages/fused_ui.programs) is compiled, not run: the spinner must not say it runs
    assert waiting.describe(Request.of("attnlab.measure.runs:run", shape, ("naive", "sdpa_xla"), accuracy=False,
                                       program=True)) == f"compiling 2 implementations (nothing is run) at {shape.describe()}"


def test_a_request_says_where_it_stands_in_the_device_workers_lines():
    """waiting.place reads WorkerInfo.line (the request on the device, then those waiting, in order) for this very
    request's key, in any worker; one not in a line is compiling (issue 42: a place in the line, not a count)."""
    from types import SimpleNamespace

    def Info(running, waiting, line, builds=(), building=(), by_page=False):  # noqa: N802 (WorkerInfo's fields place reads)
        return SimpleNamespace(running=running, waiting=waiting, line=line, builds=builds, building=building,
                               by_page=by_page)

    other = Info(running=1, waiting=1, line=("a", "b"), builds=("p",), building=())
    mine = Info(running=1, waiting=3, line=("c", "d", "e", "mine"))
    assert waiting.place("mine", [other, mine]) == "Yours is 3rd in the device's line, behind the run on the device and 2 more waiting."
    assert waiting.place("b", [other, mine]) == "Yours is 1st in the device's line, behind the run on the device."
    assert waiting.place("c", [other, mine]) == "Yours holds the device now."
    assert waiting.place("x", [Info(running=0, waiting=2, line=("x", "y"))]) == "Yours is 1st in the device's line, next to go."
    assert waiting.place("y", [Info(running=0, waiting=2, line=("x", "y"))]) == (
        "Yours is 2nd in the device's line, behind 1 waiting.")
    assert waiting.place("p", [other]) == (
        "Yours waits to compile: tuned compiles run between runs, never during one (they would slow its timing), so "
        "the runs queued before it go first. The device has 1 run going and 1 waiting.")
    assert waiting.place("q", [Info(0, 0, (), building=("q",))]).startswith("Yours is compiling its programs")
    assert waiting.place("z", [other, mine]) == (
        "Yours is not in the device's line yet: the worker traces and compiles it first, after 1 request waiting to "
        "compile. The device has 2 runs going and 4 waiting.")
    assert waiting.place("z", [Info(running=0, waiting=0, line=())]).endswith("traces and compiles it first.")
    # between two runs none is going: said so, not as "0 runs going"
    assert waiting.place("z", [Info(running=0, waiting=1, line=("x",))]).endswith(
        "compiles it first. 1 run waits to start on the device.")
    assert waiting.place("z", [Info(running=0, waiting=3, line=("x", "y", "w"))]).endswith(" 3 runs wait to start on the device.")
    # in page order a request begun earlier can come in ahead of this one: the sentence says its place can move back
    assert waiting.place("y", [Info(running=0, waiting=2, line=("x", "y"), by_page=True)]) == (
        "Yours is 2nd in the device's line, behind 1 waiting. Requests from pages opened before yours go first, so your "
        "place can still move back.")
    # before it takes a place no order is claimed: compiles run several at once, and a browser pass saw the first
    # page opened wait while newer ones compiled ("pages opened before yours ... first" misled there)
    assert waiting.place("z", [Info(running=1, waiting=2, line=("x", "y", "w"), by_page=True)]) == (
        "Yours is not in the device's line yet: the worker traces and compiles it first. The device has 1 run going "
        "and 2 waiting.")
    assert [waiting.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "111th"]


def _slow_page():

    import streamlit as st

    from pages import common

    st.write(common.on_device("attnlab.yourturn.grade:check", 1))
    st.write(common.on_device("attnlab.yourturn.grade:check", 2))


def test_a_request_that_waits_shows_a_spinner_naming_its_work_and_its_place_looked_at_again_as_it_waits(monkeypatch):
    """common.on_device (every page's way to the device) runs the request in a thread carrying the page's context
    (its session travels with it) while the page shows the spinner and, every EVERY_S seconds, this request's place
    in the line; an answer within half a second shows neither."""
    from streamlit.testing.v1 import AppTest

    from pages import common, session_watch

    shown, placed, sessions = [], [], []

    import contextlib
    import time

    @contextlib.contextmanager
    def spinner(text, show_time=False):
        shown.append((text, show_time))
        yield

    def on_device(fn, args, kwargs):
        sessions.append(session_watch.current())
        time.sleep(1.5 if args == (1,) else 0.0)
        return f"answer {args[0]}"

    monkeypatch.setattr(waiting.st, "spinner", spinner)
    monkeypatch.setattr(waiting, "EVERY_S", 0.4)
    monkeypatch.setattr(waiting, "place_now", lambda key: placed.append(key) or "Yours is 2nd in the device's line.")
    monkeypatch.setattr(common, "_on_device", on_device)
    at = AppTest.from_function(_slow_page, default_timeout=30).run()
    assert not at.exception and [m.value for m in at.markdown] == ["answer 1", "answer 2"]
    said = "Your request to the device worker: checking your answer against float64 at every case …"
    assert shown == [(said, True), (said, True)]
    slow = Request.of("attnlab.yourturn.grade:check", 1).key
    assert 2 <= len(placed) <= 4 and set(placed) == {slow}  # looked at again as it waited; the quick one never
    assert len(sessions) == 2 and sessions[0] and sessions[0] == sessions[1]  # the page's session, in the thread


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
    at.button(key=button).click().run()  # pressed (kept by its callback): the estimate stays above the work's spinner
    assert "The lab's cost model puts this at about" in texts(at, "caption")
    at.run()  # the page again, the work asked for: no button, the estimate beside it
    assert "The lab's cost model puts this at about" in texts(at, "caption") and not any(b.key == button for b in at.button)
    small = open_page(page, {"batch": "1", "q_len": "256", "kv_len": "256"})
    assert "This will hold the device" not in texts(small, "warning")


def test_while_a_worker_is_started_again_a_waiting_request_says_so_and_asks_no_figures(monkeypatch):
    """A request sent while Ray restarts its worker waits for it (attnlab/service/ray_workers.py); meanwhile the
    spinner's line says the worker is being started again, not a place in a line that the restart makes stale, and
    does not ask for the workers' figures (they would wait for the restart too)."""
    from attnlab import service

    restarting = [True]
    asked = []
    monkeypatch.setattr(service, "client", lambda: type("Client", (), {"restarting": lambda self: restarting[0]})())
    monkeypatch.setattr(waiting, "lines", lambda: asked.append(1) or [])
    assert waiting.place_now("k") == waiting.RESTARTING and asked == []
    restarting[0] = False
    assert waiting.place_now("k").startswith("Yours is not in the device's line yet") and asked == [1]


def test_a_look_at_the_line_that_waits_out_a_restart_leaves_the_caption_saying_so(monkeypatch):
    """A look at the workers' lines that meets a worker Ray is starting again waits for it (seconds), and Ray's first
    refusal comes 2 s after the death, if at all: the caption is drawn from a look in a thread of its own and, while
    that look waits, from `restarting()`. Seen in Chromium on a local Ray: the spinner counted the seconds of a
    restart with no line under it, the page's thread stuck in that look."""
    import threading
    import time

    from streamlit.testing.v1 import AppTest

    from attnlab import service
    from pages import common

    gate, restarting, captions = threading.Event(), [False], []

    class Slot:  # st.empty() as the spinner's caption uses it
        def caption(self, text):
            captions.append(text)

        def empty(self):
            pass

    def lines():  # the look meets the restart: the watch begins, and the look waits until the worker answers
        restarting[0] = True
        gate.wait(10)
        restarting[0] = False
        return []

    def on_device(fn, args, kwargs):
        if args == (1,):
            time.sleep(2.0)
            gate.set()
        return f"answer {args[0]}"

    monkeypatch.setattr(service, "client", lambda: type("Client", (), {"restarting": lambda self: restarting[0]})())
    monkeypatch.setattr(waiting, "lines", lines)
    monkeypatch.setattr(waiting, "EVERY_S", 0.3)
    monkeypatch.setattr(waiting.st, "empty", Slot)
    monkeypatch.setattr(common, "_on_device", on_device)
    at = AppTest.from_function(_slow_page, default_timeout=30).run()
    assert not at.exception and [m.value for m in at.markdown] == ["answer 1", "answer 2"]
    assert waiting.RESTARTING in captions[:3]  # said within a second of the first look, not after the restart


def _after_one_request():

    import streamlit as st

    from pages import common

    common.on_device("attnlab.yourturn.grade:check", 1)
    st.write("after")


def test_a_pages_later_elements_keep_their_places_whether_its_wait_was_long_or_short(monkeypatch):
    """The caption's place under the spinner is taken in both cases: were it taken only for a long wait, every later
    element would move by one between a slow run and a quick one, and the browser would keep the old result where
    the new one was not yet drawn (seen on page 7 as a flaky test under CI's load)."""
    import time

    from streamlit.testing.v1 import AppTest

    from pages import common
    from tests.apptest_util import Screen

    screen = Screen(monkeypatch)
    paths = {}
    monkeypatch.setattr(waiting, "EVERY_S", 0.2)
    monkeypatch.setattr(waiting, "place_now", lambda key: "Yours holds the device now.")
    for seconds in (1.0, 0.0):
        monkeypatch.setattr(common, "_on_device", lambda fn, args, kwargs, s=seconds: time.sleep(s) or "answer")
        screen.sent.clear()
        at = AppTest.from_function(_after_one_request, default_timeout=30).run()
        assert not at.exception
        paths[seconds] = [tuple(m.metadata.delta_path) for m in screen.sent
                          if m.delta.WhichOneof("type") == "new_element" and "after" in str(m.delta.new_element)]
    assert paths[1.0] and paths[1.0] == paths[0.0]


def _asked_page():
    import streamlit as st

    from pages import sections, waiting

    st.subheader("Before")
    if sections.on_demand("t_demo", "Run it", 1):
        with waiting.fresh():
            st.write("result")
    st.subheader("Next section")


def test_what_follows_an_asked_computation_keeps_its_place_before_during_and_after_the_click():
    """sections.on_demand takes the same places on the page whether it draws its button (before and at the click) or
    not (every run after): a browser keeps the last run's element at each place until it is drawn again, so with the
    places shifted the click's spinner caption stayed, faded, under the next run's own (two places in the device's
    line at once), and the next section's heading vanished under the spinner while the work ran."""
    from streamlit.testing.v1 import AppTest

    def next_section(at) -> int:
        return next(i for i, c in at.main.children.items() if getattr(c, "value", None) == "Next section")

    at = AppTest.from_function(_asked_page, default_timeout=30).run()
    before = next_section(at)
    at.button(key="btn_t_demo").click().run()
    assert [m.value for m in at.markdown] == ["result"] and next_section(at) == before
    at.run()  # the run after the click: no button, the result kept
    assert [m.value for m in at.markdown] == ["result"] and not at.button and next_section(at) == before


def _interrupted_page():
    import streamlit as st

    from pages import sections

    if st.session_state.pop("stop_before_the_button", False):
        st.stop()  # as a run that the learner's next click restarts before it reaches the button
    if sections.on_demand("t_demo", "Run it", 1):
        st.write("result")


def test_a_click_is_kept_even_when_its_run_stops_before_reaching_the_button():
    """A browser pass pressed two buttons within a second: the first click's run was restarted before it reached its
    button, `st.button` never returned True, and the click was lost (its computation never ran). The ask is kept by
    the button's callback, which Streamlit runs before the script."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_interrupted_page, default_timeout=30).run()
    at.session_state["stop_before_the_button"] = True
    at.button(key="btn_t_demo").click().run()
    assert not at.markdown  # that run stopped before it drew anything
    at.run()
    assert [m.value for m in at.markdown] == ["result"] and not at.button
