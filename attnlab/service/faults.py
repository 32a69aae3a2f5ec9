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
    """Abort this process while a learner's program named `digest` is marked in flight (as XLA aborting on a
    learner's program would): its supervisor must not count it toward giving up, and must remember it."""
    from attnlab.yourturn import suspects

    with suspects.running(digest):
        os.abort()


def learner_hang(digest: str, seconds: float, bound_s: float) -> float:
    """Hold this process `seconds` while a learner's program is marked in flight with a bound of `bound_s`
    (a run that does not end): past the bound the watchdog ends the worker."""
    from attnlab.yourturn import suspects

    with suspects.running(digest, bound_s):
        time.sleep(min(float(seconds), 60.0))
    return seconds


def remembered(digest: str) -> str | None:
    """The worker's sentence for a learner's program of that digest (None: it may run)."""
    from attnlab.yourturn import suspects

    return suspects.refusal(digest)
