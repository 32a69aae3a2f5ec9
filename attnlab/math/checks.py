"""The float64 reference every implementation is checked against, bounded in bytes.

The reference is `attention.attention` itself, run in NumPy on float64 copies of the inputs.
For a large shape it is computed on a slice: some batch entries, some query heads and some
query rows. That is exact, not an approximation: each (batch, head, query) row of attention
depends only on its own query and the keys and values it sees. The slice is chosen so the
host memory the reference needs stays under `REFERENCE_MAX_BYTES`, whatever the shape.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import TypedDict, cast

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.math import attention
from attnlab.shapes import AttentionShape, format_bytes


class Tolerance(TypedDict):  # np.allclose's keyword arguments
    rtol: float
    atol: float


# allclose tolerances per input dtype, against the float64 reference. float32 allows for TF32:
# on Ampere and newer GPUs JAX's default matmul precision lets XLA use TF32 tensor cores
# (10-bit mantissa, ~3e-4 relative error).
TOLERANCES: dict[str, Tolerance] = {
    "float32": dict(rtol=2e-3, atol=2e-3),
    "bfloat16": dict(rtol=1e-2, atol=1e-2),
    "float16": dict(rtol=5e-3, atol=5e-3),
}
REFERENCE_MAX_BYTES = 256 * 2**20


@dataclasses.dataclass(frozen=True)
class Slice:
    """Which part of the output the reference covers: batch 0..batch-1, `heads_per_group` query
    heads of each of the first `kv_heads` groups, and the query positions in `rows`."""

    batch: int
    kv_heads: int
    heads_per_group: int
    rows: tuple[int, ...]

    def query_heads(self, shape: AttentionShape) -> np.ndarray:
        g = shape.group_size
        return np.array([kv * g + i for kv in range(self.kv_heads) for i in range(self.heads_per_group)])

    def host_bytes(self, shape: AttentionShape) -> int:
        """float64 bytes the reference holds at its peak: inputs, three (b, n, t, S) matrices, output."""
        b, n, t = self.batch, self.kv_heads * self.heads_per_group, len(self.rows)
        S, H = shape.kv_len, shape.head_dim
        inputs = b * t * n * H + 2 * b * S * self.kv_heads * H
        return 8 * (inputs + 3 * b * n * t * S + 2 * b * t * n * H) + b * t * S  # + the boolean mask


def choose_slice(shape: AttentionShape, max_bytes: int | None = None) -> Slice:
    """The largest slice (whole shape first, then fewer batch entries, heads, rows) under max_bytes
    (default REFERENCE_MAX_BYTES)."""
    max_bytes = REFERENCE_MAX_BYTES if max_bytes is None else max_bytes
    full = Slice(shape.batch, shape.kv_heads, shape.group_size, tuple(range(shape.q_len)))
    if full.host_bytes(shape) <= max_bytes:
        return full
    s = Slice(1, shape.kv_heads, shape.group_size, full.rows)
    for kv in (shape.kv_heads, 1):
        s = dataclasses.replace(s, kv_heads=kv)
        if s.host_bytes(shape) <= max_bytes:
            return s
    s = dataclasses.replace(s, heads_per_group=1)
    if s.host_bytes(shape) <= max_bytes:
        return s
    per_row = Slice(1, 1, 1, (0,)).host_bytes(shape)
    t = int(max(1, min(shape.q_len, max_bytes // max(per_row, 1))))
    # rows spread over the sequence, first and last included: under a causal mask early rows see
    # few keys and late rows see many, and both should be checked
    rows = tuple(sorted(set(np.linspace(0, shape.q_len - 1, t).round().astype(int).tolist())))
    return dataclasses.replace(s, rows=rows)


@dataclasses.dataclass(frozen=True)
class Accuracy:
    """One output against the float64 reference, on the reference's slice."""

    max_abs_error: float
    relative_error: float  # ||out - ref|| / ||ref||
    allclose: bool
    rtol: float
    atol: float


@partial(jax.jit, static_argnums=1)
def _gather(x, batch: int, rows, heads):
    """x[:batch][:, rows][:, :, heads] in float32, on x's device: one compiled program per shape and
    slice size (indexing op by op would compile a small program for every step, for every shape)."""
    return x[:batch][:, rows][:, :, heads].astype(jnp.float32)


# Copied whole and sliced on the host when the slice is the whole array, or the array is under this many
# bytes: no compile for a new shape. Otherwise sliced on its device first (one compiled gather per shape),
# so the host never holds more than the slice it counted (tests/test_memory.py checks it).
HOST_COPY_MAX_BYTES = 1 << 20


def _to_host(x, batch: int, rows, heads) -> np.ndarray:
    """The slice of x, copied to the host as float64; NumPy inputs, small arrays and whole-array
    slices are sliced on the host."""
    whole = batch == x.shape[0] and len(rows) == x.shape[1] and len(heads) == x.shape[2]
    if isinstance(x, np.ndarray) or whole or x.nbytes <= HOST_COPY_MAX_BYTES:
        return np.asarray(x)[:batch][:, rows][:, :, heads].astype(np.float64)
    return np.asarray(_gather(x, batch, jnp.asarray(rows), jnp.asarray(heads)), dtype=np.float64)


@dataclasses.dataclass(frozen=True)
class Reference:
    """The float64 reference of one call's inputs, on `slice` (the whole shape when it fits)."""

    shape: AttentionShape
    slice: Slice
    out: np.ndarray  # (b, t, n, H) float64
    defined: np.ndarray  # (b, t, 1, 1) bool: False where a query sees no key (its output is undefined)

    @property
    def note(self) -> str:
        """'' for the whole shape; else which part was checked and why."""
        s, shape = self.slice, self.shape
        blind = int((~self.defined).sum())
        undefined = (f"{blind:,} query positions see no key at all under these masks: their output is undefined "
                     "(XLA returns the mean of V there, a fused kernel zeros), so they are not compared. "
                     if blind else "")
        if len(s.rows) == shape.q_len and s.batch == shape.batch and s.kv_heads == shape.kv_heads \
                and s.heads_per_group == shape.group_size:
            return undefined.strip()
        whole = Slice(shape.batch, shape.kv_heads, shape.group_size, tuple(range(shape.q_len)))
        return undefined + (f"checked on {s.batch} of {shape.batch} sequences, {s.kv_heads * s.heads_per_group} of "
                f"{shape.heads} query heads and {len(s.rows):,} of {shape.q_len:,} query positions (exact for "
                f"those: rows of attention are independent); the whole float64 reference would need "
                f"{format_bytes(whole.host_bytes(shape))}")

    def take(self, out) -> np.ndarray:
        """The reference's slice of a whole (B, T, N, H) output, as float64 (sliced before copying)."""
        return _to_host(out, self.slice.batch, np.asarray(self.slice.rows), self.slice.query_heads(self.shape))

    def check(self, out) -> Accuracy:
        tol = TOLERANCES[self.shape.dtype]
        keep = np.broadcast_to(self.defined, self.out.shape)
        got, want = self.take(out)[keep], self.out[keep]
        if not np.isfinite(got).all():
            return Accuracy(float("nan"), float("nan"), False, **tol)
        err = got - want
        norm = np.linalg.norm(want)
        return Accuracy(
            max_abs_error=float(np.abs(err).max()) if err.size else 0.0,
            relative_error=float(np.linalg.norm(err) / norm) if norm > 0 else float(np.linalg.norm(err)),
            allclose=bool(np.allclose(got, want, **tol)),
            **tol,
        )


def float64_reference(shape: AttentionShape, q, k, v, max_bytes: int | None = None) -> Reference:
    """attention.attention in float64 NumPy on the slice `choose_slice` picks for inputs q, k, v."""
    s = choose_slice(shape, max_bytes)
    rows = np.asarray(s.rows)
    heads = s.query_heads(shape)
    every_key, kv_heads = np.arange(shape.kv_len), np.arange(s.kv_heads)
    q64 = _to_host(q, s.batch, rows, heads)  # (b, t, n, H)
    k64 = _to_host(k, s.batch, every_key, kv_heads)  # (b, S, kv, H)
    v64 = _to_host(v, s.batch, every_key, kv_heads)
    allowed = shape.mask.matrix(shape.q_len, shape.kv_len, s.batch, rows=rows, xp=np)  # the slice's sequences
    w = attention.softmax(attention.scale(attention.scores(q64, k64, np), shape.head_dim), allowed, np)
    defined = np.ones((s.batch, len(rows), 1, 1), bool)
    if allowed is not None:  # (t, S) or (b, 1, t, S) -> (b, t, 1, 1)
        seen = cast(np.ndarray, np.broadcast_to(allowed, (s.batch, 1, len(rows), shape.kv_len)).any(axis=-1))
        defined = seen[:, 0, :, None, None]
    return Reference(shape, s, attention.attend(w, v64, np), defined)
