#!/usr/bin/env python
"""What a fresh device worker pays before its pages are as fast as a warm one's: the one-time costs of a new
process, step by step, beside what a warm process pays for a shape it has never seen. Seconds, this process cold.

    python scripts/first_uses.py [--json out.json]

Steps, in order, each timed alone: the imports a worker makes; JAX's device (`device.info`, the client);
pandas and every entry point's module, tokamax's import and TransformerEngine's (the imports a new worker's
quiet moment makes, `warm.worker_start`; a request that needs one first pays it); then for every backend
that can run the shape, a page's request (checked against float64 and timed, as page 4 asks) at shape A, new to
the process, then at shape B, new too, in the now warm process. A − B is that backend's first use in
a process: what a restarted worker pays beyond compiling the learners' new shapes (issue 40's device fault,
measured as the worker fault less the control in scripts/rehearse.py). A benchmark: it prints and judges nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

T0 = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed(steps: list, what: str, fn):
    t = time.perf_counter()
    out = fn()
    steps.append({"step": what, "s": round(time.perf_counter() - t, 3)})
    print(f"{steps[-1]['s']:8.2f} s  {what}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args(argv)
    steps: list[dict] = []

    def imports():
        from attnlab.measure import runs  # noqa: F401
        from attnlab.service import worker  # noqa: F401

    timed(steps, "import attnlab's worker (jax, numpy, the backends' modules)", imports)
    from attnlab import device
    from attnlab.backends import REGISTRY, te, tokamax
    from attnlab.measure import runs
    from attnlab.shapes import AttentionShape

    info = timed(steps, "JAX's device (device.info)", device.info)

    def quiet_imports():
        from attnlab import threads
        from attnlab.service import entries

        threads.serve_many_threads()
        for name in entries.names():
            entries.get(name)

    timed(steps, "pandas and every entry point's module (the quiet moment's first imports)", quiet_imports)
    timed(steps, "tokamax's import", tokamax.import_error)
    timed(steps, "TransformerEngine's import", te.import_error)
    a, b = (AttentionShape(batch=n, dtype=args.dtype) for n in (5, 6))
    names = [n for n in REGISTRY if REGISTRY[n].unmet(a, info) is None]
    firsts = {}
    for shape, label in ((a, "A"), (b, "B")):
        for n in names:
            r = timed(steps, f"{n} at {label} ({shape.describe()})",
                      lambda n=n, shape=shape: runs.run(shape, (n,), accuracy=True, timed=True, budget_s=0.3)[0])
            firsts.setdefault(n, []).append((steps[-1]["s"], r.status))
    print(f"\n{'backend':16s} {'A (first use)':>14s} {'B (warm)':>10s} {'A - B':>8s}  status")
    for n, ((sa, st_a), (sb, st_b)) in firsts.items():
        print(f"{n:16s} {sa:14.2f} {sb:10.2f} {sa - sb:8.2f}  {st_a}/{st_b}")
    first = sum(sa - sb for (sa, _), (sb, _) in firsts.values())
    print(f"one-time steps before the backends: {sum(s['s'] for s in steps[:5]):.2f} s; the backends' first uses "
          f"(sum of A - B): {first:.2f} s; process alive {time.perf_counter() - T0:.1f} s; device {info.device_kind}")
    if args.json:
        args.json.write_text(json.dumps({"device": info.device_kind, "steps": steps,
                                         "backends": {n: {"a_s": v[0][0], "b_s": v[1][0], "status": v[0][1]}
                                                      for n, v in firsts.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
