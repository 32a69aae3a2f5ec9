"""Work whose browser tab has closed does not hold the device's line.

Every request a page sends carries its session's id (`send`). While any is in flight, a watcher thread asks
Streamlit's runtime every EVERY_S seconds whether the sessions waiting are still connected, and tells the device
worker(s) of those that are not (`DeviceClient.drop`): a run that only closed tabs wait for leaves the line instead
of holding it for every other learner (issue 42: a closed tab's T4096 timing ran for minutes ahead of others).
A run already on the device finishes its turn; only waiting is cut short. AppTest has no runtime: nothing is dropped.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable

from attnlab import service
from attnlab.service.request import Reply, Request
from pages import activity

EVERY_S = 2.0  # how often the sessions waiting are looked at (a run waits seconds to minutes for its turn)

_LOCK = threading.Lock()
_WAITING: collections.Counter[str] = collections.Counter()  # session id -> its requests in flight from this process
_TOLD: set[str] = set()  # sessions the worker(s) already know have ended
_WATCHER: list[threading.Thread] = []


def current() -> str:
    """This script run's session id ('' outside a page: a pool thread, the CLI)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    return ctx.session_id if ctx is not None else ""


def stamped(request: Request) -> Request:
    """The request with the caller's session and when its page began (call it in the page's thread, before handing
    the request on)."""
    if request.session:
        return request
    return dataclasses.replace(request, session=current(), since=request.since or activity.began())


def send(request: Request) -> Reply:
    """service.send(request), its session known to the watcher while it waits."""
    request = stamped(request)
    if not request.session:
        return service.send(request)
    with _LOCK:
        _WAITING[request.session] += 1
        if not _WATCHER:
            _WATCHER.append(threading.Thread(target=_watch, name="attnlab-session-watch", daemon=True))
            _WATCHER[0].start()
    try:
        return service.send(request)
    finally:
        with _LOCK:
            _WAITING[request.session] -= 1
            if _WAITING[request.session] <= 0:
                del _WAITING[request.session]
                _TOLD.discard(request.session)


def check(active: Callable[[str], bool] | None = None) -> int:
    """Tell the device worker(s) of the sessions waiting here that have ended (`active`: Streamlit's runtime);
    how many requests they dropped."""
    if active is None:
        from streamlit.runtime import Runtime

        if not Runtime.exists():
            return 0
        active = Runtime.instance().is_active_session
    with _LOCK:
        gone = [s for s in _WAITING if s not in _TOLD and not active(s)]
        _TOLD.update(gone)
    if not gone:
        return 0
    try:
        return service.client().drop(gone)
    except Exception:  # noqa: BLE001 (a worker that cannot be reached: its requests fail on their own)
        return 0


def _watch() -> None:
    while True:
        time.sleep(EVERY_S)
        check()
