"""The entry points: every lab function a page may ask the device worker to run, and nothing else.

A request names one of these by "module:function" (`Request.of(runs.run, ...)` does it for you); any
other name is refused. The function is looked up by that name when the request is served (so a test
that replaces `runs.run` in this process sees its replacement called). Adding a study to a page is one
line here. `keep` says which results are worth
keeping for the next learner (a run refused because the GPU was busy is not: the next asks again).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Entry:
    fn: Callable
    keep: Callable[[Any], bool] = lambda value: True


def _not_busy(results) -> bool:
    """Results (a list of them, or a table with a status column) that no busy GPU turned away."""
    from attnlab.measure import runs

    if hasattr(results, "columns"):
        return "status" not in results.columns or not (results["status"] == runs.BUSY).any()
    return not any(getattr(r, "status", None) == runs.BUSY for r in results)


@functools.cache
def _entries() -> dict[str, Entry]:
    from attnlab import backends
    from attnlab.backends import tokamax
    from attnlab.measure import runs, timing
    from attnlab.studies import fp8_study, kvcache, layout, memory, ring_live, timing_demo, warm, weights
    from attnlab.yourturn import grade, progress, timed

    listed = [
        Entry(runs.run, keep=_not_busy),
        Entry(backends.unmet),
        Entry(backends.requirement_rows),
        Entry(backends.refusal),
        Entry(timing.launch_note),
        Entry(memory.compiled_memory, keep=_not_busy),
        Entry(memory.same_program),
        Entry(layout.placement),
        Entry(weights.heatmap),
        Entry(weights.first_vs_last),
        Entry(timing_demo.dispatch_demo),
        Entry(kvcache.output_checks, keep=_not_busy),
        Entry(fp8_study.te_autocast_study),
        Entry(fp8_study.te_block_study),
        Entry(fp8_study.fp8_attention_study),
        Entry(tokamax.inner_loop_source),
        Entry(ring_live.unmet),
        Entry(ring_live.compare),
        Entry(warm.warm_shape, keep=_not_busy),
        Entry(grade.check, keep=lambda verdict: verdict.status != "too big"),
        Entry(timed.time_solution, keep=lambda result: result.status != runs.BUSY),
        Entry(progress.record, keep=lambda v: False),  # counts: every call counts
        Entry(progress.snapshot, keep=lambda v: False),
    ]
    from attnlab.settings import settings

    if settings().fault_injection:  # tests only: a native abort on request, as XLA's would be
        from attnlab.service import faults

        listed += [Entry(faults.abort, keep=lambda v: False), Entry(faults.sleep, keep=lambda v: False)]
    return {name_of(e.fn): e for e in listed}


def name_of(fn: Callable) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def get(name: str) -> Entry:
    """The entry of that name, its function looked up now."""
    try:
        entry = _entries()[name]
    except KeyError:
        raise KeyError(f"{name!r} is not an entry point of the device worker (attnlab/service/entries.py)") from None
    module, _, qualname = name.partition(":")
    fn = importlib.import_module(module)
    for part in qualname.split("."):
        fn = getattr(fn, part)
    return dataclasses.replace(entry, fn=fn)


def names() -> list[str]:
    return list(_entries())
