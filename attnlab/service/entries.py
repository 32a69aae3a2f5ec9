"""The entry points: every lab function a page may ask the device worker to run, and nothing else.

A request names one of these by "module:function" (`Request.of(runs.run, ...)` does it); any other name is
refused. The function is looked up by name when served (a test that replaces `runs.run` sees its replacement).
A new study is one line here, its arguments in tests/test_device_rule.py's ARGS and its phrase in
pages/waiting.py's WORK (tests ask for both). `keep` says which results are kept for the next learner (not a
run the busy GPU refused: the next asks again)."""

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


def _kept_result(result) -> bool:
    from attnlab.measure import runs

    return result.status != runs.BUSY


# "module:function" of every entry point, and which of its results are kept. Names, not the functions
# themselves: a test that replaces `runs.run` before this list is read must not rename the entry.
LISTED: tuple[tuple[str, Callable[[Any], bool] | None], ...] = (
    ("attnlab.measure.runs:run", _not_busy),
    ("attnlab.backends:unmet", None),
    ("attnlab.backends:requirement_rows", None),
    ("attnlab.backends:refusal", None),
    ("attnlab.measure.timing:launch_note", None),
    ("attnlab.measure.cost:too_slow_plan", None),
    ("attnlab.measure.cost:timing_seconds", None),
    ("attnlab.studies.memory:compiled_memory", _not_busy),
    ("attnlab.studies.memory:same_program", None),
    ("attnlab.studies.layout:placement", None),
    ("attnlab.studies.weights:first_vs_last", None),
    ("attnlab.studies.timing_demo:dispatch_demo", None),
    ("attnlab.studies.kvcache:output_checks", _not_busy),
    ("attnlab.studies.fp8_study:te_autocast_study", None),
    ("attnlab.studies.fp8_study:te_block_study", None),
    ("attnlab.studies.fp8_study:fp8_attention_study", None),
    ("attnlab.studies.vendor:measure", _not_busy),
    ("attnlab.backends.tokamax:inner_loop_source", None),
    ("attnlab.studies.ring_live:unmet", None),
    ("attnlab.studies.ring_live:compare", None),
    ("attnlab.studies.warm:warm_shape", _not_busy),
    ("attnlab.yourturn.grade:check", lambda verdict: verdict.status != "too big"),
    ("attnlab.yourturn.timed:time_solution", _kept_result),
    ("attnlab.yourturn.progress:record", lambda value: False),
    ("attnlab.yourturn.progress:snapshot", lambda value: False),
)
FAULTS = tuple((f"attnlab.service.faults:{name}", lambda value: False)
               for name in ("abort", "sleep", "learner_abort", "learner_hang", "remembered"))


@functools.cache
def _entries() -> dict[str, Callable[[Any], bool] | None]:
    """Each entry point's `keep`, by name; its module is imported only when it is first asked for (a restarted
    worker's first page imports the run layer, not every study and pandas: 0.2-0.4 s on its path here)."""
    from attnlab.settings import settings

    listed = LISTED + (FAULTS if settings().fault_injection else ())  # faults: tests only, a native abort on request
    return dict(listed)


def _resolve(name: str) -> Callable:
    module, _, qualname = name.partition(":")
    fn: Any = importlib.import_module(module)  # then each attribute of the qualified name, looked up by name
    for part in qualname.split("."):
        fn = getattr(fn, part)
    return fn


def name_of(fn: Callable) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def get(name: str) -> Entry:
    """The entry of that name, its function looked up now."""
    try:
        keep = _entries()[name]
    except KeyError:
        raise KeyError(f"{name!r} is not an entry point of the device worker (attnlab/service/entries.py)") from None
    return Entry(_resolve(name), keep=keep or (lambda value: True))


def names() -> list[str]:
    return list(_entries())
