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
    ap.add_argument("--tuning", action="store_true",
                    help="then, at small and long shapes: each of naive and the SDPA paths compiled without and with "
                         "XLA's autotuning (seconds, and whether the programs differ: kernels, fusions, scratch bytes), "
                         "and what one timing costs the device (the default, the brief one a queue gets, CUPTI alone)")
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
    tuning = tuning_costs() if args.tuning else []
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "totals": total, "timed": timed, "tuning": tuning}, indent=1))
    return 0


TUNING_SHAPES = (
    AttentionShape(),  # the codelab's
    AttentionShape(batch=2, q_len=72, kv_len=72, heads=8, kv_heads=8, head_dim=64, dtype="bfloat16"),
    AttentionShape(batch=1, q_len=1024, kv_len=1024, heads=8, kv_heads=8, head_dim=64, dtype="bfloat16"),
    AttentionShape(batch=4, q_len=4096, kv_len=4096, heads=8, kv_heads=8, head_dim=64, dtype="float32"),
)


def tuning_costs() -> list[dict]:
    """Untuned (compiled.CHECK_OPTIONS) against tuned compiles, and a timing's cost to the device, per row."""
    from attnlab.admission import DEVICE
    from attnlab.measure import timing

    out = []
    for shape in TUNING_SHAPES:
        for name in ("naive", "sdpa_auto", "sdpa_xla", "sdpa_cudnn"):
            if REGISTRY[name].unmet(shape, device.info()):
                continue
            row = {"shape": shape.describe(), "implementation": name}
            for tuned in (False, True):  # untuned first: compile_backend would hand back a tuned program
                t0 = time.perf_counter()
                exe = compiled.compile_backend(name, shape, False, tuned)[0]
                info = compiled.describe_compiled(exe)
                kind = "tuned" if tuned else "untuned"
                row.update({f"{kind}_compile_s": time.perf_counter() - t0, f"{kind}_temp_bytes": info.temp_bytes,
                            f"{kind}_what": compiled.which_kernel(info), f"{kind}_calls": list(info.custom_calls)})
            args = runs.make_inputs(shape)
            for label, kw in (("default", {"budget_s": 0.5}), ("brief", {"budget_s": 0.2, "repeats": 10, "warmup_s": 0.05})):
                with DEVICE.use():
                    t0 = time.perf_counter()
                    t = timing.time_compiled(exe, args, **kw)
                    row[f"timing_{label}_s"] = time.perf_counter() - t0
                row[f"timing_{label}_device_ms"] = t.device_ms
                row[f"timing_{label}_kernels"] = [k for k, _ in t.kernels]
            t0 = time.perf_counter()
            timing.kernel_times(exe, args)
            row["cupti_s"] = time.perf_counter() - t0
            out.append(row)
            print(f"{shape.describe():40} {name:11} compile untuned {row['untuned_compile_s']:5.2f} s tuned "
                  f"{row['tuned_compile_s']:5.2f} s  temp {row['untuned_temp_bytes']} / {row['tuned_temp_bytes']}  "
                  f"same kernels: {row['untuned_what'] == row['tuned_what']}  timing {row['timing_default_s']:.2f} / "
                  f"brief {row['timing_brief_s']:.2f} s, CUPTI {row['cupti_s']:.3f} s", flush=True)
            if row["untuned_what"] != row["tuned_what"]:
                print(f"    untuned: {row['untuned_what']}\n    tuned:   {row['tuned_what']}")
    return out


if __name__ == "__main__":
    sys.exit(main())
