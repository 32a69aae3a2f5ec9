"""Check a learner's function, name its mistakes, time it: on the device worker (entry points of the service).

    check("attention", source)            -> Verdict: per case passed or not, the mistakes recognised
    time_solution("gqa", source, shape)   -> a run-layer Result of "yours" at the learner's shape

The learner's code reaches this process only as compiled programs (attnlab/yourturn/sandbox.py traced it
elsewhere). Each is compiled here, its memory admitted against the device's budget like any run's, and run on
the case's inputs; the output is compared with the float64 reference at the lab's tolerances
(attnlab/math/checks.py), and a wrong one with each of the exercise's mistakes: those it matches are named.

Bounded on the way (issue 44): the sandbox refuses a program past the exercise's bounds; a program that
crashed or hung a worker is refused by its hash (suspects.py); the cost model refuses FLOPs past
ATTNLAB_RUN_SECONDS; a check compiles untuned (no place in the device's line); a worker held past the bound is
ended; a verdict carries only numbers and a heatmap of at most HEATMAP_MAX² cells. `check` never raises."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import numpy as np

from attnlab import admission
from attnlab.measure import compiled as compiled_mod
from attnlab.yourturn import allowed_names, allowlist, bounds, exercises, sandbox, step
from attnlab.yourturn.program import (
    COMPILE_S,
    compile_program,
    digest,
    held_bytes,
    platform,
    refused_before,
    run,
)
from attnlab.yourturn.program import specs_of as _specs
from attnlab.yourturn.verdict import (
    PASSED,
    REFUSED,
    STOPPED,
    TOO_BIG,
    WRONG,
    CaseResult,
    Verdict,
    close,
    one_real,
)

__all__ = ["COMPILE_S", "HEATMAP_MAX", "CaseResult", "Verdict", "check", "digest", "platform", "refused_before"]

HEATMAP_MAX = 64  # the weights a verdict carries back to be drawn: at most this many rows and columns


def check(name: str, source: str) -> Verdict:
    """The learner's `source` for exercise `name` checked at every case; never raises (a verdict says why)."""
    try:
        return _check(name, source)
    except Exception as e:  # noqa: BLE001 (a sentence on the page, never a traceback)
        return Verdict(str(name), STOPPED, f"the lab could not check this code ({type(e).__name__}: "
                                             f"{(str(e).splitlines() or [''])[0][:200]})")


def _check(name: str, source: str) -> Verdict:
    ex = exercises.get(name)
    why = allowlist.refusal(source, ex.entry)
    if why:
        return Verdict(name, REFUSED, why)
    if ex is exercises.STEP:
        return step.check_step(ex, source)
    cases = [(_specs(c), dict(c.numbers)) for c in ex.cases]
    stats: list[bounds.Stats] = []
    try:
        blobs = sandbox.export(source, ex.entry, cases, platform(), precision="highest",
                               limits=[bounds.limits_for(ex, sp, n) for sp, n in cases], stats=stats)
    except sandbox.Refused as e:
        return Verdict(name, REFUSED, str(e))
    except sandbox.Stopped as e:
        return Verdict(name, STOPPED, str(e))
    results, wrong, outputs, scratch = [], [], [], None
    for case, blob, walked in zip(ex.cases, blobs, stats, strict=True):
        why = refused_before(blob, walked)
        if why:
            return Verdict(name, STOPPED, f"your program at {case.what} {why}" if why.startswith("would") else why)
        inputs = case.inputs()
        expected = np.asarray(_reference(ex)(**inputs, **dict(case.numbers)))
        try:
            exe = compile_program(blob, _specs(case))
            scratch = scratch if scratch is not None else compiled_mod.describe_compiled(exe).temp_bytes
            why = admission.DEVICE.check(held_bytes(exe), 0)
            if why:
                return Verdict(name, TOO_BIG, f"your program at {case.what} {why}")
            raw = run(exe, list(inputs.values()), digest(blob))
        except Exception as e:  # a compile or run error of the learner's program: a sentence, not a crash
            return Verdict(name, STOPPED, f"at {case.what}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        out, problem = one_real(raw, ex.entry)
        if problem:
            return Verdict(name, WRONG, problem)
        dtype = case.arrays[0][2]
        ok, max_err, rel = close(out, expected, dtype)
        note = ("NaN or infinity in the output" if out.shape == expected.shape and not np.all(np.isfinite(out))
                else "" if out.shape == expected.shape else f"shape {out.shape}, expected {expected.shape}")
        results.append(CaseResult(case.what, ok, expected.shape, out.shape, max_err, rel, note))
        outputs.append(out if out.shape == expected.shape else None)  # only what the heatmap may draw is kept
        if not ok:
            wrong.append((case, inputs, out))
    mistakes = _recognise(ex, wrong)
    if ex is exercises.GQA and any(exercises.copies_kv(c, w.shapes) for c, w in zip(ex.cases, stats, strict=True)):
        mistakes.append(exercises.KV_COPIED)  # right numbers, but what the task forbids
    heatmap = None
    if ex.name in ("causal", "window") and outputs and outputs[0] is not None and outputs[0].ndim == 4:
        ref = np.asarray(_reference(ex)(**ex.cases[0].inputs(), **dict(ex.cases[0].numbers)))
        heatmap = (outputs[0][0, 0, :HEATMAP_MAX, :HEATMAP_MAX].copy(), ref[0, 0, :HEATMAP_MAX, :HEATMAP_MAX].copy())
    lab_scratch = _lab_scratch(ex) if ex.name == "gqa" else None
    status = PASSED if all(r.passed for r in results) and not mistakes else WRONG
    hints = tuple(m.sentence for m in mistakes)
    if status == WRONG and not hints:
        hints = ("The output differs from the float64 reference and matches none of the usual mistakes the lab "
                 "knows: compare your stages with the formula, one at a time (page 1 shows each).",)
    return Verdict(name, status, "", tuple(results), tuple(m.name for m in mistakes), hints, scratch, lab_scratch,
                   heatmap)


def _reference(ex: exercises.Exercise) -> Callable:
    """The exercise's float64 reference. Only STEP has none (step.check_step checks it instead)."""
    if ex.reference is None:
        raise TypeError(f"exercise {ex.name!r} has no float64 reference (step.check_step checks it)")
    return ex.reference


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
                theirs = np.asarray(run(exe, list(inputs.values())), np.float64)
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


def _lab_scratch(ex: exercises.Exercise) -> int | None:
    """The lab's solution's scratch at the first case (a program that copies nothing), kept in PROGRAMS."""
    name = ("lab scratch", ex.name)
    kept = compiled_mod.PROGRAMS.named(name)
    if kept is None:
        scope = allowed_names.scope()
        exec(compile(ex.solution, "<the lab's solution>", "exec"), scope)
        args = [jax.ShapeDtypeStruct(s, d) for s, d in _specs(ex.cases[0])]
        kept = compiled_mod.compile_timed(scope[ex.entry], args, f"the lab's {ex.name}", None, name=name)
    return compiled_mod.describe_compiled(kept[0]).temp_bytes
