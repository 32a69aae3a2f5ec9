"""What a run gives: a `Result` per implementation and shape, its `Status`, the lab's one vocabulary of
columns (`COLUMNS`) and the one wording of a failure (`failure`; out of memory recognised by `out_of_memory`).

A status is a `StrEnum` equal to its old string ("ok", "out of memory", ...): tables and shipped JSON keep
their text."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from attnlab import kernels
from attnlab.admission import DeviceBusy, OverBudget
from attnlab.backends import REGISTRY
from attnlab.backends.base import error_text
from attnlab.math import checks
from attnlab.measure import compiled, timing
from attnlab.shapes import AttentionShape

if TYPE_CHECKING:  # pandas only where a table is made: a device worker's start needs none (threads.py says why)
    import pandas as pd


class Status(enum.StrEnum):
    """What happened to one implementation at one shape."""

    OK = "ok"
    INVALID = "invalid shape"
    UNSUPPORTED = "cannot run here"
    OVER_BUDGET = "over the memory budget"
    TOO_SLOW = "too slow here"
    OOM = "out of memory"
    BUSY = "GPU busy"
    ERROR = "error"
    BAD_GRADIENTS = "gradients wrong"


OK, INVALID, UNSUPPORTED, OVER_BUDGET, TOO_SLOW, OOM, BUSY, ERROR, BAD_GRADIENTS = Status



@dataclasses.dataclass(frozen=True)
class Result:
    """One implementation at one shape: what happened, and the parts that were asked for."""

    shape: AttentionShape
    implementation: str
    status: Status
    reason: str = ""
    backward: bool = False
    accuracy: checks.Accuracy | None = None
    reference_note: str = ""
    output_shape: tuple[int, ...] | None = None
    output_dtype: str | None = None
    output_slice: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)
    program: compiled.CompiledInfo | None = None
    compile_ms: float | None = None
    compiled_before: str | None = None  # the compile was a cache lookup: who compiled this program first
    timing: timing.Timing | None = None
    timing_note: str = ""
    peak_tflops: float | None = None
    queue_wait_s: float = 0.0  # seconds this run waited for the device before its shared part

    def __post_init__(self):  # a status given as its old string is the same Status
        object.__setattr__(self, "status", Status(self.status))

    @property
    def ok(self) -> bool:
        return self.status == OK

    def row(self) -> dict:
        """This result in the lab's one vocabulary of columns (`COLUMNS`); absent parts are None."""
        s, t, a, p = self.shape, self.timing, self.accuracy, self.program
        flops = s.flops(self.backward)
        tflops = flops / (t.throughput_ms * 1e-3) / 1e12 if t else None
        device_tflops = flops / (t.device_ms * 1e-3) / 1e12 if t and t.device_ms else None
        best = device_tflops or tflops
        row = {
            "implementation": self.implementation,
            "label": REGISTRY[self.implementation].label if self.implementation in REGISTRY else self.implementation,
            "pass": "forward+backward" if self.backward else "forward", "shape": s.describe(),
            **s.columns(),
            "status": str(self.status), "reason": self.reason,
            "output_shape": str(self.output_shape) if self.output_shape else None, "output_dtype": self.output_dtype,
            "max_abs_error": a.max_abs_error if a else None, "relative_error": a.relative_error if a else None,
            "allclose": a.allclose if a else None, "reference_note": self.reference_note or None,
            "compile_ms": self.compile_ms, "compiled_before": self.compiled_before,
            "wall_ms": t.wall_ms if t else None, "wall_ms_iqr": t.wall_ms_iqr if t else None,
            "throughput_ms": t.throughput_ms if t else None, "device_ms": t.device_ms if t else None,
            "kernel_count": len(t.kernels) if t and t.kernels else None,
            "kernels": "; ".join(f"{kernels.describe(n)} {ms * 1e3:.1f}µs" for n, ms in t.kernels) if t else None,
            "device_note": t.device_note if t else None, "timing_note": self.timing_note or None,
            "gflop": flops / 1e9, "tflops": tflops, "device_tflops": device_tflops,
            "pct_of_peak": 100 * best / self.peak_tflops if best and self.peak_tflops else None,
            "temp_bytes": p.temp_bytes if p else None,
            "what_ran": compiled.which_kernel(p) if p else None,
            "custom_calls": ", ".join(p.custom_calls) if p else None,
            "repeats": t.repeats if t else None, "queue_wait_s": t.queue_wait_s if t else None,
        }
        return row



COLUMNS = list(Result(AttentionShape(), "naive", OK).row())


def to_frame(results: Iterable[Result], extra: Iterable[dict] | None = None) -> pd.DataFrame:
    """Results as a DataFrame with every column of `COLUMNS`, in that order (extra keys per row after)."""
    import pandas as pd

    rows = [r.row() for r in results]
    if extra is not None:
        rows = [{**r, **e} for r, e in zip(rows, extra, strict=True)]
    return pd.DataFrame(rows, columns=list(dict.fromkeys(COLUMNS + [k for r in rows for k in r])))


def records(df: pd.DataFrame) -> list[dict]:
    """A table's rows as plain dicts for a JSON file, a missing value (NaN, None) as None."""
    return df.astype(object).where(df.notna(), None).to_dict("records")


def out_of_memory(e: BaseException) -> bool:
    """Whether an exception says the device (or host) ran out of memory: a MemoryError, or XLA's
    RESOURCE_EXHAUSTED / "out of memory" (JAX raises a plain XlaRuntimeError: its text is all there is)."""
    text = f"{type(e).__name__} {e}"
    return isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


def failure(e: BaseException) -> tuple[Status, str]:
    """(status, reason) for an exception out of a run: the one wording for every page."""
    if out_of_memory(e):
        return OOM, "the device ran out of memory: " + error_text(e, 300)
    if isinstance(e, DeviceBusy):
        return BUSY, str(e)
    if isinstance(e, OverBudget):
        return OVER_BUDGET, str(e)
    return ERROR, error_text(e)


def max_difference(a: Result, b: Result) -> float | None:
    """max |a − b| over the part of the outputs both checked against float64 (None if either lacks it)."""
    if a.output_slice is None or b.output_slice is None or a.output_slice.shape != b.output_slice.shape:
        return None
    return float(np.abs(a.output_slice - b.output_slice).max())
