"""What Check answers: a Verdict (a status, a sentence, each case's numbers, the mistakes named with their hints,
and at most a small heatmap), and the two comparisons every check makes of a learner's output.

    Verdict(exercise, status, message, cases, mistakes, hints, ...)   .passed
    one_real(out, "attention")  -> (float64 output, None) or (None, the sentence refusing what came back)
    close(out, expected, dtype) -> (allclose at the lab's tolerances, max abs error, relative error)
"""

from __future__ import annotations

import dataclasses
import enum

import numpy as np

from attnlab.math.checks import TOLERANCES


class Status(enum.StrEnum):
    """What a check of a learner's code found (each compares equal to its old string)."""

    PASSED = "passed"
    WRONG = "wrong"
    REFUSED = "refused"  # the allowlist
    STOPPED = "stopped"  # a limit, or an error tracing
    TOO_BIG = "too big"  # over the memory budget


PASSED, WRONG, REFUSED, STOPPED, TOO_BIG = Status


@dataclasses.dataclass(frozen=True)
class CaseResult:
    what: str
    passed: bool
    expected_shape: tuple[int, ...]
    output_shape: tuple[int, ...] | None = None
    max_abs_error: float | None = None
    relative_error: float | None = None
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Verdict:
    exercise: str
    status: Status
    message: str = ""
    cases: tuple[CaseResult, ...] = ()
    mistakes: tuple[str, ...] = ()  # the names of the mistakes recognised
    hints: tuple[str, ...] = ()  # a sentence each
    scratch_bytes: int | None = None  # the learner's compiled scratch at the first case
    lab_scratch_bytes: int | None = None
    heatmap: tuple[np.ndarray, np.ndarray] | None = dataclasses.field(default=None, compare=False)  # (yours, lab's)

    def __post_init__(self):  # a status given as its old string is the same Status
        object.__setattr__(self, "status", Status(self.status))

    @property
    def passed(self) -> bool:
        return self.status == PASSED


def one_real(out, entry: str, n: int = 1):
    """(the output(s) as float64, None) or (None, a sentence): `n` real arrays, nothing else."""
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != n or not all(isinstance(x, np.ndarray) for x in outs):
        got = "nothing (None)" if out is None or outs == [None] else f"{len(outs)} values"
        return None, f"{entry} returns {got}; it should return {'one array' if n == 1 else f'{n} arrays'}"
    if any(np.iscomplexobj(x) for x in outs):
        return None, f"{entry} returns complex numbers; the lab checks real ones (no imaginary part)"
    outs = [x.astype(np.float64) for x in outs]
    return (outs[0] if n == 1 else tuple(outs)), None


def close(a, b, dtype: str) -> tuple[bool, float | None, float | None]:
    tol = TOLERANCES.get(dtype, TOLERANCES["float32"])
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False, None, None
    if not np.all(np.isfinite(a)):
        return False, None, None
    err = np.abs(a - b)
    ref = np.linalg.norm(b)
    return bool(np.allclose(a, b, **tol)), float(err.max()) if err.size else 0.0, \
        float(np.linalg.norm(a - b) / ref) if ref else float(np.linalg.norm(a - b))
