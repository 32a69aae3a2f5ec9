"""Check a learner's function, name its mistakes, time it: on the device worker (entry points of the service).

    check("attention", source)            -> Verdict: per case passed or not, the mistakes recognised
    time_solution("gqa", source, shape)   -> a run-layer Result of "yours" at the learner's shape

The learner's code reaches this process only as compiled programs (attnlab/yourturn/sandbox.py traced it
elsewhere). Each program is compiled here, its memory (`memory_analysis`) admitted against the device's
budget like any run's, and run on the case's inputs; the output is compared with the float64 reference
at the lab's tolerances (attnlab/math/checks.py). A wrong output is compared with each of the exercise's
mistakes run on the same inputs: the ones it matches are named, each with a hint.

Bounded on the way (issue 44): the sandbox refuses a program past the exercise's bounds before anything
compiles here; a program that crashed or hung a worker before is refused by its hash (suspects.py); the
lab's cost model refuses one whose FLOPs would hold the device past ATTNLAB_RUN_SECONDS; a check's compile is
untuned and quiet (it holds no place in the device's line); a run is watched, and a worker held past the
bound is ended and restarted; a verdict carries no output, only numbers and a heatmap of at most
HEATMAP_MAX² cells. `check` never raises: every failure is a verdict with a sentence.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib

import jax
import numpy as np

from attnlab import admission, masks
from attnlab.math.checks import TOLERANCES
from attnlab.measure import compiled as compiled_mod
from attnlab.measure import cost
from attnlab.settings import settings
from attnlab.yourturn import allowlist, bounds, exercises, sandbox, suspects

HEATMAP_MAX = 64  # the weights a verdict carries back to be drawn: at most this many rows and columns
COMPILE_S = 120.0  # a learner's compile in the device worker (the sandbox compiled it for its CPU within 10 s)


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


def digest(blob: bytes) -> str:
    """The name a learner's exported program is remembered by (attnlab/yourturn/suspects.py)."""
    return hashlib.sha256(blob).hexdigest()[:32]


def _compile(blob: bytes, specs, quiet: bool = True):
    """A learner's program compiled here, remembered while it compiles (a compile that aborts or outlasts
    COMPILE_S stops this worker, and is refused from then on). quiet: compiled without autotuning, so it
    launches nothing on the device and holds no place in the device's line (admission.Device.building)."""
    exported = jax.export.deserialize(blob)
    args = [jax.ShapeDtypeStruct(s, d) for s, d in specs]
    with suspects.running(digest(blob), COMPILE_S), admission.DEVICE.building(quiet=quiet):
        lowered = jax.jit(exported.call).lower(*args)
        return lowered.compile(compiled_mod.check_options()) if quiet else lowered.compile()


def refused_before(blob: bytes, stats: bounds.Stats | None) -> str | None:
    """Why a learner's program is not run here, decided before it is compiled: it stopped a worker before,
    or the lab's cost model says it would hold the device past ATTNLAB_RUN_SECONDS. None: it may run."""
    why = suspects.refusal(digest(blob))
    if why or stats is None or stats.flops < cost.WORTH_MEASURING:
        return why
    seconds = stats.flops / cost.matmul_rate("float32")
    limit = settings().run_seconds
    if seconds > limit:
        return (f"would hold the device for at least {seconds:,.0f} s ({stats.flops:.3g} operations), over the lab's "
                f"limit of {limit:,.0f} s for one run")
    return None


def _bytes(exe) -> int:
    info = compiled_mod.describe_compiled(exe)
    return sum(b or 0 for b in (info.temp_bytes, info.argument_bytes, info.output_bytes))


def _run(exe, inputs: list[np.ndarray], name: str = ""):
    """Run a compiled program in a turn on the device, admitted by its own memory; outputs as NumPy (their own
    dtype). While it holds the device it is remembered as `name`: past ATTNLAB_RUN_SECONDS the watchdog ends
    the worker (a device call cannot be stopped half way), and the program is refused from then on."""
    with admission.DEVICE.use(_bytes(exe)), (suspects.running(name, settings().run_seconds) if name
                                              else contextlib.nullcontext()):
        out = jax.block_until_ready(exe(*inputs))
        return jax.tree.map(np.asarray, out)


def _one_real(out, entry: str, n: int = 1):
    """(the output(s) as float64, None) or (None, a sentence): `n` real arrays, nothing else."""
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != n or not all(isinstance(x, np.ndarray) for x in outs):
        got = "nothing (None)" if out is None or outs == [None] else f"{len(outs)} values"
        return None, f"{entry} returns {got}; it should return {'one array' if n == 1 else f'{n} arrays'}"
    if any(np.iscomplexobj(x) for x in outs):
        return None, f"{entry} returns complex numbers; the lab checks real ones (no imaginary part)"
    outs = [x.astype(np.float64) for x in outs]
    return (outs[0] if n == 1 else tuple(outs)), None


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
    """The learner's `source` for exercise `name`, checked at every case (entry point of the device worker).
    Never raises: whatever goes wrong is a verdict with a sentence."""
    try:
        return _check(name, source)
    except Exception as e:  # noqa: BLE001 (a sentence on the page, never a traceback)
        return Verdict(str(name), "stopped", f"the lab could not check this code ({type(e).__name__}: "
                                             f"{(str(e).splitlines() or [''])[0][:200]})")


def _check(name: str, source: str) -> Verdict:
    ex = exercises.get(name)
    why = allowlist.refusal(source, ex.entry)
    if why:
        return Verdict(name, "refused", why)
    if ex is exercises.STEP:
        return _check_step(ex, source)
    cases = [(_specs(c), dict(c.numbers)) for c in ex.cases]
    stats: list[bounds.Stats] = []
    try:
        blobs = sandbox.export(source, ex.entry, cases, platform(), precision="highest",
                               limits=[bounds.limits_for(ex, sp, n) for sp, n in cases], stats=stats)
    except sandbox.Refused as e:
        return Verdict(name, "refused", str(e))
    except sandbox.Stopped as e:
        return Verdict(name, "stopped", str(e))
    results, wrong, outputs, scratch = [], [], [], None
    for case, blob, walked in zip(ex.cases, blobs, stats, strict=True):
        why = refused_before(blob, walked)
        if why:
            return Verdict(name, "stopped", f"your program at {case.what} {why}" if why.startswith("would") else why)
        inputs = case.inputs()
        expected = np.asarray(ex.reference(**inputs, **dict(case.numbers)))
        try:
            exe = _compile(blob, _specs(case))
            scratch = scratch if scratch is not None else compiled_mod.describe_compiled(exe).temp_bytes
            why = admission.DEVICE.check(_bytes(exe), 0)
            if why:
                return Verdict(name, "too big", f"your program at {case.what} {why}")
            raw = _run(exe, list(inputs.values()), digest(blob))
        except Exception as e:  # a compile or run error of the learner's program: a sentence, not a crash
            return Verdict(name, "stopped", f"at {case.what}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        out, problem = _one_real(raw, ex.entry)
        if problem:
            return Verdict(name, "wrong", problem)
        dtype = case.arrays[0][2]
        ok, max_err, rel = _close(out, expected, dtype)
        note = ("NaN or infinity in the output" if out.shape == expected.shape and not np.all(np.isfinite(out))
                else "" if out.shape == expected.shape else f"shape {out.shape}, expected {expected.shape}")
        results.append(CaseResult(case.what, ok, expected.shape, out.shape, max_err, rel, note))
        outputs.append(out if out.shape == expected.shape else None)  # only what the heatmap may draw is kept
        if not ok:
            wrong.append((case, inputs, out))
    mistakes = _recognise(ex, wrong)
    heatmap = None
    if ex.name in ("causal", "window") and outputs and outputs[0] is not None and outputs[0].ndim == 4:
        ref = np.asarray(ex.reference(**ex.cases[0].inputs(), **dict(ex.cases[0].numbers)))
        heatmap = (outputs[0][0, 0, :HEATMAP_MAX, :HEATMAP_MAX].copy(), ref[0, 0, :HEATMAP_MAX, :HEATMAP_MAX].copy())
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
                    exe = compiled_mod.compile_timed(  # compiled first, untuned (quiet): then run in a turn
                        functools.partial(m.fn, **dict(case.numbers)),
                        [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs.values()], m.name,
                        compiled_mod.check_options())[0]
                theirs = np.asarray(_run(exe, list(inputs.values())), np.float64)
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
    with admission.DEVICE.building():  # a tuned compile (its autotuner runs kernels): between runs
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
    stats: list[bounds.Stats] = []
    try:
        (blob,) = sandbox.export(source, ex.entry, [(specs, {})], platform(), precision="highest",
                                 limits=[bounds.limits_for(ex, specs)], stats=stats)
        why = refused_before(blob, stats[0])
        if why:
            return Verdict(ex.name, "stopped", why)
        exe = _compile(blob, specs)
    except sandbox.Refused as e:
        return Verdict(ex.name, "refused", str(e))
    except sandbox.Stopped as e:
        return Verdict(ex.name, "stopped", str(e))
    except Exception as e:
        return Verdict(ex.name, "stopped", f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")

    def learner(m, l, o, s, v):
        out, problem = _one_real(_run(exe, [m, l, o, s, v], digest(blob)), ex.entry, 3)
        if problem:
            raise ValueError(problem)
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
