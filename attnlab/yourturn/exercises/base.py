"""What an exercise is: a Case (inputs drawn at a seed, numbers fixed per case), a Mistake (a function that
makes the mistake on purpose, and the sentence the lab says) and an Exercise (task, skeleton, solution, cases,
float64 reference, mistakes)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Case:
    """One check: input arrays (name -> shape, dtype), the numbers passed with them, and a seed."""

    what: str
    arrays: tuple[tuple[str, tuple[int, ...], str], ...]
    numbers: tuple[tuple[str, object], ...] = ()
    seed: int = 0
    spread: float = 1.0  # the inputs' standard deviation (large: logits that overflow without the max)

    def inputs(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        out = {}
        for name, shape, dtype in self.arrays:
            x = rng.standard_normal(shape) * self.spread
            out[name] = x.astype(jnp.dtype(dtype))
        return out


@dataclasses.dataclass(frozen=True)
class Mistake:
    name: str
    sentence: str  # what the lab says: the mistake and a hint, never the fix itself
    fn: Callable  # the same signature as the learner's function, making the mistake
    knobs: tuple[tuple[str, bool], ...] = ()  # the online-softmax step's: how `_step` makes it (mistakes combine)


@dataclasses.dataclass(frozen=True)
class Exercise:
    name: str
    page: str
    title: str
    task: str  # Markdown: what to write
    entry: str  # the function's name
    skeleton: str
    solution: str
    cases: tuple[Case, ...]
    reference: Callable | None  # (**inputs as float64, **numbers) -> ndarray or tuple of ndarrays (STEP: None)
    mistakes: tuple[Mistake, ...]
    timed: bool = True  # whether a passing function is timed at the learner's shape


def _f64(x):
    return np.asarray(x, np.float64)

