"""The attention weights themselves, for pages 1 and 6: the four stages on a small example, what 1/sqrt(d) is
for, heatmaps, and what a causal mask changes.

Computed by `attnlab.math.attention` (the functions naive attention runs) on the run layer's inputs, in a turn
on the device; a heatmap's small example is computed exactly in NumPy where the page runs (`heatmap_weights`).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.backends.base import abstract_inputs
from attnlab.backends.naive import NAIVE
from attnlab.masks import Mask
from attnlab.math import attention
from attnlab.measure import compiled, runs
from attnlab.shapes import NO_MASK, AttentionShape

EXAMPLE_LEN = 6  # page 1's example: T = S = 6 positions, small enough to read every number


def example_shape(head_dim: int = 4, causal: bool = False) -> AttentionShape:
    """Page 1's tiny float32 example: one sequence, one head, EXAMPLE_LEN positions."""
    return AttentionShape(batch=1, q_len=EXAMPLE_LEN, kv_len=EXAMPLE_LEN, heads=1, kv_heads=1, head_dim=head_dim,
                          causal=causal)


def four_stages(shape: AttentionShape, seed: int = 0, scaled: bool = True) -> dict[str, np.ndarray]:
    """The four stages on a small example, intermediates kept (batch 0, head 0); scaled=False: no 1/√H."""
    program = _stages.ahead(*abstract_inputs(shape), scaled=scaled, mask=shape.mask)  # before the device
    with runs.inputs(shape, seed, device_bytes=NAIVE.device_bytes(shape)) as (q, k, v):
        return {name: np.asarray(x) for name, x in program(q, k, v).items()}


@compiled.for_check(static_argnames=("scaled", "mask"))
def _stages(q, k, v, *, scaled: bool, mask: Mask) -> dict:
    """four_stages' arithmetic, compiled once per shape (op by op, every new shape compiles a dozen)."""
    s = attention.scores(q, k)  # 1. (B, N, T, S)
    logits = attention.scale(s, q.shape[-1]) if scaled else s  # 2.
    allowed = mask.matrix(q.shape[1], k.shape[1], q.shape[0])
    w = attention.softmax(logits, allowed)  # 3.
    out = attention.attend(w, v)  # 4. (B, T, N, H)
    shown = logits[0, 0] if allowed is None else jnp.where(jnp.broadcast_to(allowed, s.shape)[0, 0], logits[0, 0],
                                                           -jnp.inf)
    return {
        "q": q[0, :, 0].astype(jnp.float32),  # (T, H)
        "k": k[0, :, 0].astype(jnp.float32),  # (S, H): key/value head 0 serves query head 0
        "v": v[0, :, 0].astype(jnp.float32),
        "scores": s[0, 0],  # (T, S)
        "scaled": shown,
        "weights": w[0, 0],
        "out": out[0, :, 0].astype(jnp.float32),  # (T, H)
    }


def entropy(w) -> np.ndarray:
    """Shannon entropy (nats) of each row of weights; log(S) is uniform, 0 is one-hot."""
    w = np.asarray(w, np.float64)
    return -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0), axis=-1)


def _unit_normal_qk(h: int, seq_len: int, seed: int, heads: int = 4):
    """q (1, T, N, H) and k (1, S, N, H) with unit-variance entries, in NumPy (no device, no compile)."""
    rng = np.random.default_rng(seed + h)
    return rng.standard_normal((2, 1, seq_len, heads, h))


def scale_effect(head_dims=(8, 16, 32, 64, 128, 256, 512), seq_len: int = 64, seed: int = 0) -> pd.DataFrame:
    """With and without 1/sqrt(H): the largest weight and the mean row entropy, as H grows. Unscaled, the
    logits spread as sqrt(H), the softmax saturates towards one-hot, and its gradients vanish."""
    rows = []
    for h in head_dims:
        q, k = _unit_normal_qk(h, seq_len, seed)
        for scaled in (True, False):
            w = attention.weights(q, k, scaled=scaled, xp=np)
            rows.append(dict(head_dim=h, scaling="1/sqrt(d)" if scaled else "none",
                             max_weight=float(w.max(axis=-1).mean()), entropy=float(entropy(w).mean()),
                             uniform_entropy=math.log(seq_len)))
    return pd.DataFrame(rows)


def score_spread(head_dims=(8, 16, 32, 64, 128, 256, 512), seq_len: int = 64, seed: int = 0) -> pd.DataFrame:
    """The standard deviation of the logits q·k, unscaled and scaled by 1/sqrt(H), next to sqrt(H): q·k of
    unit-variance entries has variance H (Vaswani et al. 2017, footnote 4), so 1/sqrt(H) brings it to 1."""
    rows = []
    for h in head_dims:
        q, k = _unit_normal_qk(h, seq_len, seed)
        s = attention.scores(q, k, np)  # (1, N, T, S) float64
        rows.append(dict(head_dim=h, sqrt_head_dim=math.sqrt(h), std_unscaled=float(s.std()),
                         std_scaled=float(s.std() / math.sqrt(h))))
    return pd.DataFrame(rows)


def heatmap_weights(shape: AttentionShape, seed: int = 0) -> np.ndarray:
    """The exact weights (B, N, T, S) of a small `shape` (`view_shape`) under its masks, as float32: float64
    NumPy on the device's inputs (`runs.host_inputs`), where the page runs: no GPU, compile or turn."""
    q, k, _ = runs.host_inputs(shape, seed)
    w = attention.weights(q.astype(np.float64), k.astype(np.float64), mask=shape.mask, xp=np)
    return np.asarray(w, np.float32)


@compiled.for_check
def _change_by_causal(q, k, v):
    """max over batch, heads and features of |attention without mask − causal attention|, per query."""
    full = attention.attention(q, k, v)
    causal = attention.attention(q, k, v, causal=True)
    return jnp.abs(full.astype(jnp.float32) - causal.astype(jnp.float32)).max(axis=(0, 2, 3))


def heatmap(view: AttentionShape, batch_index: int, head: int) -> tuple[np.ndarray, np.ndarray]:
    """One heatmap of page 6: one sequence and head's (T, S) weights (`heatmap_weights`) and allowed cells."""
    return heatmap_weights(view)[batch_index, head], allowed_matrix(view, batch_index)


def allowed_matrix(shape: AttentionShape, batch_index: int = 0) -> np.ndarray:
    """(T, S) bool: the keys each query of sequence `batch_index` may see under the masks (others greyed)."""
    m = shape.mask.sequence(batch_index).matrix(shape.q_len, shape.kv_len, xp=np)
    return np.ones((shape.q_len, shape.kv_len), bool) if m is None else np.broadcast_to(m, (shape.q_len, shape.kv_len)).copy()


def first_vs_last(shape: AttentionShape, seed: int = 0) -> pd.DataFrame:
    """The codelab's table: how much causal masking changes each query position's output. Position 0 sees only
    key 0 under the mask, so early outputs change a lot; the last sees every key either way (T == S), so its
    output does not change. Against no mask at all: a window or padding is left out."""
    full_shape = shape.replace(mask=NO_MASK)
    program = _change_by_causal.ahead(*abstract_inputs(full_shape))  # compiled before the device
    with runs.inputs(full_shape, seed, device_bytes=2 * NAIVE.device_bytes(full_shape)) as (q, k, v):
        diff = np.asarray(program(q, k, v))
    T, S = full_shape.q_len, full_shape.kv_len
    picks = sorted({0, min(1, T - 1), T // 2, T - 1})  # T may be 1
    return pd.DataFrame({
        "position": picks,
        "keys seen (full)": [S] * len(picks),
        "keys seen (causal)": [min(i + 1, S) for i in picks],
        "max |full − causal|": [float(diff[i]) for i in picks],
    })


FIRST_VS_LAST_CAP = 512  # first_vs_last runs naive attention twice; beyond this it uses a shorter sequence


def first_vs_last_shape(shape: AttentionShape) -> AttentionShape:
    """The shape of `first_vs_last`: no window or padding, lengths ≤ FIRST_VS_LAST_CAP (then batch ≤ 2)."""
    out = shape.replace(window=None, kv_lengths=())
    if max(shape.q_len, shape.kv_len) <= FIRST_VS_LAST_CAP:
        return out
    return out.replace(batch=min(shape.batch, 2), q_len=min(shape.q_len, FIRST_VS_LAST_CAP),
                       kv_len=min(shape.kv_len, FIRST_VS_LAST_CAP))


def view_shape(shape: AttentionShape, max_len: int = 64, max_batch: int = 2) -> AttentionShape:
    """The small shape heatmaps are drawn from: at most `max_batch` batch elements and `max_len`
    query and key positions; heads, kv_heads, head_dim, dtype and the masks are kept."""
    lengths = tuple(min(n, max_len) for n in shape.kv_lengths[: max_batch if len(shape.kv_lengths) > 1 else 1])
    return shape.replace(batch=min(shape.batch, max_batch), q_len=min(shape.q_len, max_len),
                         kv_len=min(shape.kv_len, max_len), kv_lengths=lengths)


def long_frame(matrix: np.ndarray, value: str = "weight") -> pd.DataFrame:
    """A (T, S) matrix as rows (query, key, value) for a heatmap; -inf (masked logits) becomes NaN."""
    m = np.asarray(matrix, np.float64)
    t, s = np.indices(m.shape)
    vals = np.where(np.isfinite(m), m, np.nan).ravel()
    return pd.DataFrame({"query": t.ravel(), "key": s.ravel(), value: vals})
