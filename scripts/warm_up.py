#!/usr/bin/env python
"""What a GPU timing's warm-up needs: the SM clock rising from idle, and the timings by each warm-up rule.

    python scripts/warm_up.py [--json out.json] [--rounds 5]

1. The ramp: after `--idle-s` of nothing, a small program called back to back and the SM clock read (NVML) after
   each call: the ms until it first reads timing.WARM_CLOCK of its maximum, three times.
2. The timings: sdpa_cudnn at a small shape and at NVIDIA's (B1 T8192 N64 K8 H128 bf16, causal), timed by the
   time rule (0.2 s of calls, the default) and by the clock rule (ATTNLAB_WARM_BY_CLOCK=1) in turn, each after an
   idle (as after a compile) and back to back (as in a class's phase of runs): device_ms, warmup_ms and the clock.
Every GPU timing holds the device for its warm-up: a class of 20 on its own shapes times about 60 programs
(deploy/measurements/h200_class_2026-12-05.json), 12 s of warm-up at 0.2 s each. A benchmark: it judges nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from attnlab import device  # noqa: E402
from attnlab.measure import compiled, runs, timing  # noqa: E402
from attnlab.settings import override  # noqa: E402
from attnlab.shapes import AttentionShape  # noqa: E402

BACKEND = "sdpa_cudnn"
SMALL = AttentionShape(batch=2, q_len=128, kv_len=128, heads=8, kv_heads=8, head_dim=64, dtype="bfloat16")
NVIDIA = AttentionShape(batch=1, q_len=8192, kv_len=8192, heads=64, kv_heads=8, head_dim=128, dtype="bfloat16",
                        causal=True)


def ramp(exe, args, idle_s: float, limit_s: float = 1.0) -> float | None:
    """ms of back-to-back calls, after `idle_s` idle, until the SM clock reads WARM_CLOCK of its maximum (None: never)."""
    time.sleep(idle_s)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        jax.block_until_ready(exe(*args))
        now, top = device.nvml_sm_clock()
        if now >= timing.WARM_CLOCK * top:
            return (time.perf_counter() - t0) * 1e3
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--idle-s", type=float, default=2.0)
    a = ap.parse_args()
    if device.nvml_sm_clock() is None:
        sys.exit("no SM clock through NVML here (a GPU machine's driver library): nothing to measure")
    out: dict = {"device": jax.devices()[0].device_kind, "max_clock_mhz": device.nvml_sm_clock()[1], "rows": []}
    for shape in (SMALL, NVIDIA):
        exe, _, _ = compiled.compile_backend(BACKEND, shape)
        args = runs.make_inputs(shape)
        if shape is SMALL:
            out["ramp_ms"] = [ramp(exe, args, a.idle_s) for _ in range(3)]
            print(f"clock to {timing.WARM_CLOCK:.0%} of {out['max_clock_mhz']} MHz after {a.idle_s} s idle:",
                  out["ramp_ms"], "ms")
        for r in range(a.rounds):
            for after in ("idle", "back to back"):
                for by_clock in (False, True):
                    if after == "idle":
                        time.sleep(a.idle_s)
                    with override(warm_by_clock=by_clock):
                        t = timing.time_compiled(exe, args)
                    out["rows"].append({"shape": shape.describe(), "after": after, "rule": "clock" if by_clock else "time",
                                        "round": r, "device_ms": t.device_ms, "warmup_ms": t.warmup_ms,
                                        "clock_mhz": t.clock_mhz, "wall_ms": t.wall_ms})
    print(f"{'shape':44} {'after':13} {'rule':5} {'device ms':>10} {'warm-up ms':>10} {'clock MHz':>9}")
    for key in sorted({(r["shape"], r["after"], r["rule"]) for r in out["rows"]}):
        rows = [r for r in out["rows"] if (r["shape"], r["after"], r["rule"]) == key]
        med = {k: statistics.median([r[k] for r in rows if r[k] is not None] or [float("nan")])
               for k in ("device_ms", "warmup_ms", "clock_mhz")}
        print(f"{key[0][:44]:44} {key[1]:13} {key[2]:5} {med['device_ms']:10.4f} {med['warmup_ms']:10.1f} "
              f"{med['clock_mhz']:9.0f}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
