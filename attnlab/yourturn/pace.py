"""How often one learner may press Check: at most `limit` presses in any `window_s` seconds.

    why = pace.admit(presses, time.monotonic(), settings().checks_per_minute)   # None: send it; else the sentence

A sliding window over one learner's press times (pruned here to the window, so it stays at most `limit` long).
Every check costs the class a disposable tracing process and a compile in the device worker, and one learner
pressing Check in a loop must not queue ahead of everyone else. `Presses` keeps the windows of a whole UI process
keyed by browser (pages/yourturn_ui.py: the signed-in user under IAP, else the browser's cookie), so more tabs do
not buy more presses.
"""

from __future__ import annotations

import math
import threading


def admit(presses: list[float], now: float, limit: int, window_s: float = 60.0) -> str | None:
    """None when a press at `now` is within the limit (and then it is counted); else the sentence refusing it."""
    presses[:] = [t for t in presses if now - t < window_s]
    if limit and len(presses) >= limit:
        wait = max(1, math.ceil(window_s - (now - presses[0])))
        return (f"You have pressed Check {len(presses)} times in the last {window_s:.0f} s, the most this lab allows "
                f"one learner, so this press was not sent. Wait {wait} s, then press Check again (your code stays "
                "as it is). The whole class shares one GPU worker.")
    presses.append(now)
    return None


class Presses:
    """Every learner's window in one process, shared by their tabs (a lock: each tab's script runs in a thread);
    windows that emptied are let go once more than `keep` learners are held."""

    def __init__(self, keep: int = 1000):
        self.keep = keep
        self._lock = threading.Lock()
        self._by: dict[str, list[float]] = {}

    def admit(self, who: str, now: float, limit: int, window_s: float = 60.0) -> str | None:
        with self._lock:
            why = admit(self._by.setdefault(who, []), now, limit, window_s)
            if len(self._by) > self.keep:
                self._by = {k: v for k, v in self._by.items() if v and now - v[-1] < window_s}
            return why
