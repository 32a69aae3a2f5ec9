#!/usr/bin/env python
"""The run layer's device time beside a bare CUPTI loop, in one process, at NVIDIA's and the codelab's shapes.

    python3 scripts/run_vs_bare.py [--json out.json]      # on the GPU machine

For each shape: (1) bare: `jax.jit(jax.nn.dot_product_attention(..., implementation="cudnn"))` on normal bf16
inputs, warmed ~0.3 s, `profiler.measure(aggregate=False)` over 20 calls, median of the per-call kernel sums; (2) the
lab: `runs.run(shape, ["sdpa_cudnn"], timed=True)`, its `device_ms`; (3) bare again (order effects: clocks). Each
row lists the kernels both saw, so a difference in the program shows by name. Issue 41's target: lab >= 0.97x bare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from attnlab.measure import runs  # noqa: E402
from attnlab.shapes import AttentionShape  # noqa: E402

SHAPES = [  # (label, shape): NVIDIA's Llama 3.1 table shape, and the codelab's two
    ("NVIDIA B1 T8192 N64 K8 H128", dict(batch=1, q_len=8192, kv_len=8192, heads=64, kv_heads=8, head_dim=128)),
    ("NVIDIA causal", dict(batch=1, q_len=8192, kv_len=8192, heads=64, kv_heads=8, head_dim=128, causal=True)),
    ("codelab B4 T128", dict(batch=4, q_len=128, kv_len=128, heads=8, kv_heads=8, head_dim=64)),
    ("codelab B4 T8192", dict(batch=4, q_len=8192, kv_len=8192, heads=8, kv_heads=8, head_dim=64)),
]


def bare(shape: AttentionShape, iterations: int = 20) -> tuple[float, list[str]]:
    from jax.experimental.mosaic.gpu import profiler

    keys = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(keys[0], shape.q_shape(), jnp.bfloat16)
    k = jax.random.normal(keys[1], shape.kv_shape(), jnp.bfloat16)
    v = jax.random.normal(keys[2], shape.kv_shape(), jnp.bfloat16)
    f = jax.jit(partial(jax.nn.dot_product_attention, implementation="cudnn", is_causal=shape.causal))
    jax.block_until_ready(f(q, k, v))
    t_end = time.perf_counter() + 0.3
    while time.perf_counter() < t_end:
        jax.block_until_ready(f(q, k, v))
    _, per_iter = profiler.measure(f, aggregate=False, iterations=iterations)(q, k, v)
    totals = [sum(ms for _, ms in it) for it in per_iter]
    return statistics.median(totals), [f"{n} {ms * 1e3:.1f}us" for n, ms in per_iter[0]]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    for label, kw in SHAPES:
        shape = AttentionShape(dtype="bfloat16", **kw)
        before, bare_kernels = bare(shape)
        (r,) = runs.run(shape, ["sdpa_cudnn"], timed=True)
        after, _ = bare(shape)
        lab = r.timing.device_ms if r.timing else None
        best = min(before, after)
        rows.append({"shape": label, "bare_before_ms": before, "bare_after_ms": after, "lab_ms": lab,
                     "lab_over_bare": best / lab if lab else None, "tflops_bare": shape.flops() / best / 1e9,
                     "tflops_lab": shape.flops() / lab / 1e9 if lab else None, "status": r.status,
                     "bare_kernels": bare_kernels, "lab_kernels": [f"{n} {ms * 1e3:.1f}us" for n, ms in r.timing.kernels]
                     if r.timing else [], "lab_note": r.timing.device_note if r.timing else r.reason})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    for x in rows:
        print(f"{x['shape']:30s} bare {x['bare_before_ms']:.3f}/{x['bare_after_ms']:.3f} ms "
              f"({x['tflops_bare']:.0f} TF/s)  lab {x['lab_ms'] or float('nan'):.3f} ms "
              f"({x['tflops_lab'] or float('nan'):.0f} TF/s)  lab/bare speed {x['lab_over_bare'] or float('nan'):.3f}")
        print("   bare kernels:", "; ".join(x["bare_kernels"])[:400])
        print("   lab kernels: ", "; ".join(x["lab_kernels"])[:400])
    return 0


if __name__ == "__main__":
    sys.exit(main())
