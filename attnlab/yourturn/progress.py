"""Where the class is stuck: per exercise, distinct answers, passes and the mistakes named, as counts only.

    record("attention", passed=False, mistakes=("no scale",), learner=token, answer=digest)   # after a check
    snapshot()  ->  {"attention": {"attempts": 12, "passes": 7, "refused": 1, "learners": 9,
                                   "mistakes": {"no scale": 4}}, ...}

An attempt is one distinct answer of one learner: the same code checked twelve times by one learner counts
once (its mistakes too), so the counts say how many answers were wrong, not how often a button was pressed.
`learner` is an anonymous token of the browser session and `answer` a hash of the code; both are hashed
again here and only the pair's hash is kept. Kept in the device worker that every progress request is
pinned to (one for the class), in memory: no learner's code and no identity, gone when the worker restarts.
"""

from __future__ import annotations

import collections
import hashlib
import threading

_LOCK = threading.Lock()
_COUNTS: dict[str, dict] = {}
_SEEN: dict[str, set[str]] = {}  # exercise -> hashes of (learner, answer) already counted
_LEARNERS: dict[str, set[str]] = {}
MAX_SEEN = 100_000  # per exercise: past this, further answers still count (a class never gets near)
PIN = "the class's progress"  # every progress request meets one worker


def _h(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:20]


def record(exercise: str, passed: bool, mistakes: tuple[str, ...] = (), refused: bool = False,
           learner: str = "", answer: str = "") -> bool:
    """Count one checked answer; False when this learner's very answer was counted already (nothing changes)."""
    with _LOCK:
        c = _COUNTS.setdefault(exercise, {"attempts": 0, "passes": 0, "refused": 0, "learners": 0,
                                          "mistakes": collections.Counter()})
        if learner or answer:
            pair, seen = _h(learner, answer), _SEEN.setdefault(exercise, set())
            if pair in seen:
                return False
            if len(seen) < MAX_SEEN:
                seen.add(pair)
            people = _LEARNERS.setdefault(exercise, set())
            if learner and len(people) < MAX_SEEN:
                people.add(_h(learner))
                c["learners"] = len(people)
        c["attempts"] += 1
        c["passes"] += bool(passed)
        c["refused"] += bool(refused)
        c["mistakes"].update(mistakes)
        return True


def snapshot() -> dict[str, dict]:
    with _LOCK:
        return {name: {**c, "mistakes": dict(c["mistakes"].most_common())} for name, c in _COUNTS.items()}


def reset() -> None:
    with _LOCK:
        _COUNTS.clear()
        _SEEN.clear()
        _LEARNERS.clear()
