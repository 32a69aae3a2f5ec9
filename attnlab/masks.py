"""Boolean attention masks, True where a query may attend to a key (the `jax.nn` convention).

All masks are (T, S) or (B, 1, T, S) and broadcast against scores of shape (B, N, T, S).
Causal masks are aligned top-left, as `jax.nn.dot_product_attention(is_causal=True)` aligns
them: query i sees keys 0..i.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array


def causal(q_len: int, kv_len: int) -> Array:
    """(T, S): query i attends to keys j <= i."""
    return jnp.tril(jnp.ones((q_len, kv_len), dtype=bool))


def sliding_window(q_len: int, kv_len: int, left: int, right: int = 0) -> Array:
    """(T, S): query i attends to keys i-left .. i+right (`local_window_size=(left, right)`)."""
    i = jnp.arange(q_len)[:, None]
    j = jnp.arange(kv_len)[None, :]
    return (j >= i - left) & (j <= i + right)


def padding(kv_lengths: Array, q_len: int, kv_len: int) -> Array:
    """(B, 1, T, S): in batch b only the first kv_lengths[b] keys are real (`key_value_seq_lengths`)."""
    j = jnp.arange(kv_len)[None, None, None, :]
    valid = j < jnp.asarray(kv_lengths)[:, None, None, None]
    return jnp.broadcast_to(valid, (valid.shape[0], 1, q_len, kv_len))


def combine(*masks: Array | None) -> Array | None:
    """Logical AND of the masks given (None ones are skipped); None when there are none."""
    out = None
    for m in masks:
        if m is not None:
            out = m if out is None else out & m
    return out
