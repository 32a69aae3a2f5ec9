"""What pages ask the device worker for as they open at the codelab's shape, asked by the server's warm-up first.

A class starts at the codelab's shape. The warm-up (`attnlab.studies.warm`) compiles that shape's programs, but
page 7 also times the codelab's three implementations as it opens, and page 6 computes its first-vs-last study:
at the class's start that is seconds of device time that every other learner's first page waits behind. Asked
here before the class, the worker keeps the answers (`service.worker`, 12 h), and the pages are answered at once.
Each request is built by the function its page calls, so the two cannot drift apart (tests/pages/test_opening.py).
"""

from __future__ import annotations

from attnlab import backends, service
from attnlab.service.request import Request
from attnlab.shapes import AttentionShape
from attnlab.studies import weights

P7_TIMED = ("naive", "sdpa_xla", "sdpa_cudnn")  # page 7 times these as it opens, where they run
P7_BUDGET_S = 0.5  # seconds per implementation for that timing


def p7_timed(runnable) -> tuple[str, ...]:
    """The implementations page 7 times as it opens, of those that run here."""
    return tuple(n for n in P7_TIMED if n in runnable)


def p7_timing(shape: AttentionShape, runnable, quick: bool) -> tuple[tuple[str, ...], dict]:
    """Page 7's timing as it opens: (the implementations, common.run's keyword arguments). `quick`: in a class on
    a GPU, of untuned programs (page 7 says why)."""
    return p7_timed(runnable), {"timed": True, "budget_s": P7_BUDGET_S, "tuned": False if quick else None}


def requests(shape: AttentionShape, runnable, quick: bool) -> list[Request]:
    """Every request above, as the pages send them."""
    from pages import common  # (streamlit's: only where a page or the warm-up runs)

    names, kw = p7_timing(shape, runnable, quick)
    return [common.run_request(shape, names, **kw),
            Request.of(weights.first_vs_last, weights.first_vs_last_shape(shape))]


def warm(shape: AttentionShape | None = None) -> int:
    """Ask for `requests` at `shape` (default: the codelab's) and wait for the answers; how many were asked."""
    from pages import common

    shape = shape or AttentionShape()
    why = service.call(backends.unmet, shape, None)  # page 7's own first request, kept too
    info = service.workers()[0].device
    asked = requests(shape, [n for n, w in why.items() if w is None], common.in_class() and info.backend == "gpu")
    for r in asked:
        service.send(r)
    return len(asked)
