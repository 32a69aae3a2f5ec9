#!/usr/bin/env python
"""Whether Python work beside a device turn makes the turn long (the GIL's convoy), in one process.

    python scripts/gil_turns.py [--turns 30] [--beside 0 1 2] [--turn-switch 0 0.0001] [--compile] [--ahead on off]

A turn here is the run layer's own: `runs.run` of a check (naive and XLA's SDPA against float64: the inputs, the
reference, each program's run and its check) at a shape compiled before, so the turn holds the device for Python and
a little device work, as a check of a learner's small shape does on a GPU. Beside it, N threads lower new programs
without compiling them (`backends.base.lower`: tracing and MLIR, Python holding the GIL, as each of a class's compiles
begins; one at a time, as the lab lowers); `--compile`: they compile too (`compiled.compile_backend` at new shapes,
XLA's C++ beside the Python). Per N it prints the turns' held seconds (`DEVICE.stats.busy_s`), median and p90, and the
turn thread's CPU seconds in them: held much longer than the thread computed, with a core to spare, is time spent
waiting to hold the GIL again after each call into C (a busy thread keeps it for the switch interval, 5 ms); with
each ATTNLAB_TURN_SWITCH_S given (0: Python's 5 ms; the default 0.1 ms while a run holds the device,
`threads.held_turn`), so one run is the before and the after. (Lowerings that waited for a gap between turns,
ATTNLAB_GAP_WAIT_S, were measured here on 2026-12-06 and removed after: deploy/measurements, docs/design-notes.md.)
`--ahead on off`: the float64 reference computed before the turn (`runs.AHEAD_MAX_BYTES`, the default) and in it
(0), interleaved per beside-count. A benchmark: it judges nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NAMES = ("naive", "sdpa_xla")


def busy(stop: threading.Event, compile_: bool, counter: list[int], offset: int) -> None:
    """Lower (or compile) the check's backends at ever new shapes until `stop`."""
    from attnlab.backends import get
    from attnlab.backends.base import abstract_inputs, lower
    from attnlab.measure import compiled
    from attnlab.shapes import AttentionShape

    for k in itertools.count(offset * 100_000):
        if stop.is_set():
            return
        shape = AttentionShape(batch=1 + k % 3, q_len=16 + 8 * (k % 997), kv_len=16 + 8 * (k % 997), heads=4,
                               kv_heads=(1, 2, 4)[k % 3], head_dim=32, dtype="float32", causal=bool(k % 2))
        name = NAMES[k % len(NAMES)]
        if compile_:
            compiled.compile_backend(name, shape, False, False)
        else:
            lower(get(name).jit(shape), abstract_inputs(shape))
        counter[0] += 1


def turns(n: int, shape) -> tuple[list[float], list[float]]:
    """n checks at `shape`: each one's seconds holding the device, and this thread's CPU seconds over the call."""
    from attnlab.admission import DEVICE
    from attnlab.measure import runs

    held, cpu = [], []
    for _ in range(n):
        b0, c0 = DEVICE.stats.busy_s, time.thread_time()
        results = runs.run(shape, NAMES, accuracy=True)
        cpu.append(time.thread_time() - c0)
        held.append(DEVICE.stats.busy_s - b0)
        assert all(r.ok for r in results), [r.reason for r in results]
    return held, cpu


def beside(n: int, compile_: bool, shape, count: int) -> dict:
    """`count` turns with n threads lowering (or compiling) beside them."""
    import jax

    from attnlab.settings import settings

    stop, counter = threading.Event(), [0]
    threads = [threading.Thread(target=busy, args=(stop, compile_, counter, i), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    time.sleep(0.5 if n else 0)
    t0 = time.perf_counter()
    held, cpu = turns(count, shape)
    wall = time.perf_counter() - t0
    stop.set()
    for t in threads:
        t.join()
    from attnlab.measure import runs

    return {"beside": n, "compile": compile_, "turn_switch_s": settings().turn_switch_s, "backend": jax.default_backend(),
            "reference_ahead": runs.AHEAD_MAX_BYTES > 0,
            "turns": len(held), "held_median_s": statistics.median(held), "held_p90_s": statistics.quantiles(held, n=10)[-1],
            "cpu_median_s": statistics.median(cpu), "programs_beside_per_s": counter[0] / wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--beside", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--compile", action="store_true", help="the threads beside compile what they lower")
    ap.add_argument("--turn-switch", type=float, nargs="+", default=[0.0, 0.0001],
                    help="ATTNLAB_TURN_SWITCH_S values to try (0: Python's 5 ms switch interval in turns too)")
    ap.add_argument("--ahead", nargs="+", choices=["on", "off"], default=["on"],
                    help="the float64 reference before the turn (on: runs.AHEAD_MAX_BYTES) or in it (off)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from attnlab.measure import runs
    from attnlab.settings import override
    from attnlab.shapes import AttentionShape

    shape = AttentionShape(batch=2, q_len=128, kv_len=128, heads=8, kv_heads=8, head_dim=64, dtype="float32")
    turns(3, shape)  # compiled and run once: what follows is turns alone
    out, ahead = [], runs.AHEAD_MAX_BYTES
    for n, switch, on in itertools.product(args.beside, args.turn_switch, args.ahead):
        runs.AHEAD_MAX_BYTES = ahead if on == "on" else 0
        with override(turn_switch_s=switch):
            row = beside(n, args.compile, shape, args.turns)
        out.append(row)
        print(f"reference {'before' if on == 'on' else 'in'} the turn; "
              f"{n} thread{'s' * (n != 1)} {'compiling' if args.compile else 'lowering'} beside, switch interval in turns "
              f"{switch * 1e3 if switch else 5:g} ms: "
              f"turn held {row['held_median_s'] * 1e3:7.1f} ms median, {row['held_p90_s'] * 1e3:7.1f} ms p90; the turn "
              f"thread's CPU {row['cpu_median_s'] * 1e3:6.1f} ms; {row['programs_beside_per_s']:.1f} programs/s beside")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
