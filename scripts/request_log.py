#!/usr/bin/env python
"""Where a class's time went on the device worker: its request log (ATTNLAB_REQUEST_LOG) summed up.

    ATTNLAB_REQUEST_LOG=/tmp/req.log python scripts/capacity.py --serve 4 --device ray ...
    python scripts/request_log.py /tmp/req.log [--json out.json]

One row per entry point (and whether it was timed), over the requests the worker computed: how many, the
median and 95th percentile of their seconds, and the medians of where those seconds went on the device's line
(`admission.DEVICE.ledger`): waiting for a run's turn, holding the device, waiting for a build phase, a tuned
compile in its phase, and compiling in all. Requests answered from kept results or shared with one in flight
are counted beside. Busiest entry (by total seconds) first.

    python scripts/request_log.py LOG --rehearsal x.json [--spans TIMING_LOG]

splits the log into a rehearsal's windows (its class, then each fault from its `began_at` until every learner was
served again), and with the worker's span log (ATTNLAB_TIMING_LOG, run on the same machine: its clock is the
machine's monotonic one) says how each window's seconds went on the device's line: a run holding it, a build phase
compiling between runs, or neither; and XLA's compiles, tuned or not (seconds any ran, how many, how many at once
on average).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import pandas as pd

PARTS = ("run_wait_s", "run_s", "build_wait_s", "build_s", "compile_s")


def summary(lines: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(lines)
    if df.empty:
        return df
    for part in PARTS:
        if part not in df:
            df[part] = float("nan")
    computed = df[df["how"] == "computed"]
    rows = []
    for (fn, timed), part in computed.groupby(["fn", "timed"], sort=False):
        s = part["s"]
        rows.append({"fn": fn, "timed": bool(timed), "n": len(part), "median_s": s.median(),
                     "p95_s": s.quantile(0.95), "total_s": s.sum(),
                     **{f"median_{p}": part[p].median() for p in PARTS},
                     "answered_without_computing": int(((df["fn"] == fn) & (df["how"] != "computed")).sum())})
    return pd.DataFrame(rows).sort_values("total_s", ascending=False, ignore_index=True)


def merged(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of these intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def line_use(spans: Path, since: float, until: float, offset: float | None = None) -> dict:
    """Seconds of [since, until] (time.time()) in which a run held the device ('turn'), a build phase compiled
    ('build', overlapping builds counted once) and neither; and XLA's compiles ('compile', each program's, tuned or
    not): seconds any ran and their average number at once; the lowerings before them ('lower', one at a time) and a
    check's traces ('trace'), Python's share of a window; and what the turns' seconds went to ('part': a run's
    inputs, its float64 reference, each output's first run, each check; 'timings'; 'in no part': the rest).
    Also each backend's compiles begun in the window and their seconds (`compiles_by_backend`); how many were of a
    program (by backend and shape) that some process of this log compiled before the window (`compiles_again`:
    after a worker's restart JAX's persistent cache answers them, in `compiles_again_median_s` each); and the
    seconds a spare's warm-up ran in it (`spare_s`, ATTNLAB_SPARE_DEVICE). `offset`: wall time less the spans'
    monotonic clock on the machine that wrote them (gpu_turns.sh keeps it in clock-offset.txt); default this
    machine's."""
    offset = time.time() - time.monotonic() if offset is None else offset
    kept: dict[str, list] = {"turn": [], "build": [], "compile": [], "part": [], "lower": [], "trace": [], "spare": []}
    tuned, within, before = 0, {}, set()
    by_backend: dict[str, list] = {}
    again: list[float] = []
    rows = [row.split() for row in spans.read_text().splitlines()]
    for parts in rows:  # 'compile untuned naive at B1 T64 ...': a program by backend and shape, begun before
        if parts[4:5] == ["compile"] and "at" in parts[7:8] and float(parts[0]) + offset < since:
            before.add(" ".join(parts[5:]))
    for parts in rows:
        named = "at" in parts[7:8]
        if len(parts) >= 5 and parts[4] in kept:
            a, b = float(parts[0]) + offset, float(parts[1]) + offset
            if b > since and a < until:
                kept[parts[4]].append((max(a, since), min(b, until)))
                tuned += parts[4] == "compile" and parts[5:6] == ["tuned"]
                if parts[4] == "compile" and a >= since and len(parts) >= 7:  # begun in the window: its whole seconds
                    n_s = by_backend.setdefault(parts[6], [0, 0.0])
                    n_s[0], n_s[1] = n_s[0] + 1, n_s[1] + b - a
                    if named and " ".join(parts[5:]) in before:
                        again.append(b - a)
                if parts[4] == "part":  # inside a turn (runs._part): its inputs, its reference, each run, each check
                    what = " ".join(parts[5:7])
                    within[what] = within.get(what, 0.0) + min(b, until) - max(a, since)
        elif len(parts) >= 5 and parts[4] == "timing":  # a timing, inside its turn
            a, b = float(parts[0]) + offset, float(parts[1]) + offset
            if b > since and a < until:
                within["timings"] = within.get("timings", 0.0) + min(b, until) - max(a, since)
    held, built = merged(kept["turn"]), merged(kept["build"])
    within["in no part"] = held - sum(within.values())  # between the parts, and turns without parts (timings, studies)
    return {"window_s": until - since, "run_holds_s": held, "build_phase_s": built,
            "neither_s": until - since - merged(kept["turn"] + kept["build"]), "runs": len(kept["turn"]),
            "builds": len(kept["build"]), "compiling_s": merged(kept["compile"]), "compiles": len(kept["compile"]),
            "tuned_compiles": tuned, "compile_s_summed": sum(b - a for a, b in kept["compile"]),
            "compiles_at_once": sum(b - a for a, b in kept["compile"]) / max(until - since, 1e-9),
            # Python's share: lowerings go one at a time (backends.base.lower), traces are a check's (GIL held)
            "lowering_s": merged(kept["lower"]), "lowerings": len(kept["lower"]),
            "tracing_s_summed": sum(b - a for a, b in kept["trace"]), "traces": len(kept["trace"]),
            "compiles_by_backend": {k: [n, round(s_, 1)] for k, (n, s_) in sorted(by_backend.items(), key=lambda kv: -kv[1][1])},
            "compiles_again": len(again), "compiles_again_median_s": round(statistics.median(again), 2) if again else None,
            "spare_s": merged(kept["spare"]),
            "in_turns": {k: round(v, 2) for k, v in sorted(within.items(), key=lambda kv: -kv[1])}}


def windows(rehearsal: Path) -> list[tuple[str, float, float]]:
    """(name, since, until) for a rehearsal's class and each fault, on the request log's clock."""
    r = json.loads(rehearsal.read_text())
    out = [("class", r["class"]["began_at"], r["class"]["began_at"] + r["class"]["elapsed_s"])]
    for i, f in enumerate(r.get("faults", [])):
        if f.get("began_at") and f.get("every_learner_served_again_s"):
            out.append((f"fault-{i}-{f['fault']}", f["began_at"], f["began_at"] + f["every_learner_served_again_s"]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--since", type=float, help="only requests that ended after this time.time() (a class's start)")
    ap.add_argument("--until", type=float, help="only requests that ended before this time.time() (a fault's window)")
    ap.add_argument("--slowest", type=int, default=0, help="also list the N slowest requests, each with its ledger")
    ap.add_argument("--rehearsal", type=Path, help="a rehearse.py --json: one summary per window (class, each fault)")
    ap.add_argument("--spans", type=Path, help="with --rehearsal: the worker's ATTNLAB_TIMING_LOG, how the line was used")
    ap.add_argument("--clock-offset", type=float, help="with --spans: wall less monotonic time on the machine that wrote "
                                                            "them (gpu_turns.sh's clock-offset.txt); default this machine's")
    args = ap.parse_args(argv)
    if args.rehearsal:
        for name, since, until in windows(args.rehearsal):
            print(f"=== {name}: {until - since:.1f} s")
            if args.spans:
                print("    the device's line:", {k: round(v, 2) if isinstance(v, float) else v for k, v in line_use(args.spans, since, until, args.clock_offset).items()})
            main([str(args.log), "--since", str(since), "--until", str(until), "--slowest", str(args.slowest)])
        return 0
    lines = [json.loads(line) for line in args.log.read_text().splitlines() if line.strip()]
    since = args.since or 0.0
    lines = [line for line in lines if since <= line["t"] <= (args.until or float("inf"))]
    table = summary(lines)
    if table.empty:
        print("no requests in", args.log)
        return 1
    t = [line["t"] for line in lines]
    print(f"{len(lines)} requests over {max(t) - min(t):.0f} s ({args.log})")
    computed = [line["t"] - line["s"] for line in lines if line.get("how") == "computed"]
    if args.since and computed:  # after a worker's kill: when its new process took work (the rest is the class's)
        print(f"the first request computed began {min(computed) - since:.2f} s into the window")
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.2f}".format):
        print(table.rename(columns=lambda c: c.replace("median_", "med_")).to_string(index=False))
    if args.slowest:
        slow = sorted(lines, key=lambda line: -line["s"])[:args.slowest]
        for line in slow:  # began: seconds after --since (or the first request's end)
            began = line["t"] - line["s"] - (since or min(t))
            parts = " ".join(f"{p}={line[p]:.2f}" for p in PARTS if line.get(p))
            print(f"  began {began:6.2f} s  {line['s']:6.2f} s  {line['how']:<9} {line['fn']:<22} {parts}  {line['what'][:90]}")
    if args.json:
        args.json.write_text(table.to_json(orient="records", indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
