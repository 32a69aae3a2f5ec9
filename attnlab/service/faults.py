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
