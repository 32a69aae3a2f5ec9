"""Fidelity: the one harness (`runs`, `timing`) against the plainest loops there are over the same compiled
call (page 7's fidelity table): `bare_loop` is the only timing outside the harness, and exists to check it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable

import jax
import pandas as pd

from attnlab import device as device_mod
from attnlab.backends import get
from attnlab.measure import runs
from attnlab.shapes import AttentionShape


def bare_loop(fn, args, n: int = 20) -> tuple[float, float]:
    """(ms per call with a wait each, ms per call with one wait): the plainest loops there are."""
    t_end = time.perf_counter() + 0.2
    while time.perf_counter() < t_end:  # the same warm-up as the harness
        jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn(*args).block_until_ready()
        samples.append((time.perf_counter() - t0) * 1e3)
    t0 = time.perf_counter()
    outs = [fn(*args) for _ in range(n)]
    jax.block_until_ready(outs)
    return statistics.median(samples), (time.perf_counter() - t0) * 1e3 / n


def fidelity(shapes: Iterable[AttentionShape], name: str = "sdpa_cudnn") -> pd.DataFrame:
    """The harness against a bare loop of the same compiled call, one row per shape `name` can run at: times in
    ms ('harness_wall_ms', 'harness_throughput_ms', 'harness_device_ms', 'bare_wall_ms', 'bare_pipelined_ms'),
    rates in TFLOP/s ('harness_tflops', 'harness_device_tflops', 'bare_tflops') and 'harness_over_bare' (the
    ratio of the two rates, 1 = no overhead). A shape whose run failed is its run-layer row (status, reason)."""
    rows = []
    info = device_mod.info()
    for shape in shapes:
        if get(name).unmet(shape, info):
            continue
        fn, args = get(name).jit(shape), runs.make_inputs(shape)
        before = bare_loop(fn, args)  # bare, harness, bare: neither gets the warmer GPU for free
        row = runs.run(shape, [name], accuracy=False, timed=True)[0].row()
        if row["status"] != runs.OK:
            rows.append(row)
            continue
        after = bare_loop(fn, args)
        wall, pipelined = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
        flops = shape.flops()
        rows.append({
            "shape": shape.describe(), "implementation": name,
            "harness_wall_ms": row["wall_ms"], "harness_throughput_ms": row["throughput_ms"],
            "harness_device_ms": row["device_ms"], "bare_wall_ms": wall, "bare_pipelined_ms": pipelined,
            "harness_tflops": row["tflops"], "harness_device_tflops": row["device_tflops"],
            "bare_tflops": flops / (pipelined * 1e-3) / 1e12,
            "harness_over_bare": (flops / (row["throughput_ms"] * 1e-3)) / (flops / (pipelined * 1e-3)),
            "kernels": row["kernels"],
        })
    return pd.DataFrame(rows)
