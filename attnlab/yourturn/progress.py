"""Where the class is stuck: per exercise, attempts, passes and the mistakes named, as counts only.

    record("attention", passed=False, mistakes=("no scale",))     # after every check a learner makes
    snapshot()  ->  {"attention": {"attempts": 12, "passes": 7, "mistakes": {"no scale": 4}}, ...}

Kept in the device worker that every progress request is pinned to (one for the class), in memory:
no learner's code and no identity, only numbers, gone when the worker restarts.
"""

from __future__ import annotations

import collections
import threading

_LOCK = threading.Lock()
_COUNTS: dict[str, dict] = {}
PIN = "the class's progress"  # every progress request meets one worker


def record(exercise: str, passed: bool, mistakes: tuple[str, ...] = (), refused: bool = False) -> None:
    with _LOCK:
        c = _COUNTS.setdefault(exercise, {"attempts": 0, "passes": 0, "refused": 0, "mistakes": collections.Counter()})
        c["attempts"] += 1
        c["passes"] += bool(passed)
        c["refused"] += bool(refused)
        c["mistakes"].update(mistakes)


def snapshot() -> dict[str, dict]:
    with _LOCK:
        return {name: {**c, "mistakes": dict(c["mistakes"].most_common())} for name, c in _COUNTS.items()}


def reset() -> None:
    with _LOCK:
        _COUNTS.clear()
