"""The exercises a learner writes: the codelab's tasks, each with a skeleton, the lab's solution, the cases
it is checked at, its float64 reference, and the usual mistakes, each written out so it can be recognised.

An exercise's function takes arrays (and, for some, Python numbers fixed per case) and returns an array or
a tuple of arrays. A case gives the inputs (drawn at a seed) and the numbers; the reference computes the
exact answer in float64 with the lab's own math (attnlab/math/attention.py). A mistake is a function in
jax.numpy that makes that mistake on purpose: when the learner's output matches one of them and not the
reference, the lab names the mistake and gives a hint, never the solution.

One module per exercise (base.py says what an exercise is); this package lists them, by name and by page.
"""

from __future__ import annotations

from attnlab.yourturn.exercises.attention import ATTENTION, GQA, KV_COPIED, copies_kv
from attnlab.yourturn.exercises.base import Case, Exercise, Mistake
from attnlab.yourturn.exercises.decode import DECODE, DECODE_CAUSAL
from attnlab.yourturn.exercises.masked import CAUSAL, WINDOW
from attnlab.yourturn.exercises.online_softmax import STEP, STEP_BLOCK, STEP_MISTAKES, step_with

__all__ = ["ATTENTION", "CAUSAL", "DECODE", "DECODE_CAUSAL", "EXERCISES", "GQA", "KV_COPIED", "ON_PAGE", "STEP",
           "STEP_BLOCK", "STEP_MISTAKES", "WINDOW", "Case", "Exercise", "Mistake", "copies_kv", "get", "step_with"]

EXERCISES: dict[str, Exercise] = {e.name: e for e in (ATTENTION, GQA, CAUSAL, WINDOW, STEP, DECODE)}
ON_PAGE: dict[str, tuple[str, ...]] = {}
for _e in EXERCISES.values():
    ON_PAGE.setdefault(_e.page, ())
    ON_PAGE[_e.page] += (_e.name,)


def get(name: str) -> Exercise:
    try:
        return EXERCISES[name]
    except KeyError:
        raise ValueError(f"no exercise named {name!r}; there are {', '.join(EXERCISES)}") from None
