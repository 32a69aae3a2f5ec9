"""What a device worker would pay per new program if another process lowered and compiled it for it.

    python scripts/program_handoff.py [--shapes 6] [--backends naive sdpa_xla]

For each backend at new shapes: the worker's own lowering and compile (as `compiled.compile_timed` does them), then
two hand-offs from a helper process: the compiled executable serialized (`jax.experimental.serialize_executable`)
and loaded here, and the program `jax.export`ed and its call lowered here. Process CPU for lowering and export,
wall for compile and load. On this 2-core CPU, JAX 0.10.2 (2026-12-07, medians of `naive` and `sdpa_xla`): lowering
22-28 ms and compiling 138-255 ms here, against loading a serialized executable in 4-7 ms, or lowering an exported
program's call in 9-12 ms and still compiling it (deploy/README.md, the 29th session).
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
from jax import export
from jax.experimental import serialize_executable

from attnlab.backends import REGISTRY
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=int, default=6)
    ap.add_argument("--backends", nargs="+", default=["naive", "sdpa_xla"])
    a = ap.parse_args()
    print(f"JAX {jax.__version__} on {jax.default_backend()}; medians over {a.shapes} new shapes")
    for name in a.backends:
        m = measure(name, a.shapes)
        print(f"{name:10s} " + ", ".join(f"{k} {v:.1f}" for k, v in m.items()))


if __name__ == "__main__":
    main()
