"""Oldest page first: the device worker's serial resources go to the request whose page began earliest.

    with oldest_first.page_began(request.since):   # the worker, around a request (0: its arrival)
        with oldest_first.PYTHON:                  # lowering and tracing: one thread at a time, oldest page first
            ...

When a class moves to new shapes every learner's page asks for new programs at once, and pages served first go on
to their next page and ask for more. Python's lock (the GIL) takes its threads in no useful order, so a page that
began first competed with every later page's tracing and lowering, and the class waited for its slowest page.
Here a request carries the time its page began (`Request.since`), and the work that waits its turn in the worker
(lowerings and tracings, one at a time; XLA's compiles, as many as `compiled.compile_threads()`; the device's line,
`admission.Device`) is taken in that order: a page that began first is finished first, and the learners who are
already served wait, not the one still waiting.

What threading.Lock, Semaphore and Python's queue.PriorityQueue do not do: a lock (or n places) whose waiters are
ordered by a key of the thread that waits (its page's start), re-entered by a thread inside.
ATTNLAB_OLDEST_FIRST=0 orders every waiter by its arrival instead (the A/B's before). Measured: docs/design-notes.md.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Callable

_LOCAL = threading.local()
_SEQ = itertools.count()


def since() -> float:
    """When this thread's page began (wall clock), else 0.0 (a warm-up, the CLI: ordered by arrival)."""
    return getattr(_LOCAL, "since", 0.0)


@contextlib.contextmanager
def page_began(at: float):
    """This thread works for a page that began at `at` (time.time(); 0: unknown) until the block ends."""
    before, _LOCAL.since = since(), at
    try:
        yield
    finally:
        _LOCAL.since = before


# the most a page's age puts its work ahead: longer than a class's move to new shapes (about 10 s on a GPU, 10-30 s
# on a 2-core CPU), whose last pages it is for: past LEAD_S a first page's requests no longer go before a second
# page's. Longer, and a page that keeps asking keeps the line from pages begun after it for that long.
LEAD_S = 30.0


def key() -> tuple[float, int]:
    """This thread's place among waiters now: its page's start (with ATTNLAB_OLDEST_FIRST, else its arrival), then
    its arrival. A page's start counts at most LEAD_S back: a page that keeps asking for a minute (a sweep) goes ahead
    of work that came up to LEAD_S after each of its requests, not of every page begun since (it would hold the
    device's line from the class). A page's start is never later than now (another pod's clock may run ahead)."""
    from attnlab.settings import settings

    now = time.time()
    at = min(max(since() or now, now - LEAD_S), now) if settings().oldest_first else now
    return at, next(_SEQ)


class Ordered:
    """Up to `slots()` threads inside at once, waiters let in by `key()`, smallest first; a thread inside may enter
    again (it takes no second place)."""

    def __init__(self, slots: Callable[[], int] = lambda: 1) -> None:
        self._slots = slots
        self._cond = threading.Condition()
        self._inside: dict[int, int] = {}  # thread -> how deep it is inside
        self._waiting: list[tuple[float, int]] = []  # a heap of the waiters' keys

    def __enter__(self) -> Ordered:
        me = threading.get_ident()
        with self._cond:
            if me in self._inside:
                self._inside[me] += 1
                return self
            mine = key()
            heapq.heappush(self._waiting, mine)
            try:
                self._cond.wait_for(lambda: len(self._inside) < max(1, self._slots()) and self._waiting[0] == mine)
            except BaseException:  # interrupted while waiting: its place goes, or it would stop the line for good
                self._waiting.remove(mine)
                heapq.heapify(self._waiting)
                self._cond.notify_all()
                raise
            heapq.heappop(self._waiting)
            self._inside[me] = 1
            self._cond.notify_all()  # the next waiter may fit too
            return self

    def __exit__(self, *exc) -> None:
        me = threading.get_ident()
        with self._cond:
            self._inside[me] -= 1
            if not self._inside[me]:
                del self._inside[me]
                self._cond.notify_all()

    def waiting(self) -> int:
        return len(self._waiting)

    def inside(self) -> int:
        return len(self._inside)


PYTHON = Ordered()  # lowering and tracing in the device worker (backends.base: lower, trace_error)
