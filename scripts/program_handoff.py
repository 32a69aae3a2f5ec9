"""What a device worker would pay per new program if another process lowered and compiled it for it.

    python scripts/program_handoff.py [--shapes 6] [--backends naive sdpa_xla]

For each backend at new shapes: the worker's own lowering and compile (as `compiled.compile_timed` does them), then
two hand-offs from a helper process: the compiled executable serialized (`jax.experimental.serialize_executable`)
and loaded here, and the program `jax.export`ed and its call lowered here. Process CPU for lowering and export,
wall for compile and load. On this 2-core CPU, JAX 0.10.2 (2026-12-07, medians of `naive` and `sdpa_xla`): lowering
22-28 ms and compiling 138-255 ms here, against loading a serialized executable in 4-7 ms, or lowering an exported
program's call in 9-12 ms and still compiling it (deploy/README.md, the 29th session).

    python scripts/program_handoff.py --across [--dtype bfloat16] [--backends naive sdpa_xla sdpa_cudnn sdpa_auto]

does the hand-off as a helper would: a second process (its own JAX client and device) lowers, compiles and
serializes each program at the new shapes, while this one lowers and compiles them itself; then this one loads the
helper's executables, runs both at the same inputs and says whether their outputs are equal to the last bit (a
library call such as cuDNN's attention must survive the trip), with its own costs against the load's.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
from jax import export
from jax.experimental import serialize_executable

from attnlab.backends import REGISTRY
from attnlab.measure.compiled import check_options
from attnlab.shapes import AttentionShape


def measure(name: str, shapes: int) -> dict[str, float]:
    backend, rows = REGISTRY[name], []
    for i in range(1, shapes + 1):
        t = 200 + 8 * i  # a new shape each time: nothing kept from the one before
        shape = AttentionShape(batch=2, q_len=t, kv_len=t, heads=4, kv_heads=4, head_dim=32)
        fn, args = backend.program(shape)  # what compiled.compile_backend lowers: the jitted fn, the shape static
        c0 = time.process_time()
        lowered = fn.lower(*args)
        c1 = time.process_time()
        w1 = time.perf_counter()
        executable = lowered.compile()
        w2 = time.perf_counter()
        blob = serialize_executable.serialize(executable)  # the helper's side
        w3 = time.perf_counter()
        serialize_executable.deserialize_and_load(*blob)  # the worker's side
        w4 = time.perf_counter()
        helper = jax.jit(lambda q, k, v, f=fn, s=shape: f(q, k, v, s))
        exported = export.export(helper)(*args[:3]).serialize()  # the helper's side
        c2 = time.process_time()
        jax.jit(export.deserialize(exported).call).lower(*args[:3])  # the worker's side
        c3 = time.process_time()
        rows.append({"lower_ms": (c1 - c0) * 1e3, "compile_ms": (w2 - w1) * 1e3, "load_executable_ms": (w4 - w3) * 1e3,
                     "lower_exported_call_ms": (c3 - c2) * 1e3})
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def new_shapes(count: int, dtype: str) -> list[AttentionShape]:
    return [AttentionShape(batch=2, q_len=t, kv_len=t, heads=4, kv_heads=4, head_dim=64, dtype=dtype)
            for t in (200 + 8 * i for i in range(1, count + 1))]


def compile_each(jobs: list[tuple[str, AttentionShape]]) -> list[tuple]:
    """Each (backend, shape) program lowered and compiled as the class's check programs are (untuned on a GPU,
    `compiled.check_options`), with its wall seconds: this process's own, and the helper's before it serializes."""
    out = []
    for name, shape in jobs:
        fn, args = REGISTRY[name].program(shape)
        t0 = time.perf_counter()
        out.append((fn.lower(*args).compile(check_options()), time.perf_counter() - t0))
    return out


def helper(jobs_file: str) -> None:
    """The helper process's side (`--helper FILE`): the pickled jobs compiled (`compile_each`) and serialized, each
    with its seconds, pickled to stdout."""
    jobs = pickle.loads(Path(jobs_file).read_bytes())
    pickle.dump([(serialize_executable.serialize(exe), s) for exe, s in compile_each(jobs)], sys.stdout.buffer)


def across(names: list[str], shapes: int, dtype: str, timeout_s: float = 600) -> list[dict]:
    """Per backend: this process's lowering and compile against loading the helper's executable (medians, ms),
    and how many of the helper's programs gave outputs equal to the last bit to this process's own.

    The helper is a fresh Python started from this file, with the repository as its folder and path. Not a
    multiprocessing spawn pool: in CI's full suite its test waited on one forever while new pool processes kept
    starting (why, not found); a plain subprocess fails with its stderr, or at `timeout_s`."""
    import numpy as np

    root = Path(__file__).resolve().parents[1]
    jobs = [(n, s) for n in names for s in new_shapes(shapes, dtype)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    with tempfile.NamedTemporaryFile(suffix=".pickle") as f:
        f.write(pickle.dumps(jobs))
        f.flush()
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--helper", f.name], cwd=root,
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            own, (out, err) = compile_each(jobs), proc.communicate(timeout=timeout_s)
        finally:
            proc.kill()  # a no-op once it exited; never left compiling behind an error here
    if proc.returncode != 0:
        raise RuntimeError(f"the helper exited with {proc.returncode}: {err.decode(errors='replace')[-2000:]}")
    blobs = pickle.loads(out)
    rows: dict[str, dict] = {}
    for (name, shape), (mine, own_s), (blob, helper_s) in zip(jobs, own, blobs, strict=True):
        t0 = time.perf_counter()
        loaded = serialize_executable.deserialize_and_load(*blob)
        load_s = time.perf_counter() - t0
        key = jax.random.split(jax.random.key(0), 3)
        q, k, v = (jax.random.normal(key[i], a.shape, a.dtype)
                   for i, a in enumerate(REGISTRY[name].program(shape)[1][:3]))
        equal = bool(np.array_equal(np.asarray(mine(q, k, v)), np.asarray(loaded(q, k, v)), equal_nan=True))
        r = rows.setdefault(name, {"own_ms": [], "helper_ms": [], "load_ms": [], "equal": 0, "programs": 0})
        for k, seconds in (("own_ms", own_s), ("helper_ms", helper_s), ("load_ms", load_s)):
            r[k].append(seconds * 1e3)
        r["equal"] += equal
        r["programs"] += 1
    return [{"backend": n, **{k: round(statistics.median(v), 1) for k, v in r.items() if k.endswith("_ms")},
             "equal_outputs": f"{r['equal']} of {r['programs']}"} for n, r in rows.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=int, default=6)
    ap.add_argument("--backends", nargs="+", default=["naive", "sdpa_xla"])
    ap.add_argument("--across", action="store_true", help="a helper process compiles; this one loads and compares")
    ap.add_argument("--dtype", default="float32", help="with --across (cuDNN's attention needs bfloat16)")
    ap.add_argument("--helper", help=argparse.SUPPRESS)  # --across's second process: its jobs' file
    a = ap.parse_args()
    if a.helper:
        return helper(a.helper)
    print(f"JAX {jax.__version__} on {jax.default_backend()}; medians over {a.shapes} new shapes")
    if a.across:
        for row in across(a.backends, a.shapes, a.dtype):
            print(row)
        return
    for name in a.backends:
        m = measure(name, a.shapes)
        print(f"{name:10s} " + ", ".join(f"{k} {v:.1f}" for k, v in m.items()))


if __name__ == "__main__":
    main()
