#!/usr/bin/env python
"""A class grows by adding GPUs: the same burst of runs served by 1, 2 and 4 device workers on Ray.

    python scripts/scaleout.py                       # 1, 2 and 4 workers, 32 timed runs at learners' own shapes
    python scripts/scaleout.py --workers 1 2 --requests 16 --json out.json

A local Ray cluster with fake GPUs (`num_gpus=4` on a CPU): each device worker is one Ray actor with
one "GPU", running JAX on the CPU with XLA's CPU backend single-threaded (`--xla_cpu_multi_thread_eigen=
false`, one intra-op thread), so that each fake GPU is one core of device work, as each real GPU is one
device. The burst: `--requests` learners press "Time" at once, each at a shape of its own (naive and XLA's
SDPA timed, checked against float64, compiled: `runs.run(..., timed=True)` through the service, as page
7 asks), sent from as many threads. Each worker count gets fresh actors (nothing compiled, nothing kept).
Reported per count: the burst's wall time, runs per second, the speed-up over one worker, the slowest
request, and how the requests spread over the workers. The device work of one worker is one run at a
time by design, so one worker's runs queue; two and four workers take them side by side.

Each GPU of a class comes with a host of its own (a GKE GPU node: its own cores for compiles and the
float64 reference), so each worker is pinned to `--cores-per-worker` cores of its own (default 3: every
thread of the actor's process, and its compile pool and BLAS sized to match); 0 lets every count share all
the machine's cores, which measures one host's CPUs rather than added GPUs. Four pinned workers need
4 × 3 + 1 cores (the H200 machine has 16; a 2-core machine can only show two unpinned).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SINGLE_CORE = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def burst_shapes(n: int, q_len: int = 384):
    from attnlab.shapes import AttentionShape

    # every learner's own shape, all of about the same cost (the lengths differ by a few positions)
    return [AttentionShape(batch=2, q_len=q_len + 4 * i, kv_len=q_len + 4 * i, heads=8, kv_heads=8, head_dim=64)
            for i in range(n)]


def one_count(workers: int, requests: int, names: tuple[str, ...], q_len: int = 384, cores_per_worker: int = 0) -> dict:
    import ray

    from attnlab.measure import runs
    from attnlab.service.ray_workers import PREFIX, RayWorkers
    from attnlab.service.request import Request

    for i in range(8):  # fresh actors: nothing compiled, nothing kept from another count
        try:
            ray.kill(ray.get_actor(f"{PREFIX}{i}", namespace="attnlab"))
        except ValueError:
            pass
    time.sleep(1.0)
    client = RayWorkers("local", workers=workers, threads=16)
    assert client.wait_ready(300), "the device workers did not start"
    pinned = {}
    if cores_per_worker:
        for i, info in enumerate(sorted(client.infos(), key=lambda x: x.name)):
            cores = set(range(1 + i * cores_per_worker, 1 + (i + 1) * cores_per_worker))  # core 0: the driver, Ray
            for tid in os.listdir(f"/proc/{info.pid}/task"):  # every thread: later ones inherit their creator's
                try:
                    os.sched_setaffinity(int(tid), cores)
                except OSError:
                    pass
            pinned[info.name] = sorted(cores)
    shapes = burst_shapes(requests, q_len)

    def press(shape):
        t0 = time.perf_counter()
        reply = client.call(Request.of(runs.run, shape, names, timed=True))
        return time.perf_counter() - t0, reply.worker, [r.status for r in reply.value]

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(requests) as pool:
        done = list(pool.map(press, shapes))
    wall = time.perf_counter() - t0
    spread = {}
    for _, w, _ in done:
        spread[w] = spread.get(w, 0) + 1
    statuses = [s for _, _, ss in done for s in ss]
    busy = {i.name: round(i.busy_share, 3) for i in client.infos()}
    return {"workers": workers, "requests": requests, "q_len": q_len, "wall_s": wall, "runs_per_s": requests / wall,
            "slowest_request_s": max(t for t, _, _ in done), "median_request_s": statistics.median(t for t, _, _ in done),
            "spread": spread, "not_ok": [s for s in statuses if s != "ok"], "device_held_share": busy,
            "cores": pinned or "shared"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--names", nargs="+", default=["naive", "sdpa_xla"])
    ap.add_argument("--q-len", type=int, default=384,
                    help="the first learner's sequence length (each next one 4 longer): longer runs make the burst "
                         "compute-bound (the device work splits over the workers), shorter ones compile-bound")
    ap.add_argument("--cores-per-worker", type=int, default=3,
                    help="cores pinned to each worker, as each GPU node brings its own (0: every count shares all)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    if a.cores_per_worker and 1 + max(a.workers) * a.cores_per_worker > (os.cpu_count() or 1):
        ap.error(f"{max(a.workers)} workers × {a.cores_per_worker} cores + 1 is more than this machine's "
                 f"{os.cpu_count()} cores: lower --cores-per-worker, or 0 to share them")
    import ray

    from attnlab.service.ray_workers import NAMESPACE

    env = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": SINGLE_CORE, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])),
           "ATTNLAB_WARM": "0"}
    if a.cores_per_worker:  # a worker's compile pool and BLAS threads fit the cores it is pinned to
        env.update({k: str(a.cores_per_worker) for k in ("ATTNLAB_COMPILE_THREADS", "OMP_NUM_THREADS",
                                                          "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    ray.init(namespace=NAMESPACE, include_dashboard=False, log_to_driver=False, logging_level="warning",
             num_gpus=max(a.workers), runtime_env={"env_vars": env})
    print(f"local Ray cluster: {ray.cluster_resources().get('CPU', 0):.0f} CPUs, "
          f"{ray.cluster_resources().get('GPU', 0):.0f} fake GPUs; {os.cpu_count()} cores here", flush=True)
    rows = []
    for w in a.workers:
        r = one_count(w, a.requests, tuple(a.names), a.q_len, a.cores_per_worker)
        rows.append(r)
        print(json.dumps(r), flush=True)
    base = rows[0]["runs_per_s"] if rows and rows[0]["workers"] == 1 else None
    print(f"\n{'workers':>7} {'burst wall':>11} {'runs/s':>7} {'speed-up':>9} {'slowest':>8}  spread")
    for r in rows:
        up = r["runs_per_s"] / base if base else float("nan")
        r["speedup"] = up
        print(f"{r['workers']:>7} {r['wall_s']:10.1f}s {r['runs_per_s']:7.2f} {up:8.2f}x {r['slowest_request_s']:7.1f}s  "
              f"{r['spread']}" + (f"  NOT OK: {r['not_ok'][:3]}" if r["not_ok"] else ""))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    ray.shutdown()
    return 0 if all(not r["not_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
