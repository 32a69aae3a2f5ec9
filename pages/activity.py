"""Whether learners' pages are running in this server process, so background work (the warm-up) waits for quiet;
and when each browser session's page run began, which its requests carry to the device worker (`began`)."""

from __future__ import annotations

import contextlib
import threading
import time

_RUNNING = [0]  # page runs in progress in this process
_QUIET = threading.Condition()
_BEGAN: dict[str, float] = {}  # a browser session -> when its page run in progress began


@contextlib.contextmanager
def page_running():
    """Around one page run (app.py)."""
    with _QUIET:
        _RUNNING[0] += 1
    session = _session()
    _BEGAN[session] = time.time()
    try:
        yield
    finally:
        _BEGAN.pop(session, None)
        with _QUIET:
            _RUNNING[0] -= 1
            _QUIET.notify_all()


def began() -> float:
    """When this browser session's page run began (time.time()), else 0.0; in the page's thread or one carrying its
    script run's context. Its requests carry it (`Request.since`), so the device worker serves the page that began
    first first (attnlab/oldest_first.py)."""
    return _BEGAN.get(_session(), 0.0)


def _session() -> str:
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    return ctx.session_id if ctx is not None else ""


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
