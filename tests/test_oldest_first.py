"""Oldest page first (attnlab/oldest_first.py): the device worker's one-at-a-time work (lowering and tracing, the
device's line) goes to the request whose page began earliest, whatever order the requests came in."""

from __future__ import annotations

import threading
import time

import pytest

from attnlab import oldest_first, settings
from attnlab.admission import Device
from attnlab.budget import Budget
from attnlab.service.request import Request

MIB = 2**20


def _in_turn(enter, began: list[float], wait_for) -> list[float]:
    """Threads whose pages began at `began` (in that order of arrival, each once the one before waits), all entering
    `enter()` while another thread holds it; the order in which they got in, by their pages' start."""
    order: list[float] = []
    held, release = threading.Event(), threading.Event()

    def holder():
        with enter():
            held.set()
            release.wait(10)

    def waiter(at: float):
        with oldest_first.page_began(at), enter():
            order.append(at)

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    assert held.wait(10)
    for i, at in enumerate(began):
        threads.append(threading.Thread(target=waiter, args=(at,)))
        threads[-1].start()
        deadline = time.monotonic() + 10
        while wait_for() < i + 1 and time.monotonic() < deadline:
            time.sleep(0.002)
    release.set()
    [t.join(10) for t in threads]
    return order


def _began() -> tuple[float, list[float]]:
    """Now, and the pages' starts in their order of arrival; 0.0: no page (a warm-up), its arrival instead (read
    at the test's start: a page's age counts at most LEAD_S)."""
    now = time.time()
    return now, [now - 1, now - 5, now - 3, 0.0, now - 4]


def test_lowerings_and_traces_go_to_the_page_that_began_first():
    now, began = _began()
    lock = oldest_first.Ordered()
    order = _in_turn(lambda: lock, began, lock.waiting)
    assert order == [now - 5, now - 4, now - 3, now - 1, 0.0]


def test_with_the_setting_off_they_go_in_order_of_arrival():
    _, began = _began()
    lock = oldest_first.Ordered()
    with settings.override(oldest_first=False):
        order = _in_turn(lambda: lock, began, lock.waiting)
    assert order == began


def test_the_holder_enters_again_and_lets_go_once_outside():
    lock, got = oldest_first.Ordered(), threading.Event()
    with lock:
        with lock:
            pass
        t = threading.Thread(target=lambda: lock.__enter__() and got.set())
        t.start()
        assert not got.wait(0.1)  # still held by the outer block
    assert got.wait(10)


def test_the_devices_line_takes_runs_by_their_pages_start():
    now, began = _began()
    d = Device(Budget(100 * MIB, 100 * MIB, False, "a test's budget"))
    order = _in_turn(lambda: d.use(device_bytes=MIB), began, lambda: d.waiting)
    assert order == [now - 5, now - 4, now - 3, now - 1, 0.0]


def test_a_page_from_a_clock_that_runs_ahead_waits_no_longer_than_one_that_just_arrived():
    with oldest_first.page_began(time.time() + 3600):
        ahead = oldest_first.key()
    assert ahead[0] <= time.time()


def test_a_page_that_keeps_asking_goes_ahead_of_work_that_came_at_most_lead_s_after_it():
    """A sweep's page began a minute ago: its new request goes before one that arrives within LEAD_S of it, not before
    every page begun since (it would take the device's line from the class for as long as it asks)."""
    with oldest_first.page_began(time.time() - 60):
        sweep = oldest_first.key()
    assert time.time() - oldest_first.LEAD_S - 1 < sweep[0] < time.time() - oldest_first.LEAD_S + 1
    with oldest_first.page_began(time.time() - 3):
        assert oldest_first.key() > sweep  # a page begun 3 s ago: behind the sweep's request of now


def test_when_a_page_began_travels_with_its_request_but_does_not_make_it_another_request():
    import dataclasses

    r = Request.of("attnlab.measure.runs:run", 1)
    assert dataclasses.replace(r, since=time.time()).key == r.key


def test_the_worker_serves_a_request_as_of_its_pages_start_and_its_compile_pool_too(monkeypatch):
    """DeviceWorker._compute holds `Request.since` for the entry point's thread, and compile_many's pool threads
    compile for it with the same start (their lowerings wait in its place)."""
    from attnlab.measure import compiled
    from attnlab.service import entries, worker

    seen: list[float] = []
    monkeypatch.setattr(entries, "get", lambda fn: type("E", (), {"fn": staticmethod(lambda: seen.append(
        oldest_first.since())), "keep": staticmethod(lambda v: False)}))
    now = time.time()
    worker.DeviceWorker("test")._compute(Request("m:f", since=now - 7))
    assert seen == [now - 7]

    pooled: list[float] = []
    monkeypatch.setattr(compiled, "compile_backend", lambda *job: pooled.append(oldest_first.since()))
    with settings.override(compile_threads=2), oldest_first.page_began(now - 9):
        compiled.compile_many([("a",), ("b",)])
    assert pooled == [now - 9, now - 9]


@pytest.mark.parametrize("ahead", [False, True])
def test_a_pages_requests_carry_when_its_run_began(monkeypatch, ahead):
    """pages/activity.page_running (app.py, around every page run) marks the run's start; every request the page
    sends, from its own thread, a waiting thread or asked ahead, carries it."""
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from attnlab.service.request import Reply
    from pages import session_watch

    sent: list[Request] = []
    monkeypatch.setattr(session_watch.service, "send", lambda r: sent.append(r) or Reply(value="ok"))
    before = time.time()
    at = AppTest.from_function(_page, args=(ahead,), default_timeout=30).run()
    assert not at.exception
    deadline = time.monotonic() + 10
    while not sent and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sent and all(before <= r.since <= time.time() and r.session for r in sent)


def _page(ahead: bool):
    import time

    import streamlit as st

    from pages import activity, common

    with activity.page_running():
        if ahead:
            common.ask_ahead("attnlab.yourturn.grade:check", 1)
            time.sleep(0.5)
        else:
            st.write(common.on_device("attnlab.yourturn.grade:check", 1))


def test_compiles_go_n_at_a_time_and_the_oldest_pages_get_the_places_first():
    """compiled._COMPILES: compile_threads() places for every caller's compiles (the pool's and a request's own)."""
    now, began = _began()
    places = oldest_first.Ordered(lambda: 2)
    inside, most, order = [0], [0], []
    guard = threading.Lock()

    def enter():
        class Inside:
            def __enter__(self):
                places.__enter__()
                with guard:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])

            def __exit__(self, *exc):
                time.sleep(0.02)
                with guard:
                    inside[0] -= 1
                places.__exit__()

        return Inside()

    held, release = threading.Event(), threading.Event()
    holders = [threading.Thread(target=lambda: (places.__enter__(), held.set(), release.wait(10), places.__exit__()))
               for _ in range(2)]
    [t.start() for t in holders]
    deadline = time.monotonic() + 10
    while places.inside() < 2 and time.monotonic() < deadline:
        time.sleep(0.002)
    waiters = []
    for i, at in enumerate(began):
        waiters.append(threading.Thread(target=lambda at=at: _enter_as(at, enter, order)))
        waiters[-1].start()
        while places.waiting() < i + 1 and time.monotonic() < deadline:
            time.sleep(0.002)
    assert places.inside() == 2 and places.waiting() == len(began)
    release.set()
    [t.join(10) for t in holders + waiters]
    assert most[0] <= 2 and sorted(order[:2]) == [now - 5, now - 4] and order[-1] == 0.0


def _enter_as(at: float, enter, order: list) -> None:
    with oldest_first.page_began(at), enter():
        order.append(at)


def test_the_request_log_says_how_old_each_requests_page_was(tmp_path):
    """ATTNLAB_REQUEST_LOG's `page_s`: the page's age when its request ended (None without a page), so a rehearsal's
    log shows that pages' starts reached the worker across the boundary."""
    import json

    from attnlab.service import worker

    log = tmp_path / "req.log"
    w = worker.DeviceWorker("test")
    with settings.override(request_log=str(log)):
        w._log(Request("m:f", since=time.time() - 2.5), "kept", time.perf_counter())
        w._log(Request("m:f"), "kept", time.perf_counter())
    ages = [json.loads(line)["page_s"] for line in log.read_text().splitlines()]
    assert 2.5 <= ages[0] < 4 and ages[1] is None


def test_a_waiter_interrupted_while_waiting_gives_its_place_up():
    lock = oldest_first.Ordered()
    calls = [0]

    def slots():  # the waiter's check: the first call raises, as an interrupt would while it waits
        calls[0] += 1
        if calls[0] == 1:
            raise KeyboardInterrupt
        return 1

    lock._slots = slots
    with pytest.raises(KeyboardInterrupt):
        lock.__enter__()
    assert lock.waiting() == 0 and lock.inside() == 0
    with lock:  # the next one gets in
        assert lock.inside() == 1
