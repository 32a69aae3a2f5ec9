"""Turns: at most ATTNLAB_MAX_RUNS page scripts run at once in this server; the others wait."""

from __future__ import annotations

import contextlib
import os
import threading

import streamlit as st

from attnlab import waiting

_SLOTS: dict[int, threading.BoundedSemaphore] = {}
_SLOTS_LOCK = threading.Lock()


def script_slots() -> threading.BoundedSemaphore | None:
    """At most ATTNLAB_MAX_RUNS page scripts run at once (unset or 0: no limit); the others wait their turn.

    Page scripts are Python and share one GIL: with dozens running at once each crawls, and
    Streamlit's own locks (its config, its chart conversion) form convoys. A few at a time finish
    sooner, so the slowest pages of a class come sooner too (scripts/capacity.py; deploy/README.md)."""
    limit = int(os.environ.get("ATTNLAB_MAX_RUNS", "0") or 0)
    if limit <= 0:
        return None
    with _SLOTS_LOCK:
        return _SLOTS.setdefault(limit, threading.BoundedSemaphore(limit))


_HELD = threading.local()  # the slots this thread's page run holds a turn of, if any
_RUNNING = [0]  # page runs in progress in this process, waiting for a turn or not
_QUIET = threading.Condition()


@contextlib.contextmanager
def turn():
    """This session's turn to run its page; says so on the page while it waits."""
    with _QUIET:
        _RUNNING[0] += 1
    try:
        slots = script_slots()
        if slots is None:
            yield
            return
        if not slots.acquire(blocking=False):
            note = st.empty()
            note.caption("⏳ The server is running other learners' pages; yours starts in a moment.")
            slots.acquire()
            note.empty()
        _HELD.slots = slots
        try:
            yield
        finally:
            give_back()
    finally:
        with _QUIET:
            _RUNNING[0] -= 1
            _QUIET.notify_all()


def running() -> bool:
    """Whether any page runs in this process now (waiting for a turn or not)."""
    return _RUNNING[0] > 0


def wait_for_quiet(settle_s: float = 2.5) -> None:
    """Block until no page has run in this process for `settle_s` seconds: background work (the
    warm-up) yields to learners, and the settle time leaves the CPU to the browser drawing the page
    just sent (on a laptop they share it). A learner opening pages one after another starts a page
    run about every 1.3 s on two cores (0.4 s of drawing after a run, 0.4 s of Streamlit's start in
    the next tab); with 1 s the warm-up's compiles (0.4-1.6 s a shape) slipped into those gaps and
    page 1 in a new tab took 1.3-1.9 s instead of 1.2-1.35 s (scripts/page_speed.py, ATTNLAB_WARM=1 vs 0)."""
    with _QUIET:
        while True:
            _QUIET.wait_for(lambda: _RUNNING[0] == 0)
            if not _QUIET.wait_for(lambda: _RUNNING[0] > 0, timeout=settle_s):
                return


def give_back() -> None:
    """The page run on this thread gives its turn back (once): it is done, or it is about to wait for
    the device or another process's result, which needs no Python, so another page may run meanwhile.
    A run that gave its turn back to wait goes on without one: taking a turn again while holding the
    device could leave the device held while waiting on pages that wait for the device."""
    slots = getattr(_HELD, "slots", None)
    if slots is not None:
        _HELD.slots = None
        slots.release()


waiting.register(give_back)
