"""The online-softmax exercise (page 5b): the learner's `update(m, l, o, s, v)` run inside the lab's own tiled loop.

    check_step(ex, source) -> Verdict     (grade.check sends the exercise "online_softmax" here)

What is hand-written: FlashAttention-2's two loops in NumPy around one compiled step of the learner's (`tiled`),
and the exact float64 answer over the keys seen so far (`exact`), so that a wrong step is found at the first
(query block, key block) where it drifts, and named by the mistakes run through the same loop.
"""

from __future__ import annotations

import numpy as np

from attnlab import masks
from attnlab.yourturn import bounds, exercises, sandbox
from attnlab.yourturn.program import compile_program, digest, platform, refused_before, run
from attnlab.yourturn.verdict import PASSED, REFUSED, STOPPED, WRONG, CaseResult, Verdict, close, one_real


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


def check_step(ex, source: str) -> Verdict:
    B, H = exercises.STEP_BLOCK, ex.cases[0].arrays[0][1][1]
    specs = [((B,), "float32"), ((B,), "float32"), ((B, H), "float32"), ((B, B), "float32"), ((B, H), "float32")]
    stats: list[bounds.Stats] = []
    try:
        (blob,) = sandbox.export(source, ex.entry, [(specs, {})], platform(), precision="highest",
                                 limits=[bounds.limits_for(ex, specs)], stats=stats)
        why = refused_before(blob, stats[0])
        if why:
            return Verdict(ex.name, STOPPED, why)
        exe = compile_program(blob, specs)
    except sandbox.Refused as e:
        return Verdict(ex.name, REFUSED, str(e))
    except sandbox.Stopped as e:
        return Verdict(ex.name, STOPPED, str(e))
    except Exception as e:
        return Verdict(ex.name, STOPPED, f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")

    def learner(m, l, o, s, v):
        out, problem = one_real(run(exe, [m, l, o, s, v], digest(blob)), ex.entry, 3)
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
            return Verdict(ex.name, WRONG, f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
        first_bad = next((f"query block {i // B}, after key block {j // B}" for (i, j), o in steps
                          if not close(o, exact(q, k, v, **masking, rows=np.arange(i, i + B), keys=j + B),
                                        "float32")[0]), "")
        expected = exact(q, k, v, **masking)
        ok, max_err, rel = close(out, expected, "float32")
        note = "; ".join(filter(None, (f"first wrong at {first_bad}" if first_bad else "",
                                       "" if np.all(np.isfinite(out)) else "NaN in the output (no error to measure)")))
        results.append(CaseResult(case.what, ok and not first_bad, expected.shape, out.shape, max_err, rel, note))
        if not results[-1].passed:
            wrong.append((q, k, v, masking, out))
    mistakes = recognise_step(ex, wrong)
    status = PASSED if all(r.passed for r in results) else WRONG
    hints = tuple(m.sentence for m in mistakes) or (() if status == PASSED else (
        "The running output drifts from the exact one and matches none of the usual mistakes: check lines 9-10 "
        "of Algorithm 1 against your code, term by term (the step-through above shows m, l and O per tile).",))
    return Verdict(ex.name, status, "", tuple(results), tuple(m.name for m in mistakes), hints)


def recognise_step(ex, wrong) -> list[exercises.Mistake]:
    """The step's mistakes whose loop output matches the learner's at every failing case: one alone, or else two
    made at once (forgetting to rescale o without the guard for a query with no key yet is the usual pair)."""
    def same(fn) -> bool:
        return bool(wrong) and all(np.allclose(np.nan_to_num(tiled(fn, q, k, v, **mk)[0], nan=1e9),
                                               np.nan_to_num(o, nan=1e9), rtol=1e-3, atol=1e-3)
                                   for q, k, v, mk, o in wrong)

    found = [m for m in ex.mistakes if same(m.fn)]
    if found or not wrong:
        return found
    pairs = [(a, b) for i, a in enumerate(ex.mistakes) for b in ex.mistakes[i + 1:] if a.knobs and b.knobs]
    return next(([a, b] for a, b in pairs if same(exercises.step_with(a.knobs + b.knobs))), [])
