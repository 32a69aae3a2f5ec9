"""What pages ask the device worker for as they open at the codelab's shape, asked by the server's warm-up first.

A class starts at the codelab's shape. The warm-up (`attnlab.studies.warm`) compiles that shape's programs, but
page 7 also times the codelab's three implementations as it opens, and page 6 computes its first-vs-last study:
at the class's start that is seconds of device time that every other learner's first page waits behind. Asked
here before the class, the worker keeps the answers (`service.worker`, 12 h), and the pages are answered at once.
Page 7 builds its timing from `p7_timed`, `P7_BUDGET_S` and `untuned_on_open` here; tests/pages/test_opening.py
checks that both requests are the ones the pages send as they open.
"""

from __future__ import annotations

from attnlab import backends, service
from attnlab.service.request import Request
from attnlab.shapes import AttentionShape
from attnlab.studies import weights
from pages import common

P7_TIMED = ("naive", "sdpa_xla", "sdpa_cudnn")  # page 7 times these as it opens, where they run
P7_BUDGET_S = 0.5  # seconds per implementation for that timing


def p7_timed(runnable) -> tuple[str, ...]:
    """The implementations page 7 times as it opens, of those that run here."""
    return tuple(n for n in P7_TIMED if n in runnable)


def untuned_on_open(on_gpu: bool) -> bool:
    """Page 7 times untuned programs as it opens in a class on a GPU: XLA's autotuner runs candidate kernels on the
    GPU and holds every learner's runs while it does (XLA's CPU backend does not autotune)."""
    return common.in_class() and on_gpu


def p7_timing(shape: AttentionShape, runnable, quick: bool) -> tuple[tuple[str, ...], dict]:
    """Page 7's timing as it opens: (the implementations, common.run's keyword arguments). `quick`: in a class on
    a GPU, of untuned programs (page 7 says why)."""
    return p7_timed(runnable), {"timed": True, "budget_s": P7_BUDGET_S, "tuned": False if quick else None}


def requests(shape: AttentionShape, runnable, quick: bool) -> list[Request]:
    """Every request above, as the pages send them."""
    names, kw = p7_timing(shape, runnable, quick)
    return [common.run_request(shape, names, **kw),
            Request.of(weights.first_vs_last, weights.first_vs_last_shape(shape))]


def warm(shape: AttentionShape | None = None) -> int:
    """Ask for `requests` at `shape` (default: the codelab's) and wait for the answers; how many were asked."""
    shape = shape or AttentionShape()
    why = service.call(backends.unmet, shape, None)  # page 7's own first request, kept too
    info = service.workers()[0].device
    asked = requests(shape, [n for n, w in why.items() if w is None], untuned_on_open(info.backend == "gpu"))
    for r in asked:
        service.send(r)
    return len(asked)
