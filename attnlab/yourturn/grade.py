"""Check a learner's function, name its mistakes, time it: on the device worker (entry points of the service).

    check("attention", source)            -> Verdict: per case passed or not, the mistakes recognised
    time_solution("gqa", source, shape)   -> a run-layer Result of "yours" at the learner's shape

The learner's code reaches this process only as compiled programs (attnlab/yourturn/sandbox.py traced it
elsewhere). Each program is compiled here, its memory (`memory_analysis`) admitted against the device's
budget like any run's, and run on the case's inputs; the output is compared with the float64 reference
at the lab's tolerances (attnlab/math/checks.py). A wrong output is compared with each of the exercise's
mistakes run on the same inputs: the ones it matches are named, each with a hint.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np

from attnlab import admission, masks
from attnlab.math.checks import TOLERANCES
from attnlab.measure import compiled as compiled_mod
from attnlab.yourturn import allowlist, exercises, sandbox


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
    status: str  # "passed", "wrong", "refused" (the allowlist), "stopped" (a limit, or an error tracing), "too big"
    message: str = ""
    cases: tuple[CaseResult, ...] = ()
    mistakes: tuple[str, ...] = ()  # the names of the mistakes recognised
    hints: tuple[str, ...] = ()  # a sentence each
    scratch_bytes: int | None = None  # the learner's compiled scratch at the first case
    lab_scratch_bytes: int | None = None
    heatmap: tuple[np.ndarray, np.ndarray] | None = dataclasses.field(default=None, compare=False)  # (yours, lab's)

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def platform() -> str:
    """The platform name jax.export lowers for, here."""
    backend = jax.default_backend()
    return {"gpu": "cuda"}.get(backend, backend)


def _specs(case: exercises.Case) -> list[tuple[tuple[int, ...], str]]:
    return [(shape, dtype) for _, shape, dtype in case.arrays]


def _compile(blob: bytes, specs):
    exported = jax.export.deserialize(blob)
    args = [jax.ShapeDtypeStruct(s, d) for s, d in specs]
    with admission.DEVICE.building():
        return jax.jit(exported.call).lower(*args).compile()


def _bytes(exe) -> int:
    info = compiled_mod.describe_compiled(exe)
    return sum(b or 0 for b in (info.temp_bytes, info.argument_bytes, info.output_bytes))


def _run(exe, inputs: list[np.ndarray]):
    """Run a compiled program in a turn on the device, admitted by its own memory; outputs as float64 NumPy."""
    with admission.DEVICE.use(_bytes(exe)):
        out = exe(*inputs)
        return jax.tree.map(lambda x: np.asarray(x, np.float64), out)


def _close(a, b, dtype: str) -> tuple[bool, float | None, float | None]:
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


def check(name: str, source: str) -> Verdict:
    """The learner's `source` for exercise `name`, checked at every case (entry point of the device worker)."""
    ex = exercises.get(name)
    why = allowlist.refusal(source, ex.entry)
    if why:
        return Verdict(name, "refused", why)
    if ex is exercises.STEP:
        return _check_step(ex, source)
    try:
        blobs = sandbox.export(source, ex.entry, [(_specs(c), dict(c.numbers)) for c in ex.cases], platform(),
                               precision="highest")
    except sandbox.Stopped as e:
        return Verdict(name, "stopped", str(e))
    results, wrong, outputs, scratch = [], [], [], None
    for case, blob in zip(ex.cases, blobs, strict=True):
        inputs = case.inputs()
        expected = np.asarray(ex.reference(**inputs, **dict(case.numbers)))
        try:
            exe = _compile(blob, _specs(case))
            scratch = scratch if scratch is not None else compiled_mod.describe_compiled(exe).temp_bytes
            why = admission.DEVICE.check(_bytes(exe), 0)
            if why:
                return Verdict(name, "too big", f"your program at {case.what} {why}")
            out = _run(exe, list(inputs.values()))
        except Exception as e:  # a compile or run error of the learner's program: a sentence, not a crash
            return Verdict(name, "stopped", f"at {case.what}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        if isinstance(out, (tuple, list)):
            return Verdict(name, "wrong", f"{ex.entry} returns {len(out)} arrays; it should return one")
        dtype = case.arrays[0][2]
        ok, max_err, rel = _close(out, expected, dtype)
        note = ("NaN or infinity in the output" if out.shape == expected.shape and not np.all(np.isfinite(out))
                else "" if out.shape == expected.shape else f"shape {out.shape}, expected {expected.shape}")
        results.append(CaseResult(case.what, ok, expected.shape, out.shape, max_err, rel, note))
        outputs.append(out)
        if not ok:
            wrong.append((case, inputs, out))
    mistakes = _recognise(ex, wrong)
    heatmap = None
    if ex.name in ("causal", "window") and outputs and outputs[0].ndim == 4:
        ref = np.asarray(ex.reference(**ex.cases[0].inputs(), **dict(ex.cases[0].numbers)))
        heatmap = (outputs[0][0, 0], ref[0, 0])
    lab_scratch = _lab_scratch(ex) if ex.name == "gqa" else None
    status = "passed" if all(r.passed for r in results) else "wrong"
    hints = tuple(m.sentence for m in mistakes)
    if status == "wrong" and not hints:
        hints = ("The output differs from the float64 reference and matches none of the usual mistakes the lab "
                 "knows: compare your stages with the formula, one at a time (page 1 shows each).",)
    return Verdict(name, status, "", tuple(results), tuple(m.name for m in mistakes), hints, scratch, lab_scratch,
                   heatmap)


def _recognise(ex: exercises.Exercise, wrong) -> list[exercises.Mistake]:
    """The mistakes whose output matches the learner's at every failing case."""
    found = []
    for m in ex.mistakes:
        matched = bool(wrong)
        for case, inputs, out in wrong:
            try:  # at the precision the learner's program was exported with: a TF32 matmul's rounding, at a case
                with jax.default_matmul_precision("highest"):  # with large scores, moves the softmax past 2e-2
                    theirs = np.asarray(jax.jit(functools.partial(m.fn, **dict(case.numbers)))(*inputs.values()),
                                        np.float64)
            except Exception:
                matched = False
                break
            if theirs.shape != out.shape:
                matched = False
                break
            # a row that came out NaN and one that came out zero are one pattern here (a guard, or not)
            if not np.allclose(np.nan_to_num(out, nan=0.0, posinf=1e30, neginf=-1e30),
                               np.nan_to_num(theirs, nan=0.0, posinf=1e30, neginf=-1e30), rtol=2e-2, atol=2e-2):
                matched = False
                break
        if matched:
            found.append(m)
    return found


@functools.lru_cache(maxsize=8)
def _lab_scratch(ex: exercises.Exercise) -> int | None:
    """The lab's own solution's compiled scratch at the first case (what a program that copies nothing needs)."""
    scope = sandbox._globals()
    exec(compile(ex.solution, "<the lab's solution>", "exec"), scope)
    args = [jax.ShapeDtypeStruct(s, d) for s, d in _specs(ex.cases[0])]
    return compiled_mod.describe_compiled(jax.jit(scope[ex.entry]).lower(*args).compile()).temp_bytes


# ------------------------------------------------------------------------------------------------
# the online softmax step: run inside the lab's tiled loop
# ------------------------------------------------------------------------------------------------
def tiled(update, q, k, v, causal: bool = False, window=None, block: int = exercises.STEP_BLOCK):
    """FlashAttention-2's loops around `update(m, l, o, s, v) -> (m, l, o)`: every query block over every key
    block, the scores masked by the lab's one rule (attnlab.masks.visible). Returns the output and, for each
    (query block, key block), the output normalised so far."""
    T, H = q.shape
    S = k.shape[0]
    out, steps = np.zeros((T, H)), []
    for i in range(0, T, block):
        m, l, o = np.full(block, -np.inf, np.float32), np.zeros(block, np.float32), np.zeros((block, H), np.float32)
        for j in range(0, S, block):
            s = (q[i:i + block] @ k[j:j + block].T / np.sqrt(H)).astype(np.float32)
            seen = masks.visible(np.arange(i, i + block)[:, None], np.arange(j, j + block)[None, :], causal=causal,
                                 window=window)
            if seen is not None:
                s = np.where(seen, s, -np.inf).astype(np.float32)
            m, l, o = (np.asarray(x, np.float32) for x in update(m, l, o, s, v[j:j + block].astype(np.float32)))
            with np.errstate(invalid="ignore", divide="ignore"):
                steps.append(((i, j), o / np.where(l > 0, l, 1.0)[:, None]))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[i:i + block] = o / np.where(l > 0, l, 1.0)[:, None]
    return out, steps


def exact(q, k, v, causal: bool = False, window=None, rows=None, keys: int | None = None) -> np.ndarray:
    """softmax(q kᵀ/√H) v in float64 over the first `keys` keys (default all), for `rows` (default all queries)."""
    from attnlab.math import attention as att

    rows = np.arange(q.shape[0]) if rows is None else rows
    keys = k.shape[0] if keys is None else keys
    s = (np.asarray(q, np.float64)[rows] @ np.asarray(k, np.float64)[:keys].T) / np.sqrt(q.shape[1])
    seen = masks.visible(rows[:, None], np.arange(keys)[None, :], causal=causal, window=window)
    return att.softmax(s, seen, xp=np) @ np.asarray(v, np.float64)[:keys]


def _check_step(ex, source: str) -> Verdict:
    B, H = exercises.STEP_BLOCK, ex.cases[0].arrays[0][1][1]
    specs = [((B,), "float32"), ((B,), "float32"), ((B, H), "float32"), ((B, B), "float32"), ((B, H), "float32")]
    try:
        (blob,) = sandbox.export(source, ex.entry, [(specs, {})], platform(), precision="highest")
        exe = _compile(blob, specs)
    except sandbox.Stopped as e:
        return Verdict(ex.name, "stopped", str(e))
    except Exception as e:
        return Verdict(ex.name, "stopped", f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")

    def learner(m, l, o, s, v):
        out = _run(exe, [m, l, o, s, v])
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            raise ValueError("update must return three arrays: (m_new, l_new, o_new)")
        return out

    results, wrong = [], []
    for case in ex.cases:
        x = case.inputs()
        q, k, v, masking = x["q"], x["k"], x["v"], dict(case.numbers)
        try:
            out, steps = tiled(learner, q, k, v, **masking)
        except Exception as e:
            return Verdict(ex.name, "wrong", f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
        first_bad = next((f"query block {i // B}, after key block {j // B}" for (i, j), o in steps
                          if not _close(o, exact(q, k, v, **masking, rows=np.arange(i, i + B), keys=j + B),
                                        "float32")[0]), "")
        expected = exact(q, k, v, **masking)
        ok, max_err, rel = _close(out, expected, "float32")
        results.append(CaseResult(case.what, ok and not first_bad, expected.shape, out.shape, max_err, rel,
                                  f"first wrong at {first_bad}" if first_bad else ""))
        if not results[-1].passed:
            wrong.append((q, k, v, masking, out))
    mistakes = [m for m in ex.mistakes if wrong and all(
        np.allclose(np.nan_to_num(tiled(m.fn, q, k, v, **mk)[0], nan=1e9), np.nan_to_num(o, nan=1e9), rtol=1e-3,
                    atol=1e-3) for q, k, v, mk, o in wrong)]
    status = "passed" if all(r.passed for r in results) else "wrong"
    hints = tuple(m.sentence for m in mistakes) or (() if status == "passed" else (
        "The running output drifts from the exact one and matches none of the usual mistakes: check lines 9-10 "
        "of Algorithm 1 against your code, term by term (the step-through above shows m, l and O per tile).",))
    return Verdict(ex.name, status, "", tuple(results), tuple(m.name for m in mistakes), hints)
