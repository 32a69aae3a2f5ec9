"""Attention across GPUs, split along the sequence: ring attention and its all-gather sibling.

Every device holds T/P queries and S/P keys and values (one 1-D mesh axis, 'seq'). Each key block returns its
output o_b and log-sum-exp lse_b = log Σ_j exp(q·k_j / sqrt(H)); two partial results merge exactly,

    lse = log(e^lse_a + e^lse_b),     o = e^(lse_a - lse)·o_a + e^(lse_b - lse)·o_b

(Milakov & Gimelshein 2018, arXiv:1805.02867; FlashAttention-2, Dao 2023, 3.1.1). The ring passes K/V blocks
on with `ppermute` while computing the current one (Liu et al. 2023, arXiv:2310.01889; on paper:
`ring_schedule`); the all-gather fetches them all first (Llama 3, Dubey et al. 2024, 3.3.2). Q: (B, T, N, H);
K, V: (B, S, K, H), N a multiple of K; causal: top-left, query i sees keys 0..i in the original order; T = S.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable
from functools import partial
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.sharding import Mesh, PartitionSpec

set_xla_metadata: Callable[..., Any] | None
try:  # a frontend attribute XLA's latency-hiding scheduler reads: ops of one group are scheduled together
    from jax.experimental.xla_metadata import set_xla_metadata
except ImportError:  # older jax: no grouping (the scheduler alone decides)
    set_xla_metadata = None

_shard_map: Callable[..., Any]  # its signature (and _NO_CHECK's keyword) depends on jax's version
_NO_CHECK: dict[str, Any]
try:  # jax >= 0.7 has shard_map at the top level (replication check: check_vma)
    from jax import shard_map as _shard_map

    _NO_CHECK = {"check_vma": False}
except ImportError:  # older jax
    from jax.experimental.shard_map import shard_map as _shard_map

    _NO_CHECK = {"check_rep": False}

# A block: (q (B, T, N, H), k, v (B, S, K, H), causal) -> (out (B, T, N, H), lse (B, T, N) float32, natural log)
Block = Callable[[Array, Array, Array, bool], tuple[Array, Array]]


# --------------------------------------------------------------------------------------------
# one block of keys: attention that also returns its log-sum-exp
# --------------------------------------------------------------------------------------------
def xla_block(q: Array, k: Array, v: Array, causal: bool) -> tuple[Array, Array]:
    """softmax(Q·Kᵀ/sqrt(H))·V over this block of keys and each query's log-sum-exp, in plain JAX (float32
    scores; runs anywhere). Causal is top-left: query i sees keys 0..i of the block."""
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    qg = q.reshape(B, T, K, N // K, H)  # (B, T, K, G, H): the G query heads that share one KV head
    scores = jnp.einsum("btkgh,bskh->bkgts", qg, k, preferred_element_type=jnp.float32) / math.sqrt(H)
    if causal:
        scores = jnp.where(jnp.tril(jnp.ones((T, S), dtype=bool)), scores, -jnp.inf)
    lse = jax.nn.logsumexp(scores, axis=-1)  # (B, K, G, T)
    weights = jnp.exp(scores - lse[..., None])  # (B, K, G, T, S), rows sum to 1
    out = jnp.einsum("bkgts,bskh->btkgh", weights, v.astype(jnp.float32))  # (B, T, K, G, H)
    return out.reshape(B, T, N, H), lse.transpose(0, 3, 1, 2).reshape(B, T, N)


def cudnn_block(q: Array, k: Array, v: Array, causal: bool) -> tuple[Array, Array]:
    """cuDNN's fused flash attention, one kernel, with its softmax statistics as the log-sum-exp.

    `return_residual=True` gives the natural-log lse, (B, T, N); jax <= 0.10 casts it to bf16 (~0.03 off)."""
    out, lse = jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn",
                                            return_residual=True)
    return out, lse.astype(jnp.float32)


def default_block() -> Block:
    """cuDNN on an NVIDIA GPU when this jax can return the log-sum-exp, else the plain-JAX block."""
    has_residual = "return_residual" in inspect.signature(jax.nn.dot_product_attention).parameters
    return cudnn_block if jax.default_backend() == "gpu" and has_residual else xla_block


def merge(o_a: Array, lse_a: Array, o_b: Array, lse_b: Array) -> tuple[Array, Array]:
    """Combine attention over two disjoint key sets, in float32. o: (B, T, N, H), lse: (B, T, N)."""
    lse = jnp.logaddexp(lse_a, lse_b)
    safe = jnp.where(jnp.isfinite(lse), lse, 0.0)  # a row with no keys yet stays o = 0, lse = -inf
    w_a, w_b = jnp.exp(lse_a - safe)[..., None], jnp.exp(lse_b - safe)[..., None]
    return w_a * o_a.astype(jnp.float32) + w_b * o_b.astype(jnp.float32), lse


def _nothing(q: Array) -> tuple[Array, Array]:
    """The result of attending to no keys: o = 0, lse = -inf (the identity of `merge`)."""
    return jnp.zeros(q.shape, q.dtype), jnp.full(q.shape[:3], -jnp.inf, jnp.float32)


# --------------------------------------------------------------------------------------------
# which part of a visiting block my queries may see (causal); `ring_schedule.block_kind` on paper
# --------------------------------------------------------------------------------------------
def _attend(q, k, v, me, owner, *, causal: bool, layout: str, block: Block,
            steps: str = "switch") -> tuple[Array, Array]:
    """My queries against the K/V block of device `owner`; skipped parts are not computed. `owner is me` says
    statically that it is my own block (the ring's first step). steps (zig-zag, causal): 'switch' runs the one
    block shape this device needs; 'uniform' (owner ≠ me) two equal blocks, no branch."""
    def run(q, k, v, c):  # the block's output in the inputs' dtype (cuDNN's already is); merge reads float32
        o, lse = block(q, k, v, c)
        return o.astype(q.dtype), lse

    if not causal:
        return run(q, k, v, False)
    if layout == "contiguous":  # one chunk each: earlier devices' keys are all visible, later ones none
        branches = [lambda q, k, v: run(q, k, v, False), lambda q, k, v: run(q, k, v, True),
                    lambda q, k, v: _nothing(q)]
    else:  # zig-zag: I hold chunks (me, 2P-1-me), the owner (j, 2P-1-j)
        c = q.shape[1] // 2

        def earlier(q, k, v):  # j < me: both my chunks see its early chunk, neither sees its late one
            return run(q, k[:, :c], v[:, :c], False)

        def own(q, k, v):  # j = me: my early chunk sees its own triangle, my late one sees all then a triangle
            return run(q, k, v, True)  # which is top-left causal on the pair, as if they were adjacent

        def later(q, k, v):  # j > me: only my late chunk sees it, and all of it
            o, lse = run(q[:, c:], k, v, False)
            o0, lse0 = _nothing(q[:, :c])
            return jnp.concatenate([o0, o], axis=1), jnp.concatenate([lse0, lse], axis=1)

        branches = [earlier, own, later]
    if owner is me:
        return branches[1](q, k, v)
    if layout == "zigzag" and steps == "uniform":
        return _zigzag_uniform(q, k, v, me, owner, run)
    # lax.switch runs only the branch taken on this device: masked blocks cost no FLOPs
    return lax.switch(jnp.sign(owner - me) + 1, branches, q, k, v)


def _zigzag_uniform(q, k, v, me, owner, run) -> tuple[Array, Array]:
    """The zig-zag visit (owner ≠ me) as two c×c blocks of the same shape on every device, with no branch:
    owner earlier, both my chunks see its early chunk; later, my late chunk sees both its chunks. Both hold
    (my late chunk, its early chunk); a select picks the other (lax.switch reads the index back to host)."""
    c = q.shape[1] // 2
    earlier = owner < me
    o_a, lse_a = run(q[:, c:], k[:, :c], v[:, :c], False)  # my late chunk x its early chunk, always
    pick = lambda mine, theirs: jnp.where(earlier, mine, theirs)  # noqa: E731
    o_b, lse_b = run(pick(q[:, :c], q[:, c:]), pick(k[:, :c], k[:, c:]), pick(v[:, :c], v[:, c:]), False)
    nothing_o, nothing_lse = _nothing(q[:, :c])
    early = (jnp.where(earlier, o_b, nothing_o), jnp.where(earlier, lse_b, nothing_lse))  # my early rows
    late = merge(o_a, lse_a, jnp.where(earlier, nothing_o, o_b), jnp.where(earlier, nothing_lse, lse_b))
    return jnp.concatenate([early[0], late[0]], axis=1), jnp.concatenate([early[1], late[1]], axis=1)


# --------------------------------------------------------------------------------------------
# the ring and the all-gather, per device (inside shard_map)
# --------------------------------------------------------------------------------------------
def _ring(q, k, v, *, axis: str, devices: int, causal: bool, layout: str, overlap: bool, block: Block,
          steps: str = "switch", grouped: bool = False, fence: bool = True):
    """q: (B, T/P, N, H), k, v: (B, S/P, K, H) per device; P steps, one K/V hop each. fence (with overlap): a
    block received in a step is released only with that step's result (`lax.optimization_barrier`), so the
    program cannot wait for the transfer before the step's attention. grouped (with overlap): each step's send
    and attention share a `_scheduling_group_id`, so XLA starts the send first; off by default."""
    me = lax.axis_index(axis)
    right = [(i, (i + 1) % devices) for i in range(devices)]  # device i sends to device i+1
    # K and V are two transfers per step: XLA overlaps one collective at a time with compute unless told
    # otherwise (--xla_gpu_experimental_parallel_collective_overlap_limit, scripts/ring_bench.py)
    kv, o, lse = (k, v), None, None  # o: (B, T/P, N, H), lse: (B, T/P, N) once the first block is in
    for step in range(devices):
        owner = me if step == 0 else (me - step) % devices
        last = step == devices - 1
        group = set_xla_metadata(_scheduling_group_id=step) if grouped and overlap and not last \
            and set_xla_metadata is not None else contextlib.nullcontext()
        with group:
            if overlap and not last:  # sent before computing: nothing the transfer needs is computed here
                kv_next = lax.ppermute(kv, axis, right)
            part = _attend(q, *kv, me, owner, causal=causal, layout=layout, block=block, steps=steps)
        o, lse = part if o is None else merge(o, cast(Array, lse), *part)  # lse is set with o
        if fence and overlap and not last:  # the next block is usable only once this step is done
            o, lse, kv_next = lax.optimization_barrier((o, lse, kv_next))
        if not overlap and not last:  # the send reads this step's result, so it cannot start before it
            after = o[0, 0, 0, 0] * 0  # zero, yet a true dependency: x·0 is not folded for floats (NaN)
            kv_next = lax.ppermute(tuple(x + after.astype(x.dtype) for x in kv), axis, right)
        if not last:
            kv = kv_next
    if o is None:  # no step ran
        raise ValueError("no device ran a step: devices must be at least 1")
    return o.astype(q.dtype)


def _all_gather(q, k, v, *, axis: str, devices: int, causal: bool, layout: str, block: Block):
    """Gather every device's K/V once (B, S, K, H), then attend locally, skipping masked blocks.

    A block here may be my own (owner is traced), so lax.switch decides (no 'uniform' steps)."""
    k_all = lax.all_gather(k, axis, axis=1, tiled=True)  # (B, S, K, H), device j's block at j·S/P
    v_all = lax.all_gather(v, axis, axis=1, tiled=True)
    o: Array | None
    if not causal:
        o, _ = block(q, k_all, v_all, False)
        return o.astype(q.dtype)
    me, s = lax.axis_index(axis), k.shape[1]
    o, lse = None, None
    for owner in range(devices):
        k_j, v_j = k_all[:, owner * s:(owner + 1) * s], v_all[:, owner * s:(owner + 1) * s]
        part = _attend(q, k_j, v_j, me, owner, causal=causal, layout=layout, block=block)
        o, lse = part if o is None else merge(o, cast(Array, lse), *part)  # lse is set with o
    if o is None:  # no step ran
        raise ValueError("no device ran a step: devices must be at least 1")
    return o.astype(q.dtype)


def context_parallel_attention(q: Array, k: Array, v: Array, mesh: Mesh, *, causal: bool = False,
                               layout: str = "zigzag", method: str = "ring", overlap: bool = True,
                               block: Block | None = None, axis: str = "seq", steps: str = "switch",
                               grouped: bool = False, fence: bool = True) -> Array:
    """Attention with the sequence split over the devices of `mesh`'s axis `axis`.

    q: (B, T, N, H), k, v: (B, S, K, H): global arrays whose sequence is already in `layout` order
    (`to_zigzag` for 'zigzag'; the output comes back in that order). method: 'ring' or 'all_gather'; overlap:
    issue each ring transfer before the step's compute (True) or after it. block: the per-block attention
    (`default_block()` if None). steps (causal zig-zag ring): 'switch' (one block of the shape this device
    needs, by lax.switch) or 'uniform' (two equal blocks, no branch). grouped, fence: see `_ring`."""
    devices = mesh.shape[axis]
    chunks = 2 * devices if causal and layout == "zigzag" else devices
    for name, length in (("q_len", q.shape[1]), ("kv_len", k.shape[1])):
        if length % chunks:
            raise ValueError(f"{name} ({length}) must be a multiple of {chunks} for {devices} devices")
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"heads ({q.shape[2]}) must be a multiple of kv_heads ({k.shape[2]})")
    if causal and q.shape[1] != k.shape[1]:
        raise ValueError(f"causal attention here needs q_len ({q.shape[1]}) == kv_len ({k.shape[1]})")
    if layout not in ("zigzag", "contiguous"):
        raise ValueError(f"layout must be 'zigzag' or 'contiguous', not {layout!r}")
    if steps not in ("switch", "uniform"):
        raise ValueError(f"steps must be 'switch' or 'uniform', not {steps!r}")
    common = dict(axis=axis, devices=devices, causal=causal, layout=layout, block=block or default_block())
    if method == "ring":
        per_device = partial(_ring, overlap=overlap, steps=steps, grouped=grouped, fence=fence, **common)
    elif method == "all_gather":
        per_device = partial(_all_gather, **common)
    else:
        raise ValueError(f"method must be 'ring' or 'all_gather', not {method!r}")
    spec = PartitionSpec(None, axis, None, None)  # split the sequence axis over the devices
    return _shard_map(per_device, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, **_NO_CHECK)(q, k, v)


# --------------------------------------------------------------------------------------------
# the zig-zag layout: device d holds chunks d and 2P-1-d of the sequence
# --------------------------------------------------------------------------------------------
def zigzag_order(seq_len: int, devices: int) -> np.ndarray:
    """Positions in zig-zag order: [chunk 0, chunk 2P-1, chunk 1, chunk 2P-2, ...] (seq_len,)."""
    if seq_len % (2 * devices):
        raise ValueError(f"seq_len ({seq_len}) must be a multiple of 2 x devices ({2 * devices})")
    chunk = np.arange(seq_len).reshape(2 * devices, seq_len // (2 * devices))
    return np.concatenate([np.concatenate([chunk[d], chunk[2 * devices - 1 - d]]) for d in range(devices)])


def to_zigzag(x: Array, devices: int, axis: int = 1) -> Array:
    """Reorder the sequence axis into the zig-zag layout (then split evenly over the devices)."""
    return jnp.take(x, zigzag_order(x.shape[axis], devices), axis=axis)


def from_zigzag(x: Array, devices: int, axis: int = 1) -> Array:
    """Undo `to_zigzag`: back to the original sequence order."""
    return jnp.take(x, np.argsort(zigzag_order(x.shape[axis], devices)), axis=axis)


def sequence_mesh(devices: int | None = None, axis: str = "seq") -> Mesh:
    """A 1-D mesh over the first `devices` devices (all if None), its axis named `axis`."""
    available = jax.devices()
    devices = len(available) if devices is None else devices
    if devices > len(available):
        raise ValueError(f"asked for {devices} devices but jax sees {len(available)}")
    return Mesh(np.array(available[:devices]), (axis,))
