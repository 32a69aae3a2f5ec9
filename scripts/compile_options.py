#!/usr/bin/env python
"""What a check program's compile costs under other XLA options, and whether its output changes.

    python scripts/compile_options.py [--shapes 6] [--json out.json] [--only "in-process ptx" nvjitlink]

A class moved to new shapes waits mostly for compiles of programs that are only run to check their output
(`compiled.CHECK_OPTIONS`: untuned, `scripts/request_log.py --spans` says how many ran at once). This compiles
every backend that can run each of N new shapes (seeded, as learners type them), all at once in a pool of this
process's CPUs as `compiled.compile_many` does, once with `CHECK_OPTIONS` and once with each candidate set
added, interleaved (A B A B) so neither gets a warmer process; then runs each pair of programs on the same inputs.
Prints per options set: compiles, wall seconds, this process's CPU seconds and its children's (ptxas), the
programs' first runs summed (a new program's first call, what a check pays inside its device turn), and the largest
difference between the two programs' outputs, relative to the output's scale. A benchmark: it judges
nothing. No persistent compilation cache (every compile is a compile). Its own pool rather than `compile_many`:
that one takes no compiler options and keeps what it compiled (a second set of options must compile anew).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import resource
import sys
import time
from pathlib import Path

os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CANDIDATES = {
    "ptxas -O0": {"xla_gpu_disable_gpuasm_optimizations": True},
    "llvm cheap": {"xla_llvm_disable_expensive_passes": True},
    "both": {"xla_gpu_disable_gpuasm_optimizations": True, "xla_llvm_disable_expensive_passes": True},
    # a check program runs once: a CUDA graph's capture at its first run buys it nothing (on the H100 2026-12-06
    # turns held the device 9.5 of a class's 12.4 s for checks the GPU computes in microseconds)
    "no CUDA graphs": {"xla_gpu_enable_command_buffer": ""},
    # PTX to SASS inside the process rather than a ptxas child each (2026-12-07, JAX 0.11.2: fails, "No supported
    # config found" for a Triton GEMM fusion): the H100's 12 compiles at once kept only 5-7 of
    # 16 cores busy (2026-12-06: cpu_s 54-59 s in 11 s), ptxas's children 1.6 of them; an error if jaxlib lacks it
    "in-process ptx": {"xla_gpu_enable_libnvptxcompiler": True},
    "nvjitlink": {"xla_gpu_libnvjitlink_mode": "LIB_NV_JIT_LINK_MODE_ENABLED"},
    # LLVM's opt level for the generated kernels: on this CPU it cut check programs' compiles by 42% (4 shapes, 16
    # programs: 3.96 -> 2.28 s) but ran them 2-4x slower at T=2048; on a GPU a check runs microseconds. On the H100
    # (2026-12-07): the process's CPU 28.1 -> 19.5 s, outputs equal, 32 of 32 described alike
    "LLVM -O0": {"xla_backend_optimization_level": 0},
    # dots to cuBLAS rather than Triton's generated GEMMs (XLA's own attentions compiled 0.9-1.5 s a program in the
    # H100's own-shape windows of 2026-12-07, cuDNN's 0.2 s). On the H100 (measurements/h100_own_2026-12-07_30th/):
    # the process's CPU 25.6 -> 18.2 s, but 8 of 32 programs described alike: a page would describe a program
    # other than XLA's default, so not for programs a page describes
    "no triton gemm": {"xla_gpu_enable_triton_gemm": False},
    # one thread per compile, as about ten compiles run at once there: no gain on the H100 (wall 3.47 -> 3.75 s)
    "one thread a compile": {"xla_gpu_force_compilation_parallelism": 1},
}


def new_shapes(n: int, seed: int):
    from attnlab.shapes import AttentionShape

    rng, out = random.Random(seed), []
    while len(out) < n:
        t = rng.choice(range(48, 400, 8))
        s = AttentionShape(batch=rng.randint(1, 6), q_len=t, kv_len=t, heads=8, kv_heads=rng.choice([1, 2, 8]),
                           head_dim=rng.choice([32, 64, 128]), dtype=rng.choice(["bfloat16", "float16"]),
                           causal=rng.random() < 0.5)
        if not s.validate() and s not in out:
            out.append(s)
    return out


def cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def compile_all(jobs, options: dict) -> tuple[dict, dict]:
    """Every (name, shape) compiled with `options`, side by side: (programs, figures)."""
    import jax

    from attnlab.backends import get
    from attnlab.backends.base import abstract_inputs, lower
    from attnlab.measure.compiled import compile_threads

    def one(job):
        name, shape = job
        t = time.perf_counter()
        exe = lower(jax.jit(get(name).jit(shape)), abstract_inputs(shape)).compile(compiler_options=options)
        return exe, time.perf_counter() - t

    (me0, kids0), t0 = cpu(), time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(compile_threads()) as pool:
        done = dict(zip(jobs, pool.map(one, jobs), strict=True))
    (me1, kids1) = cpu()
    return ({j: exe for j, (exe, _) in done.items()},
            {"wall_s": time.perf_counter() - t0, "cpu_s": me1 - me0, "children_cpu_s": kids1 - kids0,
             "compile_s_summed": sum(s for _, s in done.values()), "compiles": len(jobs),
             "by_backend": {n: sum(s for (name, _), (_, s) in done.items() if name == n) for n, _ in jobs}})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", nargs="*", choices=list(CANDIDATES), help="these candidates (default: all)")
    ap.add_argument("--backends", nargs="*", help="only these backends (default: every one that runs a shape here); "
                    "the own-shape window's: naive sdpa_xla sdpa_auto sdpa_cudnn")
    args = ap.parse_args(argv)
    import jax
    import numpy as np

    from attnlab import device
    from attnlab.backends import REGISTRY
    from attnlab.measure.compiled import CHECK_OPTIONS, describe_compiled, which_kernel
    from attnlab.measure.runs import make_inputs

    info = device.info()
    rows = []
    for label, extra in CANDIDATES.items():
        if args.only and label not in args.only:
            continue
        try:  # a flag this jaxlib was built without fails its first compile: said, and the next candidate goes
            compile_all([("naive", new_shapes(1, args.seed + 7)[0])], {**CHECK_OPTIONS, **extra})
        except Exception as e:
            rows.append({"options": label, "extra": extra, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            print(f"{label:12s} cannot compile here: {rows[-1]['error']}", flush=True)
            continue
        figures, alike, described, worst = {"check": [], label: []}, 0, 0, 0.0
        for round_ in range(2):  # A B A B, each on shapes of its own round (nothing compiled twice)
            shapes = new_shapes(args.shapes, args.seed + 100 * round_ + 10 * len(rows))
            jobs = [(n, s) for s in shapes for n in REGISTRY
                    if (not args.backends or n in args.backends) and REGISTRY[n].unmet(s, info) is None]
            base, f_base = compile_all(jobs, dict(CHECK_OPTIONS))
            other, f_other = compile_all(jobs, {**CHECK_OPTIONS, **extra})
            figures["check"].append(f_base)
            figures[label].append(f_other)
            first = {"check": 0.0, label: 0.0}
            alike += sum(which_kernel(describe_compiled(base[j])) == which_kernel(describe_compiled(other[j]))
                         for j in jobs)
            described += len(jobs)
            for i, job in enumerate(jobs):
                q, k, v = jax.block_until_ready(make_inputs(job[1]))
                outs = {}
                for which, exe in sorted((("check", base[job]), (label, other[job])), reverse=i % 2 == 1):
                    t = time.perf_counter()  # a new program's first run (what a check pays inside its turn)
                    outs[which] = np.asarray(jax.block_until_ready(exe(q, k, v)), np.float32)
                    first[which] += time.perf_counter() - t
                a, b = outs["check"], outs[label]
                worst = max(worst, float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30)))
            f_base["first_runs_s"], f_other["first_runs_s"] = first["check"], first[label]
        sums = {k: {m: sum(f[m] for f in v) for m in v[0] if m != "by_backend"} for k, v in figures.items()}
        for k, v in figures.items():
            sums[k]["by_backend"] = {n: round(sum(f["by_backend"].get(n, 0) for f in v), 2) for n in v[0]["by_backend"]}
        row = {"options": label, "extra": extra, "device": jax.devices()[0].device_kind, "check": sums["check"],
               "with": sums[label], "largest_relative_difference": worst, "described_alike": [alike, described]}
        rows.append(row)
        c, w = row["check"], row["with"]
        print(f"{label:12s} {w['compiles']:4d} compiles: wall {c['wall_s']:6.2f} -> {w['wall_s']:6.2f} s, "
              f"cpu {c['cpu_s']:6.1f} -> {w['cpu_s']:6.1f} s, children {c['children_cpu_s']:5.1f} -> "
              f"{w['children_cpu_s']:5.1f} s, first runs {c['first_runs_s']:5.2f} -> {w['first_runs_s']:5.2f} s, "
              f"outputs differ by at most {worst:.2e} of their scale, described alike {alike} of {described}",
              flush=True)
        print("   compile seconds by backend, summed (check options):", c["by_backend"], flush=True)
        print(f"   compile seconds by backend, summed ({label}):", w["by_backend"], flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
