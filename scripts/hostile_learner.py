"""A hostile learner in a class (issue 44): one headless tab that presses Check on the worst of the hostile
corpus every few seconds, for scripts/capacity.py --serve --hostile-every S.

    presses = await hostile(url, query, every_s=3.0, stop=event)   # [{"case", "wall_s", "said", ...}, ...]

It opens page 4 as any learner, reads the ids of the attention exercise's text box and Check button from what the
server drew (pages/st_client.py), then sends what a browser sends after typing and a click: the box's text and
the button's trigger. Each press a new program (the case and a counter in a comment), so no kept answer spares
the worker; what each press showed is kept: a refusal, a stop, a wrong verdict, the per-session limit, or an error.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pages.st_client import Tab  # noqa: E402
from tests.yourturn_cases.hostile import HOSTILE, REFUSED_IN_THE_SANDBOX  # noqa: E402

PAGE = "naive-vs-fused"
# the corpus's checks of page 4's exercise, first the ones the sandbox lets through to the device worker (it
# compiles and runs them: a folded constant, a wrong output of 16 MiB), then every one the sandbox refuses
# (each costs a disposable tracing process): overflowing shapes, unrolled programs, long runs, big outputs
WORST = sorted((c for c, (ex, _, how) in HOSTILE.items() if ex == "attention" and how == "check"),
               key=lambda c: c in REFUSED_IN_THE_SANDBOX)


def _said(seen) -> str:
    words = " ".join(seen.error_boxes + seen.warnings)
    for tag in ("pressed Check", "does not run this code", "could not be checked", "Not yet", "device worker"):
        if tag in words:
            return tag
    return "no verdict" if seen.ok else (seen.failure or "exception")


async def hostile(url: str, query: str, every_s: float, stop: asyncio.Event, timeout: float = 300.0) -> list[dict]:
    presses: list[dict] = []
    tab = await Tab.open(url)
    try:
        first = await tab.visit(PAGE, query, timeout)
        box = next(w for w in first.widgets if w.endswith("-yt_attention_code"))
        check = next(w for w in first.widgets if w.endswith("-yt_attention_check"))
        for n in itertools.count():
            if stop.is_set():
                break
            case = WORST[n % len(WORST)]
            code = f"# {n}\n" + HOSTILE[case][1]
            t0 = time.monotonic()
            await tab.visit(PAGE, query, timeout, texts={box: code})  # typed (the box's value reaches the server)
            seen = await tab.visit(PAGE, query, timeout, texts={box: code}, press=check)
            presses.append({"case": case, "start": t0, "wall_s": seen.wall_s, "said": _said(seen),
                            "exceptions": seen.exceptions})
            if seen.failure and "connection closed" in seen.failure:
                break
            try:
                await asyncio.wait_for(stop.wait(), max(0.0, every_s - (time.monotonic() - t0)))
            except TimeoutError:
                pass
    finally:
        await tab.close()
    return presses
