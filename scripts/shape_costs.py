#!/usr/bin/env python
"""What a new shape costs the server, per implementation: the check that it can run (requirements,
then a trace), the compile, and one checked run. Seconds, measured in this process, cold.

    python scripts/shape_costs.py                  # three small shapes a learner might type
    python scripts/shape_costs.py --json out.json

Beside each check (traced to a jaxpr, as the app checks a shape since 2026-12-02), the same call traced
and lowered (as it checked before): its time, and whether it refuses the same shapes ('same' / 'DIFFERS').

Why: a class of learners each on a shape of their own pays these for every shape, and the
tracing part holds Python's GIL (the compile mostly does not), so it bounds how many new shapes
one server process can take per second. Prints one row per (shape, implementation) and totals.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from attnlab import device  # noqa: E402
from attnlab.backends import REGISTRY  # noqa: E402
from attnlab.backends.base import abstract_inputs, trace_error  # noqa: E402
from attnlab.measure import compiled, runs
from attnlab.shapes import AttentionShape  # noqa: E402

SHAPES = (
    AttentionShape(batch=1, q_len=40, kv_len=40, heads=4, kv_heads=2, head_dim=32, dtype="bfloat16", causal=True),
    AttentionShape(batch=2, q_len=72, kv_len=72, heads=8, kv_heads=8, head_dim=64, dtype="float32"),
    AttentionShape(batch=1, q_len=96, kv_len=96, heads=8, kv_heads=1, head_dim=128, dtype="bfloat16"),
)


def lowered_error(backend, shape) -> str | None:
    """Like trace_error, but traced and lowered (the check before 2026-12-02): a fresh function each time, so
    no trace is cached. Whether it refuses the same shapes as trace_error, and how much slower it is."""
    try:
        jax.jit(lambda q, k, v: backend.fn(q, k, v, shape)).lower(*abstract_inputs(shape))
    except Exception as e:
        return str(e)[:200]
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--names", nargs="*", default=None, help="only these implementations (default: all)")
    ap.add_argument("--time", action="store_true",
                    help="then time naive, sdpa_xla and sdpa_cudnn at the codelab's shape and a long one (wall, "
                         "device): with and without XLA's autotuning (XLA_FLAGS=--xla_gpu_autotune_level=0) "
                         "this shows what the compile time saved costs the kernels")
    args = ap.parse_args(argv)
    info = device.info()
    rows = []
    for shape in SHAPES:
        for name, backend in REGISTRY.items():
            if args.names and name not in args.names:
                continue
            t0 = time.perf_counter()
            unmet_static = next((r.sentence() for r in backend.requirements(shape, info) if not r.met), None)
            t1 = time.perf_counter()
            lowered = None if unmet_static else lowered_error(backend, shape)  # traced and lowered, cold
            t2 = time.perf_counter()
            traced = trace_error(backend, shape) if unmet_static is None else None
            t3 = time.perf_counter()
            row = {"shape": shape.describe(), "implementation": name, "requirements_s": t1 - t0,
                   "trace_s": t3 - t2, "lowered_s": t2 - t1,
                   "runs_here": unmet_static is None and traced is None,
                   "why_not": unmet_static or traced or "", "why_not_lowered": lowered or ""}
            if row["runs_here"]:
                t3 = time.perf_counter()
                compiled.compile_backend(name, shape)
                t4 = time.perf_counter()
                r = runs.run(shape, [name])[0]
                row.update(compile_s=t4 - t3, checked_run_s=time.perf_counter() - t4, status=r.status)
            rows.append(row)
            print(f"{shape.describe():40} {name:22} trace {row['trace_s']:6.3f} s ("
                  f"{row['lowered_s']:6.3f} s lowered, {'same' if bool(lowered) == bool(traced) else 'DIFFERS'})  compile "
                  f"{row.get('compile_s', 0):6.3f} s  run {row.get('checked_run_s', 0):6.3f} s  "
                  f"{row.get('status', row['why_not'][:60])}", flush=True)
    total = {k: sum(r.get(k, 0.0) for r in rows) for k in ("trace_s", "lowered_s", "compile_s", "checked_run_s")}
    print(f"{device.info().backend}: {len(SHAPES)} shapes, totals: trace {total['trace_s']:.2f} s (lowered: {total['lowered_s']:.2f} s), compile "
          f"{total['compile_s']:.2f} s, checked runs {total['checked_run_s']:.2f} s")
    timed = []
    if args.time:
        for shape in (AttentionShape(), AttentionShape(batch=4, q_len=2048, kv_len=2048, heads=16, kv_heads=16,
                                                       head_dim=128, dtype="bfloat16")):
            for r in runs.run(shape, [n for n in ("naive", "sdpa_xla", "sdpa_cudnn") if n in REGISTRY],
                              accuracy=False, timed=True, budget_s=0.5):
                t = r.timing
                timed.append({"shape": shape.describe(), "implementation": r.implementation, "status": r.status,
                              "wall_ms": t.wall_ms if t else None, "device_ms": t.device_ms if t else None})
                print(f"timed {shape.describe():40} {r.implementation:12} {r.status:11} wall "
                      f"{t.wall_ms if t else float('nan'):8.4f} ms  device "
                      f"{(t.device_ms if t and t.device_ms is not None else float('nan')):8.4f} ms", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "totals": total, "timed": timed}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
