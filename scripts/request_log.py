#!/usr/bin/env python
"""Where a class's time went on the device worker: its request log (ATTNLAB_REQUEST_LOG) summed up.

    ATTNLAB_REQUEST_LOG=/tmp/req.log python scripts/capacity.py --serve 4 --device ray ...
    python scripts/request_log.py /tmp/req.log [--json out.json]

One row per entry point (and whether it was timed), over the requests the worker computed: how many, the
median and 95th percentile of their seconds, and the medians of where those seconds went on the device's line
(`admission.DEVICE.ledger`): waiting for a run's turn, holding the device, waiting for a build phase, a tuned
compile in its phase, and compiling in all. Requests answered from kept results or shared with one in flight
are counted beside. Busiest entry (by total seconds) first.
"""

from __future__ import annotations

import argparse
import json
import sys
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--since", type=float, help="only requests that ended after this time.time() (a class's start)")
    ap.add_argument("--until", type=float, help="only requests that ended before this time.time() (a fault's window)")
    ap.add_argument("--slowest", type=int, default=0, help="also list the N slowest requests, each with its ledger")
    args = ap.parse_args(argv)
    lines = [json.loads(line) for line in args.log.read_text().splitlines() if line.strip()]
    since = args.since or 0.0
    lines = [line for line in lines if since <= line["t"] <= (args.until or float("inf"))]
    table = summary(lines)
    if table.empty:
        print("no requests in", args.log)
        return 1
    t = [line["t"] for line in lines]
    print(f"{len(lines)} requests over {max(t) - min(t):.0f} s ({args.log})")
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
