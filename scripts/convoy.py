#!/usr/bin/env python
"""The GIL's convoy, in one process: a page's small DataFrame operations, alone and beside threads busy in Python,
with Python's and pandas's defaults, with a 0.5 ms switch interval instead of 5 ms, and with
`attnlab.threads.serve_many_threads()` (pandas's object strings: what the UI server and the device workers set).

    python scripts/convoy.py [--pages 4] [--busy 3]

The DataFrame work is `attnlab.measure.compiled.growth` on a table of the run layer's shape (page 4's memory
section calls it on every rerun); the busy threads stand for other learners' pages running Python. Each
setting runs in a fresh process (each is process-wide). Prints milliseconds per page for each.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWITCH_S = 0.0005  # a tenth of Python's default switch interval


def page(df) -> None:
    from attnlab.measure import compiled

    compiled.growth(df)


def table():
    import pandas as pd

    names = ["naive", "sdpa_xla", "sdpa_cudnn", "flash_jax"]
    return pd.DataFrame([{"implementation": n, "status": "ok", "q_len": t, "temp_bytes": float(t * t * (i + 1))}
                         for i, n in enumerate(names) for t in (128, 256, 512, 1024, 2048)])


def measure(pages: int, busy: int, rounds: int = 10) -> dict:
    df = table()
    page(df)  # imports and first calls outside the measurement
    t0 = time.perf_counter()
    for _ in range(rounds * 5):
        page(df)
    alone = (time.perf_counter() - t0) / (rounds * 5)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(i * i for i in range(1000))

    spinners = [threading.Thread(target=spin) for _ in range(busy)]
    for s in spinners:
        s.start()
    each: list[float] = []

    def learner() -> None:
        t = time.perf_counter()
        for _ in range(rounds):
            page(df)
        each.append((time.perf_counter() - t) / rounds)

    learners = [threading.Thread(target=learner) for _ in range(pages)]
    for t in learners:
        t.start()
    for t in learners:
        t.join()
    stop.set()
    for s in spinners:
        s.join()
    return {"alone_ms": alone * 1e3, "crowded_ms": sum(each) / len(each) * 1e3}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=4, help="threads doing the page's DataFrame work")
    ap.add_argument("--busy", type=int, default=3, help="threads busy in Python beside them")
    ap.add_argument("--one", choices=["defaults", "switch", "served"], help=argparse.SUPPRESS)  # a child's setting
    args = ap.parse_args(argv)
    if args.one:
        sys.path.insert(0, str(ROOT))
        from attnlab import threads

        if args.one == "served":
            threads.serve_many_threads()
        elif args.one == "switch":  # the other remedy, which the rehearsal rejected (attnlab/threads.py says why)
            sys.setswitchinterval(SWITCH_S)
        print(json.dumps(measure(args.pages, args.busy)))
        return
    print(f"{'setting':<40} {'alone ms/page':>14} {f'beside {args.busy} busy threads':>26}")
    for one, label in (("defaults", "Python's and pandas's defaults"), ("switch", "a 0.5 ms switch interval"),
                       ("served", "serve_many_threads()")):
        out = subprocess.run([sys.executable, __file__, "--one", one, "--pages", str(args.pages), "--busy", str(args.busy)],
                             capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{label:<40} {r['alone_ms']:>14.1f} {r['crowded_ms']:>26.1f}")


if __name__ == "__main__":
    main()
