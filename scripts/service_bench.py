#!/usr/bin/env python
"""The device service's own costs, for each way of running the worker: how long it takes to start and
answer, and a request's round trip.

    python scripts/service_bench.py                    # the child process and a local Ray cluster
    python scripts/service_bench.py --kinds child --calls 200 --json out.json

Each kind runs in a fresh Python process of its own (a cold start, as `make run` is):
  start_s       from making the client to the worker's first answer (JAX imported, its device read)
  first_run_s   the codelab's shape, naive attention checked against float64 (compiles included)
  round trip    a request whose result the worker kept (nothing computed: the service's overhead alone),
                median and 95th percentile over --calls requests, one at a time, 5 s after the first run
                (a child worker imports tokamax in the background after it answers; that import holds the
                GIL for seconds on a GPU machine)
  restart_s     with --restarts R: from SIGKILLing the idle worker to the answer of a request at a shape new to
                the process (`--impls`, by default page 4's two, checked against float64), sent at once; a request
                that met the dying process and came back WorkerLost is sent again (counted: lost). Median of R.
  control_s     the same request at another new shape, nothing killed: restart_s less control_s is what the
                restart itself costs (issue 40's device fault, without a class's compiles around it)
  --start-delay S  every worker process starts S s later: a restart as slow as a GPU worker's, on a CPU
The embedded default is whichever starts faster here (README, issue "One process owns each GPU").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ONE = r"""
import json, os, statistics, sys, time
t0 = time.perf_counter()
from attnlab.measure import runs
from attnlab.service.request import Request, WorkerLost
from attnlab.shapes import AttentionShape
kind, calls, restarts, slow = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
impls, dtype = tuple(sys.argv[5].split(",")), sys.argv[6]
imported = time.perf_counter() - t0
t0 = time.perf_counter()
env = {"JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "")}
if slow:  # a worker process whose start takes longer (sitecustomize sleeps), as a GPU worker's does
    env["PYTHONPATH"] = os.pathsep.join([slow, os.environ["PYTHONPATH"]])
from attnlab.service.child import QUICK_S
if kind == "child":
    from attnlab.service.child import ChildWorker
    client = ChildWorker(env=env)
else:
    from attnlab.service.ray_workers import RayWorkers
    client = RayWorkers("local", workers=1, fake_gpus=int(os.environ.get("FAKE_GPUS", "0")), worker_env=env)
assert client.wait_ready(180)
info = client.infos()[0]
start = time.perf_counter() - t0
t0 = time.perf_counter()
request = Request.of(runs.run, AttentionShape(), ("naive",))
assert client.call(request).value[0].ok
first = time.perf_counter() - t0
time.sleep(5)  # a new worker finishes its own start (tokamax's import, on a GPU machine) before the timing
times = []
for _ in range(calls):
    t0 = time.perf_counter()
    reply = client.call(request)
    times.append(time.perf_counter() - t0)
    assert reply.cached
times.sort()


def answered(shape):  # seconds until a page-4 request at `shape` is answered; how many times it came back lost
    t0, lost = time.perf_counter(), 0
    while True:
        try:
            reply = client.call(Request.of(runs.run, shape, impls))
            assert reply.error is None and all(r.ok for r in reply.value), reply
            return time.perf_counter() - t0, lost
        except WorkerLost:
            lost += 1
            if time.perf_counter() - t0 > 120:  # a worker that never comes back: the bench fails, it does not spin
                raise


restart, control, lost = [], [], 0
for i in range(restarts):
    control.append(answered(AttentionShape(batch=20 + 2 * i, q_len=64, kv_len=64, dtype=dtype))[0])
    # 3 s idle, and past QUICK_S of its start: an idle child killed sooner counts as dying at start, and the third
    # such death in a row makes the client give up on the worker (attnlab/service/child.py)
    time.sleep(max(3.0, QUICK_S + 1.0 - client.infos()[0].started_s_ago))
    pid = client.infos()[0].pid
    os.kill(pid, 9)
    s, n = answered(AttentionShape(batch=21 + 2 * i, q_len=64, kv_len=64, dtype=dtype))
    restart.append(s)
    lost += n
    time.sleep(8)  # the new worker's quiet-time imports (warm.worker_start) done before the next control
print(json.dumps({"kind": kind, "device": info.device.device_kind, "backend": info.device.backend,
                  "imports_s": imported, "start_s": start, "first_run_s": first,
                  "round_trip_median_ms": statistics.median(times) * 1e3,
                  "round_trip_p95_ms": times[max(0, int(0.95 * len(times)) - 1)] * 1e3, "calls": calls,
                  "restart_s": statistics.median(restart) if restart else None,
                  "control_s": statistics.median(control) if control else None, "restarts": restarts,
                  "restart_all_s": restart, "control_all_s": control, "lost": lost}))
client.close()
os._exit(0)
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", nargs="+", default=["child", "ray"], choices=["child", "ray"])
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--restarts", type=int, default=0, help="kill the worker this many times (restart_s, control_s)")
    ap.add_argument("--start-delay", type=float, default=0.0,
                    help="each worker process starts this many seconds later (a sitecustomize that sleeps): a "
                         "restart as slow as a GPU worker's (imports, JAX's GPU client) on this machine")
    ap.add_argument("--impls", nargs="+", default=["naive", "sdpa_xla"],
                    help="the implementations of the restart's and the control's request (page 4's two by default)")
    ap.add_argument("--dtype", default="float32", help="their shapes' dtype (cuDNN's attention needs bfloat16)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    rows, slow = [], ""
    if a.start_delay:
        slow = tempfile.mkdtemp(prefix="attnlab-slow-start-")
        Path(slow, "sitecustomize.py").write_text(f"import time\ntime.sleep({a.start_delay})\n")
    for kind in a.kinds:
        p = subprocess.run([sys.executable, "-c", ONE, kind, str(a.calls), str(a.restarts), slow,
                            ",".join(a.impls), a.dtype], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))})
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("{")), None)
        if line is None:
            print(f"{kind}: failed (exit {p.returncode})\n{p.stderr[-2000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(line))
    print(f"{'kind':6} {'device':>10} {'imports':>8} {'start':>7} {'first run':>10} {'round trip median':>18} {'p95':>8}")
    for r in rows:
        print(f"{r['kind']:6} {r['backend']:>10} {r['imports_s']:7.2f}s {r['start_s']:6.2f}s {r['first_run_s']:9.2f}s "
              f"{r['round_trip_median_ms']:15.2f} ms {r['round_trip_p95_ms']:5.2f} ms")
    for r in rows:
        if r.get("restart_s") is not None:
            print(f"{r['kind']:6} restart {r['restart_s']:.2f} s, control {r['control_s']:.2f} s: the restart costs "
                  f"{r['restart_s'] - r['control_s']:.2f} s (median of {r['restarts']}; requests lost {r['lost']})")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0 if len(rows) == len(a.kinds) else 1


if __name__ == "__main__":
    sys.exit(main())
