"""Attention weight matrices (B, N, T, S) for heatmaps, and the small lessons built on them.

The weights are softmax(Q·Kᵀ/sqrt(H)) under a mask, computed with the same stages as the naive
implementation; `masked_output_check` confirms that the fused API, given the same masks through
its own arguments (`is_causal`, `local_window_size`, `key_value_seq_lengths`), computes weights·V.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from jax import Array

from attnlab import masks
from attnlab.implementations import make_inputs, naive_attention
from attnlab.shapes import AttentionShape


def scores(q: Array, k: Array) -> Array:
    """Stage 1: Q·Kᵀ for every head, (B, N, T, S) float32 (KV heads repeated for GQA)."""
    k = jnp.repeat(k, q.shape[2] // k.shape[2], axis=2)
    return jnp.einsum("btnh,bsnh->bnts", q, k, preferred_element_type=jnp.float32)


def attention_weights(
    q: Array,
    k: Array,
    *,
    causal: bool = False,
    window: tuple[int, int] | None = None,
    kv_lengths: Array | None = None,
    scaled: bool = True,
) -> Array:
    """softmax over keys of the (optionally scaled and masked) scores: (B, N, T, S), rows sum to 1."""
    T, S, H = q.shape[1], k.shape[1], q.shape[-1]
    s = scores(q, k)
    if scaled:
        s = s / math.sqrt(H)
    allowed = masks.combine(
        masks.causal(T, S) if causal else None,
        masks.sliding_window(T, S, *window) if window else None,
        masks.padding(kv_lengths, T, S) if kv_lengths is not None else None,
    )
    if allowed is not None:
        s = jnp.where(allowed, s, -jnp.inf)
    return jax.nn.softmax(s, axis=-1)


def four_stages(shape: AttentionShape, seed: int = 0, scaled: bool = True) -> dict[str, np.ndarray]:
    """The lab's four stages on one small example, every intermediate kept (batch 0, head 0).

    scaled=False drops the 1/sqrt(H) of stage 2 (to show what it is for); the output is then
    weights·V by hand, since every implementation in the registry scales.
    """
    q, k, v = make_inputs(shape, seed)
    s = scores(q, k)
    logits = s / math.sqrt(shape.head_dim) if scaled else s
    if shape.causal:
        logits = jnp.where(masks.causal(shape.q_len, shape.kv_len), logits, -jnp.inf)
    w = jax.nn.softmax(logits, axis=-1)
    if scaled:
        out = naive_attention(q, k, v, causal=shape.causal)
    else:
        vv = jnp.repeat(v, shape.group_size, axis=2).astype(jnp.float32)
        out = jnp.einsum("bnts,bsnh->btnh", w, vv)
    g = shape.group_size
    return {
        "q": np.asarray(q[0, :, 0], np.float32),  # (T, H)
        "k": np.asarray(k[0, :, 0 // g], np.float32),  # (S, H)
        "v": np.asarray(v[0, :, 0 // g], np.float32),
        "scores": np.asarray(s[0, 0]),  # (T, S)
        "scaled": np.asarray(logits[0, 0]),
        "weights": np.asarray(w[0, 0]),
        "out": np.asarray(out[0, :, 0], np.float32),  # (T, H)
    }


def entropy(w: Array) -> Array:
    """Shannon entropy (nats) of each row of weights; log(S) is uniform, 0 is one-hot."""
    return -jnp.sum(jnp.where(w > 0, w * jnp.log(jnp.where(w > 0, w, 1.0)), 0.0), axis=-1)


def scale_effect(head_dims=(8, 16, 32, 64, 128, 256, 512), seq_len: int = 64, seed: int = 0) -> pd.DataFrame:
    """With and without 1/sqrt(H): the largest weight and the mean row entropy, as H grows.

    For unit-variance q and k, q·k has variance H: unscaled, the logits spread as sqrt(H) and the
    softmax saturates towards one-hot (max weight -> 1, entropy -> 0), and its gradients vanish.
    """
    rows = []
    for h in head_dims:
        shape = AttentionShape(batch=1, q_len=seq_len, kv_len=seq_len, heads=4, kv_heads=4, head_dim=h)
        q, k, _ = make_inputs(shape, seed)
        for scaled in (True, False):
            w = attention_weights(q, k, scaled=scaled)
            rows.append(dict(
                head_dim=h,
                scaling="1/sqrt(d)" if scaled else "none",
                max_weight=float(jnp.max(w, axis=-1).mean()),
                entropy=float(entropy(w).mean()),
                uniform_entropy=math.log(seq_len),
            ))
    return pd.DataFrame(rows)


def masked_output_check(
    shape: AttentionShape,
    *,
    window: tuple[int, int] | None = None,
    kv_lengths: list[int] | None = None,
    implementation: str = "xla",
    seed: int = 0,
) -> dict:
    """The fused API given the masks through its own arguments vs weights·V from `attention_weights`."""
    q, k, v = make_inputs(shape, seed)
    lengths = None if kv_lengths is None else jnp.asarray(kv_lengths, dtype=jnp.int32)
    fused = jax.nn.dot_product_attention(
        q, k, v,
        is_causal=shape.causal,
        local_window_size=window,
        key_value_seq_lengths=lengths,
        implementation=implementation,
    )
    w = attention_weights(q, k, causal=shape.causal, window=window, kv_lengths=lengths)
    vv = jnp.repeat(v, shape.group_size, axis=2)
    by_hand = jnp.einsum("bnts,bsnh->btnh", w, vv.astype(jnp.float32))
    diff = np.abs(np.asarray(fused, np.float32) - np.asarray(by_hand))
    # rows with no key at all (padding to 0) are NaN by hand; the API returns zeros there
    diff = np.where(np.isnan(diff), 0.0, diff)
    return {"weights": np.asarray(w), "max_abs_diff": float(diff.max())}


def first_vs_last(shape: AttentionShape, seed: int = 0) -> pd.DataFrame:
    """The codelab's table: how much causal masking changes each query position's output.

    Position 0 may see only key 0 under the mask, so its output changes most; the last position
    sees every key either way (when T == S), so its output does not change at all.
    """
    q, k, v = make_inputs(shape.replace(causal=False), seed)
    full = np.asarray(naive_attention(q, k, v, causal=False), np.float32)
    causal = np.asarray(naive_attention(q, k, v, causal=True), np.float32)
    diff = np.abs(full - causal).max(axis=(0, 2, 3))  # per query position
    T, S = shape.q_len, shape.kv_len
    picks = sorted({0, min(1, T - 1), T // 2, T - 1})  # T may be 1
    return pd.DataFrame({
        "position": picks,
        "keys seen (full)": [S] * len(picks),
        "keys seen (causal)": [min(i + 1, S) for i in picks],
        "max |full − causal|": [float(diff[i]) for i in picks],
    })


def score_spread(head_dims=(8, 16, 32, 64, 128, 256, 512), seq_len: int = 64, seed: int = 0) -> pd.DataFrame:
    """The standard deviation of the logits q·k, unscaled and scaled by 1/sqrt(H), next to sqrt(H).

    q and k have unit-variance entries, so q·k is a sum of H products of variance 1: its variance
    is H and its spread sqrt(H) (Vaswani et al. 2017, footnote 4). Dividing by sqrt(H) brings it
    back to 1 whatever the head size.
    """
    rows = []
    for h in head_dims:
        shape = AttentionShape(batch=1, q_len=seq_len, kv_len=seq_len, heads=4, kv_heads=4, head_dim=h)
        q, k, _ = make_inputs(shape, seed)
        s = np.asarray(scores(q, k), np.float64)
        rows.append(dict(head_dim=h, sqrt_head_dim=math.sqrt(h), std_unscaled=float(s.std()),
                         std_scaled=float(s.std() / math.sqrt(h))))
    return pd.DataFrame(rows)


def view_shape(shape: AttentionShape, max_len: int = 64, max_batch: int = 2) -> AttentionShape:
    """The small shape heatmaps are drawn from: at most `max_batch` batch elements and `max_len`
    query and key positions; heads, kv_heads, head_dim, dtype and causal are kept."""
    return shape.replace(batch=min(shape.batch, max_batch), q_len=min(shape.q_len, max_len),
                         kv_len=min(shape.kv_len, max_len))


def long_frame(matrix: np.ndarray, value: str = "weight") -> pd.DataFrame:
    """A (T, S) matrix as rows (query, key, value) for a heatmap; -inf (masked logits) becomes NaN."""
    m = np.asarray(matrix, np.float64)
    t, s = np.indices(m.shape)
    vals = np.where(np.isfinite(m), m, np.nan).ravel()
    return pd.DataFrame({"query": t.ravel(), "key": s.ravel(), value: vals})
