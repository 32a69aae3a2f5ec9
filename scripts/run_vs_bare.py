#!/usr/bin/env python
"""The run layer's device time beside a bare CUPTI loop, in one process, at NVIDIA's and the codelab's shapes.

    python3 scripts/run_vs_bare.py [--rounds 3] [--json out.json]      # on the GPU machine

For each shape, interleaved (bare, lab, bare, lab, ..., bare), so that the GPU's clock, which falls as it heats under
a long kernel, treats both alike: bare is `jax.jit(jax.nn.dot_product_attention(..., implementation="cudnn"))` on
normal bf16 inputs, warmed ~0.3 s, `profiler.measure(aggregate=False)` over 20 calls, median of the per-call kernel
sums; lab is `runs.run(shape, ["sdpa_cudnn"], timed=True)`'s `device_ms`. Each measurement keeps the SM clock read
after it. Issue 41's target: the lab's median >= 0.97x the bare loop's. The kernels each saw are listed, so a
difference in the program shows by name.

Also cuDNN's FP8 kernel alone (FP8 in, FP8 out, as NVIDIA's benchmark times it) at NVIDIA's shape, with K and V
repeated to 64 heads (JAX's FP8 path takes MHA only: the same FLOPs, 8x the K/V traffic), bare.
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

from attnlab import device  # noqa: E402
from attnlab.measure import runs  # noqa: E402
from attnlab.shapes import AttentionShape  # noqa: E402

NVIDIA = dict(batch=1, q_len=8192, kv_len=8192, heads=64, kv_heads=8, head_dim=128)
SHAPES = [  # (label, shape): NVIDIA's Llama 3.1 table shape (cudnn-frontend's h200 results), the codelab's two
    ("NVIDIA B1 T8192 N64 K8 H128", NVIDIA),
    ("NVIDIA causal", dict(NVIDIA, causal=True)),
    ("codelab B4 T128", dict(batch=4, q_len=128, kv_len=128, heads=8, kv_heads=8, head_dim=64)),
    ("codelab B4 T8192", dict(batch=4, q_len=8192, kv_len=8192, heads=8, kv_heads=8, head_dim=64)),
]


def inputs(shape: AttentionShape, dtype=jnp.bfloat16):
    keys = jax.random.split(jax.random.key(0), 3)
    return (jax.random.normal(keys[0], shape.q_shape(), dtype), jax.random.normal(keys[1], shape.kv_shape(), dtype),
            jax.random.normal(keys[2], shape.kv_shape(), dtype))


def cupti(f, args, iterations: int = 20) -> tuple[float, list[str]]:
    from jax.experimental.mosaic.gpu import profiler

    jax.block_until_ready(f(*args))
    t_end = time.perf_counter() + 0.3
    while time.perf_counter() < t_end:
        jax.block_until_ready(f(*args))
    _, per_iter = profiler.measure(f, aggregate=False, iterations=iterations)(*args)
    totals = [sum(ms for _, ms in it) for it in per_iter]
    return statistics.median(totals), [f"{n} {ms * 1e3:.1f}us" for n, ms in per_iter[0]]


def old_procedure(f, args) -> float | None:
    """The lab's time_compiled before issue 41's change, for a before/after in one run: warm-up 0.2 s, 30 wall
    samples, 3 rounds of 10 dispatched calls, then CUPTI over 10 calls."""
    from attnlab.measure import timing

    t_end = time.perf_counter() + 0.2
    while time.perf_counter() < t_end:
        jax.block_until_ready(f(*args))
    for _ in range(30):
        jax.block_until_ready(f(*args))
    for _ in range(3):
        jax.block_until_ready([f(*args) for _ in range(10)])
    return timing.kernel_times(f, args, iterations=10)[0]


def clock() -> int | None:
    c = device.sm_clock_mhz()
    return c[0] if c else None


def compare(label: str, shape: AttentionShape, rounds: int) -> dict:
    f = jax.jit(partial(jax.nn.dot_product_attention, implementation="cudnn", is_causal=shape.causal))
    args = inputs(shape)
    bare, lab, seen = [], [], {}
    for i in range(2 * rounds + 1):
        if i % 2 == 0:
            ms, seen["bare"] = cupti(f, args)
            bare.append((ms, clock()))
        else:
            (r,) = runs.run(shape, ["sdpa_cudnn"], accuracy=i == 1, timed=True)
            if not r.timing or r.timing.device_ms is None:
                return {"shape": label, "status": r.status, "reason": r.reason}
            lab.append((r.timing.device_ms, clock()))
            seen["lab"] = [f"{n} {ms * 1e3:.1f}us" for n, ms in r.timing.kernels]
    # which of the two differs, the program or the inputs: each program on the other's inputs
    from attnlab.measure import compiled
    exe = compiled.compile_backend("sdpa_cudnn", shape, False, True)[0]
    lab_args = runs.make_inputs(shape)
    from attnlab.measure import timing
    swapped = {"lab_program_bare_inputs_ms": cupti(exe, args)[0], "bare_program_lab_inputs_ms": cupti(f, lab_args)[0],
               # the third factor, the procedure: the lab's time_compiled (warm-up, wall samples, rounds, then CUPTI
               # over 10 calls) on the bare program and inputs, and on the lab's program and inputs
               "lab_procedure_bare_program_ms": timing.time_compiled(f, args).device_ms,
               "lab_procedure_lab_program_ms": timing.time_compiled(exe, lab_args).device_ms,
               "old_procedure_lab_program_ms": old_procedure(exe, lab_args),
               "lab_procedure_again_ms": timing.time_compiled(exe, lab_args).device_ms,
               "bare_clock_after_mhz": clock()}
    b, x = statistics.median(m for m, _ in bare), statistics.median(m for m, _ in lab)
    return {"shape": label, "bare_ms": [m for m, _ in bare], "bare_clock_mhz": [c for _, c in bare],
            "lab_ms": [m for m, _ in lab], "lab_clock_mhz": [c for _, c in lab], "bare_median_ms": b,
            "lab_median_ms": x, "lab_over_bare_speed": b / x, "tflops_bare": shape.flops() / b / 1e9,
            "tflops_lab": shape.flops() / x / 1e9, "bare_kernels": seen["bare"], "lab_kernels": seen["lab"], **swapped}


def fp8_row(causal: bool) -> dict:
    from attnlab.backends import fp8

    shape = AttentionShape(dtype="bfloat16", **dict(NVIDIA, kv_heads=64), causal=causal)
    (q8, k8, v8), scales = fp8.quantize_inputs(*inputs(shape))
    f = jax.jit(lambda q, k, v: fp8.fp8_kernel(q, k, v, scales, causal=causal, scale_s=fp8.P_SCALE))
    ms, kernels = cupti(f, (q8, k8, v8))
    return {"shape": f"NVIDIA FP8, K/V repeated to 64 heads{' causal' if causal else ''}", "bare_median_ms": ms,
            "tflops_bare": shape.flops() / ms / 1e9, "clock_mhz": clock(), "bare_kernels": kernels}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = [compare(label, AttentionShape(dtype="bfloat16", **kw), args.rounds) for label, kw in SHAPES]
    for causal in (False, True):
        try:
            rows.append(fp8_row(causal))
        except Exception as e:  # noqa: BLE001 - a row that says why
            rows.append({"shape": f"NVIDIA FP8{' causal' if causal else ''}", "error": f"{type(e).__name__}: {e}"[:300]})
    if args.json:
        args.json.write_text(json.dumps({"jax": jax.__version__, "device": str(jax.devices()[0]), "rows": rows}, indent=1))
    for x in rows:
        if "lab_median_ms" in x:
            print(f"{x['shape']:30s} bare {x['bare_median_ms']:.4f} ms ({x['tflops_bare']:.0f} TF/s) "
                  f"lab {x['lab_median_ms']:.4f} ms ({x['tflops_lab']:.0f} TF/s) lab/bare speed "
                  f"{x['lab_over_bare_speed']:.3f}; bare {[f'{m:.3f}' for m in x['bare_ms']]} @ {x['bare_clock_mhz']} MHz, "
                  f"lab {[f'{m:.3f}' for m in x['lab_ms']]} @ {x['lab_clock_mhz']} MHz")
            print(f"   swapped: lab program on bare inputs {x['lab_program_bare_inputs_ms']:.4f} ms, bare program on lab "
                  f"inputs {x['bare_program_lab_inputs_ms']:.4f} ms; the lab's procedure on the bare program "
                  f"{x['lab_procedure_bare_program_ms']:.4f} ms, on its own {x['lab_procedure_lab_program_ms']:.4f} ms; "
                  f"before/after on its own: old procedure {x['old_procedure_lab_program_ms']:.4f} ms, "
                  f"new {x['lab_procedure_again_ms']:.4f} ms")
            print("   bare kernels:", "; ".join(x["bare_kernels"])[:300], "| lab kernels:", "; ".join(x["lab_kernels"])[:300])
        elif "bare_median_ms" in x:
            print(f"{x['shape']:30s} bare {x['bare_median_ms']:.4f} ms ({x['tflops_bare']:.0f} TF/s) @ {x['clock_mhz']} MHz;"
                  f" {'; '.join(x['bare_kernels'])[:200]}")
        else:
            print(x)
    return 0


if __name__ == "__main__":
    sys.exit(main())
