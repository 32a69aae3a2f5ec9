"""Faults on request, for tests of the process boundary (registered only with ATTNLAB_FAULT_INJECTION=1)."""

from __future__ import annotations

import os
import time


def abort() -> None:
    """End this process as a failed check inside XLA does (SIGABRT): no Python `try` can catch it."""
    os.abort()


def sleep(seconds: float) -> float:
    """Hold a request for `seconds` (a request in flight while a test kills the worker)."""
    time.sleep(min(float(seconds), 60.0))
    return seconds


def learner_abort(digest: str) -> None:
    """Abort with learner program `digest` in flight: its supervisor remembers it, not giving up for it."""
    from attnlab.yourturn import suspects

    with suspects.running(digest):
        os.abort()


def learner_hang(digest: str, seconds: float, bound_s: float) -> float:
    """A learner's program in flight for `seconds`, bound `bound_s`: past it the watchdog ends the worker."""
    from attnlab.yourturn import suspects

    with suspects.running(digest, bound_s):
        time.sleep(min(float(seconds), 60.0))
    return seconds


def remembered(digest: str) -> str | None:
    """The worker's sentence for a learner's program of that digest (None: it may run)."""
    from attnlab.yourturn import suspects

    return suspects.refusal(digest)
