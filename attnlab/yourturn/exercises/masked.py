"""Exercises 3 and 4 (page 6): the attention weights under a causal mask, then under a sliding window."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.math import attention as att
from attnlab.yourturn.exercises.base import Case, Exercise, Mistake, _f64

CAUSAL_SKELETON = '''def causal_weights(q, k):
    """q (B, T, N, H), k (B, S, N, H) -> the attention weights (B, N, T, S) under a causal mask:
    query i may see keys 0..i (aligned top-left, as jax.nn.dot_product_attention's is_causal)."""
    scores = ...
    mask = ...     # (T, S): True where query i may see key j
    ...
    return ...
'''
CAUSAL_SOLUTION = '''def causal_weights(q, k):
    T, S = q.shape[1], k.shape[1]
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    mask = jnp.arange(S)[None, :] <= jnp.arange(T)[:, None]
    scores = jnp.where(mask, scores, -jnp.inf)
    return jax.nn.softmax(scores, axis=-1)
'''
WINDOW_SKELETON = '''def window_weights(q, k, left, right):
    """The weights (B, N, T, S) when query i may see keys i-left .. i+right (a sliding window, as
    local_window_size=(left, right)). A query that may see no key at all gets all-zero weights."""
    ...
'''
WINDOW_SOLUTION = '''def window_weights(q, k, left, right):
    T, S = q.shape[1], k.shape[1]
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    i, j = jnp.arange(T)[:, None], jnp.arange(S)[None, :]
    mask = (j >= i - left) & (j <= i + right)
    m = jnp.where(mask, scores, -jnp.inf).max(axis=-1, keepdims=True)
    e = jnp.where(mask, jnp.exp(scores - jnp.where(jnp.isfinite(m), m, 0.0)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return e / jnp.where(total > 0, total, 1.0)
'''


def _scores(q, k):
    return jnp.einsum("btnh,bsnh->bnts", q.astype(jnp.float32), k.astype(jnp.float32)) / math.sqrt(q.shape[-1])


def _masked_softmax(s, mask):
    """The masked softmax of the lab (a row that sees nothing: all zeros; the recognition reads NaN alike)."""
    return att.softmax(s, mask)


def _ref_weights(q, k, *, causal=False, window=None):
    return att.weights(_f64(q), _f64(k), causal=causal, window=window, xp=np)


def _grid(q, k, shift=0):
    T, S = q.shape[1], k.shape[1]
    return jnp.arange(T)[:, None] + shift, jnp.arange(S)[None, :]


CAUSAL_MISTAKES = (
    Mistake("off by one", "The diagonal is masked too: query i may see key i itself (keys 0..i, i included). "
            "Hint: which keys may query 0 see?", lambda q, k: _masked_softmax(_scores(q, k),
                                                                                     _grid(q, k)[1] < _grid(q, k)[0])),
    Mistake("bottom-right aligned", "The mask is aligned to the bottom right (query i sees keys 0..i + S − T), as some "
            "libraries do for decoding; jax.nn's is_causal aligns it to the top left. Hint: with T ≠ S, query 0 "
            "sees key 0 only.", lambda q, k: _masked_softmax(_scores(q, k), _grid(q, k)[1] <= _grid(q, k)[0]
                                                             + (k.shape[1] - q.shape[1]))),
    Mistake("filled with 0", "Masked scores are set to 0 instead of −∞, so exp(0) = 1 still gives them weight. "
            "Hint: what value makes exp(x) exactly 0?",
            lambda q, k: jax.nn.softmax(jnp.where(_grid(q, k)[1] <= _grid(q, k)[0], _scores(q, k), 0.0), axis=-1)),
    Mistake("mask transposed", "The mask lets each query see the keys after it, not before: the lower and upper "
            "triangles are swapped. Hint: which index is the query's, i or j?",
            lambda q, k: _masked_softmax(_scores(q, k), _grid(q, k)[1] >= _grid(q, k)[0])),
    Mistake("no scale", "The scores are not divided by √d before the softmax.",
            lambda q, k: _masked_softmax(_scores(q, k) * math.sqrt(q.shape[-1]), _grid(q, k)[1] <= _grid(q, k)[0])),
)


def _window_mask(q, k, left, right):
    i, j = _grid(q, k)
    return (j >= i - left) & (j <= i + right)


WINDOW_MISTAKES = (
    Mistake("NaN in a row that sees nothing", "A query that may see no key gets NaN weights: all its scores are −∞, "
            "and softmax divides 0 by 0. Hint: give such a row zeros (jnp.where on the row's total).",
            lambda q, k, left, right: jax.nn.softmax(jnp.where(_window_mask(q, k, left, right), _scores(q, k),
                                                               -jnp.inf), axis=-1)),
    Mistake("window off by one", "The window is one key too narrow or too wide: query i should see keys i − left "
            "through i + right, both ends included.",
            lambda q, k, left, right: _masked_softmax(_scores(q, k), (_grid(q, k)[1] > _grid(q, k)[0] - left)
                                                      & (_grid(q, k)[1] <= _grid(q, k)[0] + right))),
    Mistake("left and right swapped", "left and right are swapped: `left` counts keys before the query.",
            lambda q, k, left, right: _masked_softmax(_scores(q, k), _window_mask(q, k, right, left))),
    Mistake("filled with 0", "Masked scores are set to 0 instead of −∞, so they keep some weight.",
            lambda q, k, left, right: jax.nn.softmax(jnp.where(_window_mask(q, k, left, right), _scores(q, k), 0.0),
                                                     axis=-1)),
    Mistake("no scale", "The scores are not divided by √d before the softmax.",
            lambda q, k, left, right: _masked_softmax(_scores(q, k) * math.sqrt(q.shape[-1]),
                                                      _window_mask(q, k, left, right))),
)

CAUSAL = Exercise(
    name="causal", page="pages/p6_causal.py", title="a causal mask by hand",
    task="Return the attention **weights** (B, N, T, S) under a causal mask, aligned top-left as "
         "`jax.nn.dot_product_attention(is_causal=True)`: query i sees keys 0..i. The lab draws your weights "
         "beside its own.", entry="causal_weights", skeleton=CAUSAL_SKELETON, solution=CAUSAL_SOLUTION,
    cases=(Case("B1 T8 S8 N2 H16", (("q", (1, 8, 8 // 4, 16), "float32"), ("k", (1, 8, 2, 16), "float32")), seed=7),
           Case("B1 T6 S10 N1 H8 (T ≠ S)", (("q", (1, 6, 1, 8), "float32"), ("k", (1, 10, 1, 8), "float32")), seed=8)),
    reference=lambda q, k: _ref_weights(q, k, causal=True), mistakes=CAUSAL_MISTAKES,
)
WINDOW = Exercise(
    name="window", page="pages/p6_causal.py", title="a sliding window",
    task="Now a sliding window: query i sees keys i − left .. i + right (`local_window_size=(left, right)`). With "
         "more queries than keys, some query sees no key at all: its weights are all zero, as the fused kernels "
         "return.", entry="window_weights", skeleton=WINDOW_SKELETON, solution=WINDOW_SOLUTION,
    cases=(Case("B1 T8 S8 N2 H16, window (2, 0)", (("q", (1, 8, 2, 16), "float32"), ("k", (1, 8, 2, 16), "float32")),
                (("left", 2), ("right", 0)), seed=9),
           Case("B1 T10 S5 N1 H8, window (2, 1): queries 7..9 see no key",
                (("q", (1, 10, 1, 8), "float32"), ("k", (1, 5, 1, 8), "float32")), (("left", 2), ("right", 1)),
                seed=10)),
    reference=lambda q, k, left, right: _ref_weights(q, k, window=(left, right)), mistakes=WINDOW_MISTAKES,
)

