"""The masks as whole (T, S) arrays, built the plain way (tril, a band, a length per sequence) with jax.nn's
arguments: what tests check `Mask` against. Moved here from attnlab/masks.py, where nothing but tests used them."""

from __future__ import annotations

from attnlab.masks import Mask


def _jnp():
    import jax.numpy as jnp
    return jnp


def causal(q_len: int, kv_len: int, xp=None):
    """(T, S): query i attends to keys j <= i."""
    xp = xp or _jnp()
    return xp.tril(xp.ones((q_len, kv_len), dtype=bool))


def sliding_window(q_len: int, kv_len: int, left: int, right: int = 0, xp=None):
    """(T, S): query i attends to keys i-left .. i+right (`local_window_size=(left, right)`)."""
    xp = xp or _jnp()
    i = xp.arange(q_len)[:, None]
    j = xp.arange(kv_len)[None, :]
    return (j >= i - left) & (j <= i + right)


def padding(kv_lengths, q_len: int, kv_len: int, xp=None):
    """(B, 1, T, S): in batch b only the first kv_lengths[b] keys are real (`key_value_seq_lengths`)."""
    xp = xp or _jnp()
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


# each mask type's key (attnlab.masks.BY_KEY) -> its plain construction, (T, S, value) -> allowed
PLAIN = {
    "causal": lambda q_len, kv_len, on: causal(q_len, kv_len) if on else None,
    "window": lambda q_len, kv_len, w: sliding_window(q_len, kv_len, *w),
    "kv_lengths": lambda q_len, kv_len, lengths: padding(lengths, q_len, kv_len),
}


def allowed(q_len: int, kv_len: int, *, causal: bool = False, window=None, kv_lengths=None, rows=None, xp=None):
    """`Mask.matrix` with jax.nn's arguments (kv_lengths: one per sequence)."""
    batch = None if kv_lengths is None else len(kv_lengths)
    return Mask.of(causal=causal, window=window, kv_lengths=kv_lengths).matrix(q_len, kv_len, batch, rows, xp)
