"""Exercise 5 (page 5b): one step of the online softmax, FlashAttention-2's inner loop (Algorithm 1, lines 8-10).
The lab runs the learner's step inside its tiled loop (attnlab/yourturn/step.py); its mistakes combine."""

from __future__ import annotations

import jax.numpy as jnp

from attnlab.yourturn.exercises.base import Case, Exercise, Mistake

STEP_SKELETON = '''def update(m, l, o, s, v):
    """One step of FlashAttention-2's inner loop for a block of Br queries and Bc keys.
    m (Br,): the running max of each query's scores so far (-inf before the first block)
    l (Br,): the running sum of exp(score - m)
    o (Br, H): the running, not yet normalised, output
    s (Br, Bc): this block's scaled scores (-inf where masked); v (Bc, H): this block's values
    Return (m_new, l_new, o_new). The lab divides o by l after the last block."""
    ...
'''
STEP_SOLUTION = '''def update(m, l, o, s, v):
    m_new = jnp.maximum(m, s.max(axis=-1))
    m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)   # a query with no key yet: no shift
    p = jnp.exp(s - m_safe[:, None])
    rescale = jnp.exp(m - m_safe)
    l_new = rescale * l + p.sum(axis=-1)
    o_new = rescale[:, None] * o + p @ v
    return m_new, l_new, o_new
'''


def _step(m, l, o, s, v, *, rescale_o=True, rescale_l=True, new_max=True, guard=True):
    m_new = jnp.maximum(m, s.max(axis=-1)) if new_max else s.max(axis=-1)
    m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new) if guard else m_new
    p = jnp.exp(s - m_safe[:, None])
    r = jnp.exp(m - m_safe)
    l_new = (r * l if rescale_l else l) + p.sum(axis=-1)
    o_new = (r[:, None] * o if rescale_o else o) + p @ v
    return m_new, l_new, o_new


def step_with(knobs):
    """The online-softmax step making several of STEP_MISTAKES at once (their knobs together)."""
    return lambda m, l, o, s, v: _step(m, l, o, s, v, **dict(knobs))


STEP_MISTAKES = (
    Mistake("o not rescaled", "The running output o is not rescaled when the max grows: its old terms were "
            "computed against the old max. Hint: those terms are exp(score − m) for the old m; what turns them into "
            "exp(score − m_new)?",
            lambda m, l, o, s, v: _step(m, l, o, s, v, rescale_o=False), (("rescale_o", False),)),
    Mistake("l not rescaled", "The running sum l is not rescaled when the max grows. Hint: l holds exp(score − m) "
            "for the old m.", lambda m, l, o, s, v: _step(m, l, o, s, v, rescale_l=False), (("rescale_l", False),)),
    Mistake("max of this block only", "m_new is the max of this block only; it must be the max of everything seen "
            "so far (the old m too), or earlier terms can overflow and the rescale is wrong.",
            lambda m, l, o, s, v: _step(m, l, o, s, v, new_max=False), (("new_max", False),)),
    Mistake("NaN before the first key", "A query whose keys so far were all masked has m = −∞, and exp(−∞ − (−∞)) is "
            "NaN. Hint: when m_new is −∞, shift by 0 instead.",
            lambda m, l, o, s, v: _step(m, l, o, s, v, guard=False), (("guard", False),)),
)

_QKV_TILES = (("q", (16, 8), "float32"), ("k", (16, 8), "float32"), ("v", (16, 8), "float32"))
STEP = Exercise(
    name="online_softmax", page="pages/p5b_fused_kernel.py", title="one step of the online softmax",
    task="Write the update of FlashAttention-2's inner loop (Algorithm 1, lines 8-10): given one block's scaled "
         "scores and the running max m, sum l and output o, return the new ones. The lab runs your step inside its "
         "tiled loop (T = S = 16, blocks of 4) and compares the output after every key block with the exact answer.",
    entry="update", skeleton=STEP_SKELETON, solution=STEP_SOLUTION,
    cases=(Case("T16 S16 H8, blocks of 4", _QKV_TILES, (("causal", False),), seed=11),
           Case("T16 S16 H8, blocks of 4, causal (blocks above the diagonal all masked)", _QKV_TILES,
                (("causal", True),), seed=12),
           Case("T16 S16 H8, blocks of 4, window (2, 0): a query's first key blocks are all masked", _QKV_TILES,
                (("causal", False), ("window", (2, 0))), seed=13),
           # scores of spread ~64: exp of one past 88.7 overflows float32 without the running max, and a row's max
           # grows from block to block, so a step that does not rescale o and l drifts from the answer
           Case("T16 S16 H8, blocks of 4, large scores (exp overflows past 88.7 without the running max)",
                _QKV_TILES, (("causal", False),), seed=15, spread=8.0)),
    reference=None, mistakes=STEP_MISTAKES, timed=False,
)
STEP_BLOCK = 4
