"""Boolean attention masks, True where a query may attend to a key (the `jax.nn` convention).

Masks are (T, S) or (B, 1, T, S) and broadcast against scores of shape (B, N, T, S). They follow
`jax.nn.dot_product_attention`'s arguments:

    is_causal=True                 query i sees keys 0..i (aligned top-left)
    local_window_size=(L, R)       query i sees keys i-L .. i+R (a sliding window)
    key_value_seq_lengths=[S_b]    in batch b only the first S_b keys are real (padding)

Each function takes an array module `xp` (`jax.numpy` by default, or `numpy`).
"""

from __future__ import annotations

import jax.numpy as jnp


def causal(q_len: int, kv_len: int, xp=jnp):
    """(T, S): query i attends to keys j <= i."""
    return xp.tril(xp.ones((q_len, kv_len), dtype=bool))


def sliding_window(q_len: int, kv_len: int, left: int, right: int = 0, xp=jnp):
    """(T, S): query i attends to keys i-left .. i+right (`local_window_size=(left, right)`)."""
    i = xp.arange(q_len)[:, None]
    j = xp.arange(kv_len)[None, :]
    return (j >= i - left) & (j <= i + right)


def padding(kv_lengths, q_len: int, kv_len: int, xp=jnp):
    """(B, 1, T, S): in batch b only the first kv_lengths[b] keys are real (`key_value_seq_lengths`)."""
    j = xp.arange(kv_len)[None, None, None, :]
    valid = j < xp.asarray(kv_lengths)[:, None, None, None]
    return xp.broadcast_to(valid, (valid.shape[0], 1, q_len, kv_len))


def combine(*masks):
    """Logical AND of the masks given (None ones are skipped); None when there are none."""
    out = None
    for m in masks:
        if m is not None:
            out = m if out is None else out & m
    return out


def visible(q_index, k_index, *, causal: bool = False, window=None, kv_length=None):
    """True where query q_index may attend to key k_index: the one mask rule of the lab.

    Works on NumPy and JAX arrays that broadcast, (..., t, 1) against (..., 1, s), so a tile of a
    flash kernel and a whole (T, S) matrix are masked by the same lines. kv_length: keys at or past
    it are padding (a number, or an array that broadcasts).
    """
    ok = None
    if causal:
        ok = k_index <= q_index  # top-left aligned, as jax.nn's is_causal
    if window is not None:
        near = (k_index >= q_index - window[0]) & (k_index <= q_index + window[1])
        ok = near if ok is None else ok & near
    if kv_length is not None:
        real = k_index < kv_length
        ok = real if ok is None else ok & real
    return ok


def allowed(q_len: int, kv_len: int, *, causal: bool = False, window=None, kv_lengths=None, rows=None, xp=jnp):
    """Every mask a shape asks for, as (T, S) or (B, 1, T, S); None when nothing is masked.

    `rows` (query positions, default all of 0..T-1) builds the mask for those queries only:
    the float64 reference checks a few rows of a long sequence without a (T, S) mask in memory.
    """
    i = (xp.arange(q_len) if rows is None else xp.asarray(rows))[:, None]  # (t, 1)
    j = xp.arange(kv_len)[None, :]  # (1, S)
    length = None if kv_lengths is None else xp.asarray(kv_lengths)[:, None, None, None]  # (B, 1, 1, 1)
    return visible(i, j, causal=causal, window=window, kv_length=length)
