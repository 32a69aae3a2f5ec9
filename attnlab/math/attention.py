"""Scaled dot-product attention, written once: scores -> scale -> mask + softmax -> attend.

    Attention(Q, K, V) = softmax(Q·Kᵀ / sqrt(H)) · V          (Vaswani et al. 2017, eq. 1)

Every function takes an array module `xp` (`jax.numpy`, the default, or `numpy`), so the same
lines compute naive attention on the device, the heatmaps of pages 1 and 6, and the float64
reference every implementation is checked against (`attnlab.math.checks`).

Grouped heads without copies: Q is (B, T, N, H) and K, V are (B, S, K, H) with N = K·G. Query
heads are viewed as (K, G): the G query heads of a group share one key/value head. Nothing is
repeated, so GQA and MQA cost no extra memory here (`jnp.repeat` would copy K and V G times).

One mask fill: a masked score is left out of the softmax (its weight is exactly 0), and a query
that may see no key at all gets all-zero weights and a zero output, as the fused kernels return.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from attnlab.masks import Mask


def split_heads(q, kv_heads: int):
    """(B, T, N, H) -> (B, T, K, G, H): query heads grouped by the key/value head they share."""
    B, T, N, H = q.shape
    return q.reshape(B, T, kv_heads, N // kv_heads, H)


def scores(q, k, xp=jnp):
    """Stage 1: Q·Kᵀ for every head. (B, T, N, H), (B, S, K, H) -> (B, N, T, S), float32 or wider."""
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    qg = split_heads(q, K)  # (B, T, K, G, H)
    if xp is jnp:
        s = jnp.einsum("btkgh,bskh->bkgts", qg, k, preferred_element_type=jnp.float32)
    else:
        s = xp.einsum("btkgh,bskh->bkgts", qg, k)
    return s.reshape(B, N, T, S)  # (B, N, T, S)


def scale(s, head_dim: int):
    """Stage 2: divide by sqrt(H), so the logits' spread stays near 1 as H grows (Vaswani, footnote 4)."""
    return s / math.sqrt(head_dim)


def softmax(s, allowed=None, xp=jnp):
    """Stage 3: softmax over keys (the last axis) of the scores a query may see.

    Masked keys get weight 0; a row with no allowed key gets all zeros (not NaN). The row maximum
    is subtracted first so that exp never overflows (the usual "safe softmax").
    """
    if allowed is not None:
        s = xp.where(allowed, s, -xp.inf)
    m = xp.max(s, axis=-1, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0.0)  # a fully masked row: max is -inf
    e = xp.exp(s - m)
    if allowed is not None:
        e = xp.where(allowed, e, 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return e / xp.where(total > 0, total, 1.0)


def attend(w, v, xp=jnp):
    """Stage 4: weights · V. (B, N, T, S), (B, S, K, H) -> (B, T, N, H), accumulated in float32 or wider."""
    B, N, T, S = w.shape
    K, H = v.shape[2], v.shape[3]
    wg = w.reshape(B, K, N // K, T, S)  # (B, K, G, T, S)
    if xp is jnp:
        o = jnp.einsum("bkgts,bskh->btkgh", wg.astype(v.dtype), v, preferred_element_type=jnp.float32)
    else:
        o = xp.einsum("bkgts,bskh->btkgh", wg, v)
    return o.reshape(B, T, N, H)  # (B, T, N, H)


def weights(q, k, *, mask: Mask | None = None, scaled=True, xp=jnp,
            causal=False, window=None, kv_lengths=None):
    """softmax(Q·Kᵀ/sqrt(H)) under the mask: (B, N, T, S), each row sums to 1 (or 0 if it sees nothing).

    The mask is `mask` (a shape's), else the one jax.nn's arguments causal, window and kv_lengths make."""
    B, T, S = q.shape[0], q.shape[1], k.shape[1]
    mask = Mask.of(causal=causal, window=window, kv_lengths=kv_lengths) if mask is None else mask
    s = scores(q, k, xp)
    if scaled:
        s = scale(s, q.shape[-1])
    return softmax(s, mask.matrix(T, S, B, xp=xp), xp)


def attention(q, k, v, *, mask: Mask | None = None, xp=jnp,
              causal=False, window=None, kv_lengths=None):
    """The four stages: (B, T, N, H), (B, S, K, H) x2 -> (B, T, N, H), under `mask` or jax.nn's mask arguments.

    With `xp=jnp` this is the lab's naive attention: it materialises the (B, N, T, S) scores and
    weights in float32, which is what a fused kernel avoids. With `xp=numpy` on float64 inputs it
    is the float64 reference.
    """
    w = weights(q, k, causal=causal, window=window, kv_lengths=kv_lengths, mask=mask, xp=xp)
    out = attend(w, v, xp)
    return out.astype(q.dtype) if xp is jnp else out


def naive_attention(q, k, v):
    """Attention from scratch in four lines, as a notebook writes it: Q, K, V all (B, T, N, H), no mask."""
    s = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)  # scores, scaled
    w = jnp.exp(s - s.max(axis=-1, keepdims=True))  # softmax over the keys, safely:
    w = w / w.sum(axis=-1, keepdims=True)  # subtract the row's max, exponentiate, normalise
    return jnp.einsum("bnts,bsnh->btnh", w, v)  # attend: weights times values
