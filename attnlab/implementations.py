"""One registry of attention implementations, shared by every page, the CLI and the benchmarks.

Each entry is a function ``(q, k, v, shape) -> out`` with Q (B, T, N, H) and K, V (B, S, K, H),
honouring ``shape.causal`` and grouped KV heads, plus ``supports(shape, device)`` that says
whether it can run that shape on that device and, if not, why. Adding a backend is adding an
entry: it then shows up on every page and in ``python -m attnlab``.

    Attention(Q, K, V) = softmax(Q·Kᵀ / sqrt(H)) · V          (Vaswani et al. 2017, eq. 1)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from attnlab import masks
from attnlab.device import FUSED_ATTENTION_MIN_CC, DeviceInfo
from attnlab.shapes import AttentionShape, default_memory_limit, format_bytes


class Support(NamedTuple):
    ok: bool
    reason: str


# --------------------------------------------------------------------------------------------
# naive attention, from scratch: the four stages of the lab
# --------------------------------------------------------------------------------------------
def naive_attention(
    q: Array, k: Array, v: Array, *, causal: bool = False, mask: Array | None = None
) -> Array:
    """softmax(Q·Kᵀ/sqrt(H))·V written out: scores, scale, softmax, attend.

    q: (B, T, N, H); k, v: (B, S, K, H) with N a multiple of K. Returns (B, T, N, H).
    Scores and softmax are float32 whatever the input dtype, as in `jax.nn`'s XLA path.
    """
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    if K != N:  # GQA/MQA: each KV head serves N // K query heads, so repeat it that many times
        k = jnp.repeat(k, N // K, axis=2)  # (B, S, N, H)
        v = jnp.repeat(v, N // K, axis=2)
    q = q.transpose(0, 2, 1, 3)  # (B, N, T, H): heads become a batch dimension for the matmul
    k = k.transpose(0, 2, 1, 3)  # (B, N, S, H)
    v = v.transpose(0, 2, 1, 3)  # (B, N, S, H)

    scores = jnp.matmul(q, k.swapaxes(-1, -2), preferred_element_type=jnp.float32)  # 1. (B, N, T, S)
    scores = scores / math.sqrt(H)  # 2. scale: keeps the logits' variance near 1 as H grows
    allowed = masks.combine(masks.causal(T, S) if causal else None, mask)
    if allowed is not None:  # a large finite negative, not -inf: a fully masked row stays finite
        scores = jnp.where(allowed, scores, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(scores, axis=-1)  # 3. softmax over keys: each row sums to 1
    out = jnp.matmul(weights.astype(v.dtype), v, preferred_element_type=jnp.float32)  # 4. attend
    return out.astype(q.dtype).transpose(0, 2, 1, 3)  # back to (B, T, N, H)


def reference_attention(q, k, v, *, causal: bool = False) -> np.ndarray:
    """The float64 NumPy reference every implementation is checked against."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    k = np.repeat(k, N // K, axis=2)
    v = np.repeat(v, N // K, axis=2)
    scores = np.einsum("btnh,bsnh->bnts", q, k) / math.sqrt(H)
    if causal:
        scores = np.where(np.tril(np.ones((T, S), dtype=bool)), scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", weights, v)


# --------------------------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Implementation:
    name: str
    label: str
    fn: Callable[[Array, Array, Array, AttentionShape], Array]
    requirements: Callable[[AttentionShape, DeviceInfo], str | None]  # None, or what is missing
    description: str
    memory_kind: str = "fused"  # which memory estimate applies (see AttentionShape.memory_estimate)

    def supports(self, shape: AttentionShape, device: DeviceInfo, memory_limit: int | None = None) -> Support:
        """Whether this implementation can run `shape` on `device`; if not, a sentence saying why."""
        problems = shape.validate()
        if problems:
            return Support(False, " ".join(problems))
        missing = self.requirements(shape, device)
        if missing:
            error = self.real_error(shape)
            return Support(False, missing + (f" (JAX says: {error})" if error else ""))
        limit = default_memory_limit() if memory_limit is None else memory_limit
        need = shape.memory_estimate(self.memory_kind)
        if need > limit:
            return Support(
                False,
                f"needs about {format_bytes(need)} (the T×S scores are materialised), over the cap "
                f"of {format_bytes(limit)}",
            )
        error = self.real_error(shape)
        if error:
            return Support(False, f"{self.label} refuses this shape: {error}")
        return Support(True, "ok")

    def real_error(self, shape: AttentionShape) -> str | None:
        """Trace the call for `shape` without running it: the backend's own error text, or None."""
        return _trace_error(self.name, shape)

    def jit(self, shape: AttentionShape) -> Callable[[Array, Array, Array], Array]:
        """This implementation at `shape`, jitted (shape is static: causal and GQA are baked in)."""
        return _jitted(self.name, shape)

    def __call__(self, q, k, v, shape: AttentionShape) -> Array:
        return self.fn(q, k, v, shape)


REGISTRY: dict[str, Implementation] = {}


def register(impl: Implementation) -> Implementation:
    REGISTRY[impl.name] = impl
    _jitted.cache_clear()
    _trace_error.cache_clear()
    return impl


def get(name: str) -> Implementation:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown implementation {name!r}; choose from {', '.join(REGISTRY)}") from None


def available(shape: AttentionShape, device: DeviceInfo) -> dict[str, Support]:
    """supports() for every registered implementation, in registry order."""
    return {name: impl.supports(shape, device) for name, impl in REGISTRY.items()}


@functools.lru_cache(maxsize=256)
def _jitted(name: str, shape: AttentionShape):
    impl = REGISTRY[name]
    return jax.jit(lambda q, k, v: impl.fn(q, k, v, shape))


@functools.lru_cache(maxsize=512)
def _trace_error(name: str, shape: AttentionShape) -> str | None:
    args = [jax.ShapeDtypeStruct(s, shape.dtype) for s in (shape.q_shape(), shape.kv_shape(), shape.kv_shape())]
    try:
        _jitted(name, shape).lower(*args)
    except Exception as e:  # the backend's own words are the lesson here
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:400]
    return None


def _sdpa(implementation: str | None):
    def fn(q, k, v, shape: AttentionShape):
        return jax.nn.dot_product_attention(q, k, v, is_causal=shape.causal, implementation=implementation)

    return fn


def _anywhere(shape: AttentionShape, device: DeviceInfo) -> str | None:
    return None


def _cudnn_requirements(shape: AttentionShape, device: DeviceInfo) -> str | None:
    """cuDNN flash attention's requirements, as JAX 0.4.35..0.11 checks them."""
    if not device.is_cuda:
        return f"needs a CUDA GPU of compute capability ≥ {FUSED_ATTENTION_MIN_CC[0]}.0; this backend is {device.backend}"
    if not device.at_least(FUSED_ATTENTION_MIN_CC):
        return (
            f"needs compute capability ≥ {FUSED_ATTENTION_MIN_CC[0]}.{FUSED_ATTENTION_MIN_CC[1]} "
            f"(this {device.device_kind} is {device.compute_capability_str})"
        )
    if device.cudnn_version is None:
        return "needs cuDNN, which JAX did not load"
    if shape.dtype not in ("bfloat16", "float16"):
        return f"needs bfloat16 or float16 inputs (got {shape.dtype})"
    max_h = 256 if device.at_least((9, 0)) else 128
    if shape.head_dim > max_h or shape.head_dim % 8:
        return f"needs head_dim ≤ {max_h} and a multiple of 8 on this GPU (got {shape.head_dim})"
    return None


register(Implementation(
    name="naive",
    label="Naive (from scratch)",
    fn=lambda q, k, v, shape: naive_attention(q, k, v, causal=shape.causal),
    requirements=_anywhere,
    description="The four stages written out in jax.numpy; materialises the (B, N, T, S) scores.",
    memory_kind="naive",
))
register(Implementation(
    name="sdpa_auto",
    label="SDPA, implementation=None",
    fn=_sdpa(None),
    requirements=_anywhere,
    description="jax.nn.dot_product_attention with no implementation named: JAX picks (today: XLA).",
    memory_kind="sdpa_auto",
))
register(Implementation(
    name="sdpa_xla",
    label="SDPA, XLA",
    fn=_sdpa("xla"),
    requirements=_anywhere,
    description="jax.nn.dot_product_attention(implementation='xla'): XLA's fusions, any backend.",
    memory_kind="sdpa_xla",
))
register(Implementation(
    name="sdpa_cudnn",
    label="SDPA, cuDNN fused",
    fn=_sdpa("cudnn"),
    requirements=_cudnn_requirements,
    description="jax.nn.dot_product_attention(implementation='cudnn'): one cuDNN flash-attention kernel.",
    memory_kind="sdpa_cudnn",
))


# --------------------------------------------------------------------------------------------
# inputs and checks
# --------------------------------------------------------------------------------------------
# allclose tolerances per input dtype, against the float64 reference. float32 allows for TF32:
# on Ampere and newer GPUs JAX's default matmul precision lets XLA use TF32 tensor cores
# (10-bit mantissa, ~3e-4 relative error).
TOLERANCES = {
    "float32": dict(rtol=2e-3, atol=2e-3),
    "bfloat16": dict(rtol=1e-2, atol=1e-2),
    "float16": dict(rtol=5e-3, atol=5e-3),
}


def make_inputs(shape: AttentionShape, seed: int = 0) -> tuple[Array, Array, Array]:
    """Random normal Q (B, T, N, H), K and V (B, S, K, H) in shape.dtype, on the default device."""
    kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 3)
    q = jax.random.normal(kq, shape.q_shape(), dtype=jnp.float32).astype(shape.dtype)
    k = jax.random.normal(kk, shape.kv_shape(), dtype=jnp.float32).astype(shape.dtype)
    v = jax.random.normal(kv, shape.kv_shape(), dtype=jnp.float32).astype(shape.dtype)
    return q, k, v


@dataclasses.dataclass(frozen=True)
class Check:
    """One implementation's output against the float64 reference."""

    name: str
    max_abs_error: float
    relative_error: float  # ||out - ref|| / ||ref||
    allclose: bool
    rtol: float
    atol: float


def check_against_reference(name: str, out, ref: np.ndarray, dtype: str) -> Check:
    out64 = np.asarray(jnp.asarray(out, dtype=jnp.float32), dtype=np.float64)
    tol = TOLERANCES[dtype]
    finite = bool(np.isfinite(out64).all())
    err = np.abs(out64 - ref)
    return Check(
        name=name,
        max_abs_error=float(err.max()) if finite else float("nan"),
        relative_error=float(np.linalg.norm(out64 - ref) / np.linalg.norm(ref)) if finite else float("nan"),
        allclose=finite and bool(np.allclose(out64, ref, **tol)),
        rtol=tol["rtol"],
        atol=tol["atol"],
    )


# The float64 reference is computed on the host in NumPy; beyond this many score elements it is
# computed on a slice (batch 0.., the first key/value heads with their query heads), which is
# exact because batch entries and heads are independent of each other.
REFERENCE_MAX_SCORES = 2**25


def reference_slice(shape: AttentionShape, max_scores: int | None = None) -> tuple[int, int] | None:
    """(batch, kv_heads) to keep so the float64 reference stays under `max_scores` score elements
    (default REFERENCE_MAX_SCORES); None if even one key/value head's group of query heads is too
    big (T·S·(N/K) > max_scores)."""
    max_scores = REFERENCE_MAX_SCORES if max_scores is None else max_scores
    if shape.score_elements() <= max_scores:
        return shape.batch, shape.kv_heads
    per_kv_head = shape.q_len * shape.kv_len * shape.group_size
    if per_kv_head > max_scores:
        return None
    return 1, max(1, min(shape.kv_heads, max_scores // per_kv_head))


@dataclasses.dataclass(frozen=True)
class Reference:
    """The float64 reference of one call's inputs: on the whole shape, on a slice, or absent (with why)."""

    shape: AttentionShape
    out: np.ndarray | None  # (b, T, kv·group, H) float64, or None when even a slice is too big
    batch: int
    kv_heads: int
    note: str  # "" for the whole shape; else what was checked, or why nothing was

    def check(self, name: str, out) -> Check | None:
        """`out` (the whole shape's output) against the reference, on the reference's slice."""
        if self.out is None:
            return None
        sliced = out[: self.batch, :, : self.kv_heads * self.shape.group_size]
        return check_against_reference(name, sliced, self.out, self.shape.dtype)


def float64_reference(shape: AttentionShape, q, k, v, max_scores: int | None = None) -> Reference:
    """The float64 reference for inputs q, k, v of `shape`, sliced to stay under `max_scores` scores."""
    keep = reference_slice(shape, max_scores)
    if keep is None:
        limit = REFERENCE_MAX_SCORES if max_scores is None else max_scores
        return Reference(shape, None, 0, 0, (
            f"no float64 check: the reference needs T·S·(N/K) = {shape.q_len * shape.kv_len * shape.group_size:,} "
            f"scores per key/value head, over this lab's {limit:,}: choose a shorter sequence"))
    b, kv = keep
    g = shape.group_size
    ref = reference_attention(np.asarray(q[:b, :, : kv * g], np.float32), np.asarray(k[:b, :, :kv], np.float32),
                              np.asarray(v[:b, :, :kv], np.float32), causal=shape.causal)
    note = "" if keep == (shape.batch, shape.kv_heads) else (
        f"checked on batch 0..{b - 1} and query heads 0..{kv * g - 1} (the float64 reference of the whole "
        f"shape would be {format_bytes(shape.score_elements() * 8)})")
    return Reference(shape, ref, b, kv, note)


# Entries that live in their own modules (optional backends) register themselves on import.
from attnlab import fp8, te  # noqa: E402,F401
