"""What pages ask the device worker for as they open at the codelab's shape, asked by the server's warm-up first.

A class starts at the codelab's shape. The warm-up (`attnlab.studies.warm`) compiles that shape's programs, but
page 7 also times the codelab's three implementations as it opens, page 6 computes its first-vs-last study, and
page 8 checks the shape's MHA, GQA and MQA variants (two of them shapes of their own, compiled for three
implementations): at the class's start that is seconds of device time that every other learner's first page waits
behind. Asked here before the class, the worker keeps the answers (`service.worker`, 12 h), and the pages are
answered at once.
Page 7 builds its timing from `p7_timed`, `P7_BUDGET_S` and `untuned_on_open` here, page 8 its implementations from
`p8_names`; tests/pages/test_opening.py checks that the requests are the ones the pages send as they open.

`warm_up` is the server's whole warm-up, in the order a class needs it (app.py runs it once per UI process). Where the
instructor named the class's shapes (ATTNLAB_CLASS_SHAPES), it also opens every page at each of them, through this
server as a learner's tab does (`visit_class_shapes`): whatever a page asks as it opens there, for the device worker
and for this process's caches, is then computed before the class, with no list of requests to keep in step with the
pages.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import parse_qs, urlencode

from attnlab import backends, doors, masks, service
from attnlab.service.request import Request
from attnlab.settings import settings
from attnlab.shapes import INT_FIELDS, AttentionShape
from attnlab.studies import kvcache, weights
from attnlab.studies import warm as warm_mod
from pages import activity, common, workers
from pages.st_client import Tab

P7_TIMED = ("naive", "sdpa_xla", "sdpa_cudnn")  # page 7 times these as it opens, where they run
P7_BUDGET_S = 0.5  # seconds per implementation for that timing
P8_CANDIDATES = ("naive", "sdpa_xla", "sdpa_cudnn")  # page 8 checks its variants through these, where they run


def p7_timed(runnable) -> tuple[str, ...]:
    """The implementations page 7 times as it opens, of those that run here."""
    return tuple(n for n in P7_TIMED if n in runnable)


def untuned_on_open(on_gpu: bool) -> bool:
    """Page 7 times untuned programs as it opens in a class on a GPU: XLA's autotuner runs candidate kernels on the
    GPU and holds every learner's runs while it does (XLA's CPU backend does not autotune)."""
    return workers.in_class() and on_gpu


def p7_timing(shape: AttentionShape, runnable, quick: bool) -> tuple[tuple[str, ...], dict]:
    """Page 7's timing as it opens: (the implementations, common.run's keyword arguments). `quick`: in a class on
    a GPU, of untuned programs (page 7 says why)."""
    return p7_timed(runnable), {"timed": True, "budget_s": P7_BUDGET_S, "tuned": False if quick else None}


def p8_names(why_by_variant: list[dict]) -> tuple[str, ...]:
    """Page 8's implementations, from `P8_CANDIDATES`' checks at each variant: those that run at least one here."""
    return tuple(n for n in P8_CANDIDATES if any(why[n] is None for why in why_by_variant)) or ("naive",)


def requests(shape: AttentionShape, runnable, quick: bool, p8: tuple[str, ...] = P8_CANDIDATES) -> list[Request]:
    """Every request above, as the pages send them (`p8`: page 8's `p8_names`)."""
    names, kw = p7_timing(shape, runnable, quick)
    return [common.run_request(shape, names, **kw),
            Request.of(weights.first_vs_last, weights.first_vs_last_shape(shape)),
            Request.of(kvcache.output_checks, shape, p8)]


def warm(shape: AttentionShape | None = None) -> int:
    """Ask for `requests` at `shape` (default: the codelab's) and wait for the answers; how many were asked."""
    shape = shape or AttentionShape()
    why = service.send(first_request(shape)).unwrap()  # page 7's own first request, kept too
    service.send(Request.of(backends.unmet, shape, None))  # every backend's check: page 7's table of what cannot run
    p8 = p8_names([service.call(backends.unmet, v, P8_CANDIDATES) for v in kvcache.variants(shape)])  # page 8's, too
    info = service.workers()[0].device
    asked = requests(shape, [n for n, w in why.items() if w is None], untuned_on_open(info.backend == "gpu"), p8)
    for r in asked:
        service.send(r)
    return len(asked)


def first_request(shape: AttentionShape) -> Request:
    """Page 7's first request: can the three it times run here? Only those are traced (every backend's check, tokamax's
    Pallas kernels and TransformerEngine's among them, took 2-2.8 s at a new shape on the H200, and page 7 waited for it
    before its timing; it now asks for that ahead, and reads it for its table of what cannot run)."""
    return Request.of(backends.unmet, shape, P7_TIMED)


def warm_up(call=None, pause=activity.wait_for_quiet, log=print, visit=None) -> float:
    """The server's warm-up, in the order a class needs it, each part while no learner's page runs here: the codelab's
    shapes compiled for every backend, what pages 6, 7 and 8 ask as they open there (`warm`), the class's shapes
    (`visit(pause, log)`: app.py's `visit_class_shapes` at this server), then the sidebar's model presets. Its end is
    logged as `attnlab.studies.warm.DONE` (the class scripts and an instructor wait for it). Seconds it took. (On the
    H200 a rehearsal's class once began while the presets compiled, before pages 6 and 7 had been asked for: both were
    among the slowest first visits.)"""
    call, t0 = call or service.call, time.perf_counter()
    warm_mod.warm(call=call, pause=pause, shapes=warm_mod.plan(presets=False))
    pause()
    warm()
    if visit is not None:
        visit(pause, log)
    warm_mod.warm(call=call, pause=pause, shapes=warm_mod.plan(codelab=False))
    seconds = time.perf_counter() - t0
    log(f"{warm_mod.DONE} in {seconds:.0f} s")
    return seconds


def keep_warm(warm_up, workers, quiet, look_s: float = 30.0, stop=lambda: False, log=print) -> None:
    """`warm_up()` now, then again whenever a device worker answers that this process has not warmed (`workers()`: the
    set of (name, pid) answering now): the morning's new GPU workers after the nightly stop, a GPU added, one started
    again after a crash. Each time after `quiet()` (app.py: a minute with no learner's page here), so a class is
    never warmed into. A UI process otherwise warms once in its life, after its first page."""
    warm_up()
    warmed = workers()
    while not stop():
        time.sleep(look_s)
        new = workers() - warmed
        if new:
            quiet()
            log(f"attnlab: warming again: device worker(s) this server has not warmed: "
                f"{', '.join(f'{name} (pid {pid})' for name, pid in sorted(new))}")
            warm_up()
            warmed |= new | workers()


KNOWN_KEYS = {*INT_FIELDS, "dtype", *(t.key for t in masks.MASK_TYPES)}  # what AttentionShape reads from a link


def class_shapes(queries: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The instructor's class shapes (ATTNLAB_CLASS_SHAPES), each a link's query: (each good one as the sidebar writes
    it into the URL, a sentence for each one that is not a shape). A key the lab does not know is refused, not
    ignored as in a learner's link: a misspelt key would warm a shape nobody asked for."""
    good, bad = [], []
    for query in queries:
        params = parse_qs(query.lstrip("?"), keep_blank_values=True)
        unknown = sorted(set(params) - KNOWN_KEYS)
        shape, problems = AttentionShape.from_query_params(params)
        problems = [f"{', '.join(unknown)}: not a setting of the shape"] * bool(unknown) + problems
        if problems:
            bad.append(f"ATTNLAB_CLASS_SHAPES: {query!r} is not a shape ({' '.join(problems)}); skipped")
        elif (normal := urlencode(shape.to_query_params())) not in good:
            good.append(normal)
    return good, bad


def visit_class_shapes(url: str, paths: list[str], queries: tuple[str, ...] | None = None, pause=lambda: None,
                       log=print, timeout: float = 600.0) -> float:
    """Open every page of `paths` (their URL paths; "" the first page) at each class shape, one tab per shape, through
    the server at `url` (this one: its doors let `doors.SELF` through over the loopback), while no learner's page runs
    here (`pause` before each shape). A line per shape; seconds it took."""
    good, bad = class_shapes(settings().class_shapes if queries is None else queries)
    for line in bad:
        log(line)
    t0 = time.perf_counter()
    for query in good:
        pause()
        seen = asyncio.run(_visit(url, paths, query, timeout))
        failed = [f"{s.page}: {s.failure or s.exceptions[0]}" for s in seen if not s.ok]
        log(f"warm class shape {query or '(the codelab)'}: {len(seen) - len(failed)} of {len(seen)} pages in "
            f"{sum(s.wall_s for s in seen):.1f} s" + (f"; not opened: {'; '.join(failed)}" if failed else ""))
    return time.perf_counter() - t0


async def _visit(url: str, paths: list[str], query: str, timeout: float) -> list:
    tab = await Tab.open(url, headers={doors.SELF_HEADER: doors.SELF})
    try:
        return [await tab.visit(path, query, timeout) for path in paths]
    finally:
        await tab.close()
