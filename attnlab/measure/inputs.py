"""Q, K and V for a shape and a seed: drawn by NumPy on the host where they are small (no compile), else by one
compiled program on the device; the same arrays for the same shape and seed.

    host = host_inputs(shape, seed)          # NumPy arrays in shape.dtype (small shapes only)
    q, k, v = make_inputs(shape, seed)       # on the device, holding it (runs.inputs() takes the turn)
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.admission import DEVICE
from attnlab.shapes import AttentionShape

# Up to this many elements (Q, K, V together) are drawn by NumPy on the host (no compile); more on the device.
HOST_DRAW_MAX = 1 << 24


def drawn_on_host(shape: AttentionShape) -> bool:
    """Whether Q, K and V of `shape` are drawn by NumPy on the host (at most HOST_DRAW_MAX elements)."""
    return bool(np.prod(shape.q_shape()) + 2 * np.prod(shape.kv_shape()) <= HOST_DRAW_MAX)


def make_inputs(shape: AttentionShape, seed: int = 0, host: tuple | None = None):
    """Random normal Q (B, T, N, H), K and V (B, S, K, H) in shape.dtype on the default device; one shape and
    seed, the same arrays (`host`: this shape's and seed's `host_inputs`, drawn already). Call it holding the
    device for `shape.input_bytes()` (`runs.inputs()` does both)."""
    DEVICE.launch(f"inputs at {shape.describe()}")
    if drawn_on_host(shape):
        # a new shape costs no compile this way (a jitted jax.random draw costs 0.3-1 s per shape)
        return tuple(jax.device_put(x) for x in (host or host_inputs(shape, seed)))
    return _draw(shape.q_shape(), shape.kv_shape(), shape.dtype, jnp.uint32(seed))


def host_inputs(shape: AttentionShape, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q, K and V of a small shape (at most HOST_DRAW_MAX elements) as NumPy arrays in shape.dtype: the very
    arrays `make_inputs` puts on the device for this shape and seed."""
    if not drawn_on_host(shape):
        raise ValueError(f"{shape.describe()} is too large to draw on the host (at most {HOST_DRAW_MAX:,} elements)")
    rng, dtype = np.random.default_rng(seed), jnp.dtype(shape.dtype)
    q, k, v = (rng.standard_normal(s, dtype=np.float32).astype(dtype)
               for s in (shape.q_shape(), shape.kv_shape(), shape.kv_shape()))
    return q, k, v


@partial(jax.jit, static_argnums=(0, 1, 2))
def _draw(q_shape, kv_shape, dtype: str, seed):
    """One compiled program per shape draws all three (op by op, every new shape compiled six)."""
    kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 3)
    return tuple(jax.random.normal(key, s, dtype=jnp.float32).astype(dtype)
                 for key, s in ((kq, q_shape), (kk, kv_shape), (kv, kv_shape)))
