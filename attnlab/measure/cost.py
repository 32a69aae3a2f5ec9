"""How long a run will hold the device, guessed before it starts.

    seconds ≥ calls · FLOPs(shape) / matmul rate         (a lower bound: the lab's limit refuses on it)
    seconds ≈ calls · FLOPs(shape) / naive attention's rate   (the estimate a page shows before a button)

`rate` is this device's matmul rate, measured once per process on a square matmul in the shape's dtype: no
attention kernel beats a plain matmul, so the guess is a lower bound. A run whose lower bound is over the
lab's limit (`ATTNLAB_RUN_SECONDS`) is refused before it starts: a native call cannot be stopped."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from attnlab.admission import DEVICE
from attnlab.shapes import AttentionShape

WORTH_MEASURING = 1e10  # FLOPs: below this no device the lab runs on takes a second, so no rate is measured


def _best_seconds(f, input_shape: tuple, dtype: str, device_bytes: int, calls: int) -> float:
    """Best seconds of `calls` jitted `f` calls on ones of `input_shape`, after a warm-up, in its own turn."""
    dt = jnp.dtype(dtype if dtype in ("float32", "bfloat16", "float16") else "float32")
    with DEVICE.use(device_bytes):
        x = jnp.ones(input_shape, dt)
        jax.block_until_ready(f(x))
        best = float("inf")
        for _ in range(calls):
            t0 = time.perf_counter()
            jax.block_until_ready(f(x))
            best = min(best, time.perf_counter() - t0)
    return best


@functools.cache
def matmul_rate(dtype: str) -> float:
    """FLOP/s of one n × n matmul here (best of five calls after a warm-up), n = 1024 on a GPU, 512 on a CPU."""
    n = 1024 if jax.default_backend() == "gpu" else 512
    return 2 * n**3 / _best_seconds(jax.jit(lambda x: x @ x), (n, n), dtype, 2 * n * n * 4, 5)


@functools.cache
def attention_rate(dtype: str) -> float:
    """FLOP/s of the lab's naive attention here (best of three after a warm-up) at B1 T512 N8 H64 on a CPU, B1
    T2048 N16 H128 on a GPU: an estimate's rate, since the softmax keeps attention far below a matmul's."""
    from attnlab.math.attention import attention

    t, n, h = (2048, 16, 128) if jax.default_backend() == "gpu" else (512, 8, 64)
    shape = AttentionShape(batch=1, q_len=t, kv_len=t, heads=n, kv_heads=n, head_dim=h, dtype=dtype)
    held = 2 * t * n * h * 4 + 2 * n * t * t * 4  # q, the output, the scores and weights (float32 at most)
    return shape.flops() / _best_seconds(jax.jit(lambda q: attention(q, q, q)), (1, t, n, h), dtype, held, 3)


def at_least_seconds(shape: AttentionShape, calls: int, backward: bool = False) -> float:
    """A lower bound on the seconds `calls` calls at `shape` hold the device (0 for shapes too small to matter)."""
    flops = shape.flops(backward)
    if flops * calls < WORTH_MEASURING:
        return 0.0
    return calls * flops / matmul_rate(shape.dtype)


def too_slow(shape: AttentionShape, calls: int, limit_s: float, backward: bool = False) -> str | None:
    """The sentence that refuses a run over `limit_s`, or None."""
    seconds = at_least_seconds(shape, calls, backward)
    if seconds <= limit_s:
        return None
    rate = matmul_rate(shape.dtype)
    where = "on this CPU" if jax.default_backend() != "gpu" else "on this GPU"
    return (f"would hold the device for at least {seconds:,.0f} s {where} ({calls} calls of "
            f"{shape.flops(backward):.2g} FLOPs at the {rate / 1e9:,.0f} GFLOP/s a plain {shape.dtype} matmul reaches "
            f"here), over the lab's limit of {limit_s:,.0f} s for one run: make kv_len, q_len, heads or head_dim smaller")


def too_slow_plan(shapes: Sequence[AttentionShape], cells: Sequence[int], calls: int, limit_s: float | None = None,
                  backward: bool = False) -> str | None:
    """The sentence refusing a button's plan (`cells[i]` runs at `shapes[i]`) over `limit_s`, or None."""
    from attnlab.settings import settings

    limit_s = settings().run_seconds if limit_s is None else limit_s
    seconds = sum(c * at_least_seconds(s, calls, backward) for s, c in zip(shapes, cells, strict=True))
    if seconds <= limit_s:
        return None
    where = "this CPU" if jax.default_backend() != "gpu" else "this GPU"
    return (f"These {sum(cells)} runs would hold {where} for at least {seconds:,.0f} s (their FLOPs at the rate a plain "
            f"matmul reaches here), over the lab's limit of {limit_s:,.0f} s for one button: make the shape smaller (kv_len, "
            "q_len, heads or head_dim) or choose fewer cells.")


def timing_seconds(shapes: Sequence[AttentionShape], implementations: int, backward: bool = False) -> float:
    """About how long timing `implementations` implementations at each of `shapes` holds the device here
    (timing.MIN_CALLS + 1 calls each at naive attention's rate): what a page says before such a button."""
    from attnlab.measure import timing

    calls = timing.MIN_CALLS + 1
    return implementations * sum(calls * s.flops(backward) / attention_rate(s.dtype) for s in shapes
                                 if s.flops(backward) * calls >= WORTH_MEASURING)
