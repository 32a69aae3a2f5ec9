"""How often one learner may press Check: at most `limit` presses in any `window_s` seconds.

    why = pace.admit(presses, time.monotonic(), settings().checks_per_minute)   # None: send it; else the sentence

A sliding window over the session's own press times (the list the page keeps in its session state; pruned here
to the window, so it stays at most `limit` long). Every check costs the class a disposable tracing process and a
compile in the device worker, and one learner pressing Check in a loop must not queue ahead of everyone else; the
limit is per browser session, counted where the page asks the worker (pages/yourturn_ui.py).
"""

from __future__ import annotations

import math


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
