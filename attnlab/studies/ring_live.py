"""Ring attention against one device, live, at a learner's shape: the error and the time of each.

One device runs `jax.nn.dot_product_attention`, the ring `context_parallel.context_parallel_attention` (over
the first P devices) on the same inputs, both timed by the one harness (`timing.time_compiled`) in one turn.
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from attnlab.admission import DEVICE
from attnlab.measure import runs, timing
from attnlab.shapes import AttentionShape
from attnlab.studies import context_parallel as cp


@dataclasses.dataclass(frozen=True)
class RingComparison:
    """The ring against one device at one shape: both timed by the one harness, and the ring's error."""

    devices: int
    layout: str  # "zigzag" or "contiguous"
    method: str  # "ring" or "all_gather"
    one: timing.Timing  # one device, jax.nn.dot_product_attention
    ring: timing.Timing  # the ring over `devices` devices
    max_abs_error: float  # max |ring - one|, in float32
    relative_error: float  # ||ring - one|| / ||one||

    @property
    def speedup(self) -> float:
        """One device's wall ms over the ring's."""
        return self.one.wall_ms / self.ring.wall_ms


def unmet(shape: AttentionShape, devices: int, *, layout: str = "zigzag") -> str | None:
    """Why the ring cannot run `shape` on `devices` devices here, or None."""
    if devices > jax.device_count():
        return f"{devices} devices asked for, but jax sees {jax.device_count()}"
    refused = [f for f in shape.mask.features if f != "causal"]  # the ring's blocks take a causal mask only
    if refused:
        return f"the ring here takes no {' or '.join(refused)}: clear *More masks* in the sidebar"
    if shape.causal and shape.q_len != shape.kv_len:
        return f"causal ring attention here needs q_len ({shape.q_len}) = kv_len ({shape.kv_len})"
    chunks = 2 * devices if shape.causal and layout == "zigzag" else devices
    for name in ("q_len", "kv_len"):
        if getattr(shape, name) % chunks:
            return f"{name} ({getattr(shape, name)}) must be a multiple of {chunks} to split over {devices} devices"
    return None


def _timed(f, *args):
    start = time.perf_counter()
    compiled = jax.jit(f).lower(*args).compile()
    compile_ms = 1e3 * (time.perf_counter() - start)
    return compiled(*args), timing.time_compiled(compiled, args, compile_ms=compile_ms)


def compare(shape: AttentionShape, devices: int, *, layout: str = "zigzag", method: str = "ring") -> RingComparison:
    """Both timed, and the ring's error against one device (ValueError when `unmet` says why not)."""
    why = unmet(shape, devices, layout=layout)
    if why:
        raise ValueError(why)
    mesh = cp.sequence_mesh(devices)
    zig = shape.causal and layout == "zigzag"
    # inputs + both outputs in float32, on the first device; the ring's share is smaller
    with DEVICE.use(shape.input_bytes() * 4 + 2 * shape.output_bytes() * 4):
        with runs.inputs(shape) as (q, k, v):
            one_out, one = _timed(partial(jax.nn.dot_product_attention, is_causal=shape.causal), q, k, v)
            seq = NamedSharding(mesh, PartitionSpec(None, "seq", None, None))
            spread = [jax.device_put(cp.to_zigzag(x, devices) if zig else x, seq) for x in (q, k, v)]
            ring_out, ring = _timed(partial(cp.context_parallel_attention, mesh=mesh, causal=shape.causal,
                                            layout=layout, method=method), *spread)
            ring_out = cp.from_zigzag(ring_out, devices) if zig else ring_out
            a, b = np.asarray(ring_out, np.float32), np.asarray(one_out, np.float32)
    return RingComparison(devices, layout, method, one, ring, max_abs_error=float(np.abs(a - b).max()),
                          relative_error=float(np.linalg.norm(a - b) / (np.linalg.norm(b) or 1.0)))
