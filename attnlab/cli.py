"""`python -m attnlab ...`: the lab's measurements, headless.

    info       the device, and which implementations can run a shape here (and why not)
    compare    every implementation at one shape: error against float64, allclose, timings
    sweep      one field over values (--over q_len --values 64 128 256), as a table, CSV or JSON
    bench      the benchmark suite (suite.py) to JSON; on a GPU this makes attnlab/shipped/h200.json
    ladder     the ladder XLA -> Pallas -> cuDNN -> FP8, the mask sweep and DRAM bytes (attnlab/studies/ladder.py)
    decode     one decode step of MHA, GQA and MQA over cache lengths (page 8); on a GPU this makes
               attnlab/shipped/h200_decode.json
    warm       compile and check the codelab's shape for every backend, and the model presets (a server does this at start)
    gpucheck   on a GPU machine: the GPU-marked tests, then the suite, then a short summary
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

import pandas as pd

from attnlab.masks import MASK_TYPES, Mask
from attnlab.shapes import AttentionShape


def _shape_args(p: argparse.ArgumentParser) -> None:
    d = AttentionShape()
    for f in ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim"):
        p.add_argument(f"--{f.replace('_', '-')}", dest=f, type=int, default=getattr(d, f))
    p.add_argument("--dtype", default=d.dtype, choices=["float32", "bfloat16", "float16"])
    for t in MASK_TYPES:  # --causal, --window LEFT RIGHT, --kv-lengths N [N ...]
        flag = f"--{t.key.replace('_', '-')}"
        if t.count == 0:
            p.add_argument(flag, action="store_true", dest=t.key, help=t.help)
        else:
            p.add_argument(flag, type=int, nargs=t.count or "+", metavar=t.metavar, dest=t.key, help=t.help)


def _shape(a) -> AttentionShape:
    shape = AttentionShape(**{f: getattr(a, f) for f in ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim",
                                                          "dtype")},
                           mask=Mask.of(**{t.key: _tuple(getattr(a, t.key)) for t in MASK_TYPES}))
    problems = shape.validate()
    if problems:
        raise SystemExit("invalid shape:\n  " + "\n  ".join(problems))
    return shape


def _tuple(value):
    """argparse's list of numbers as the shape keeps them (a tuple); a flag or nothing as it is."""
    return tuple(value) if isinstance(value, list) else value


def _writable(*paths: str | None) -> None:
    """Refuse, before any work, an output path that cannot be written: it is opened for writing (created
    if it is new, left as it is if it exists), so what the system says is what the learner reads."""
    for path in filter(None, paths):
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise SystemExit(f"cannot write {path}: it is a directory (give a file name, e.g. {path.rstrip('/')}/out.json)")
        if not os.path.isdir(folder):
            raise SystemExit(f"cannot write {path}: the folder {folder} does not exist")
        existed = os.path.exists(path)
        try:
            with open(path, "a"):
                pass
        except OSError as e:
            raise SystemExit(f"cannot write {path}: {e.strerror or e}") from None
        if not existed:
            os.remove(path)  # only a check: nothing is left behind if the work fails


def _print(df: pd.DataFrame, columns: list[str]) -> None:
    cols = [c for c in columns if df[c].notna().any()]
    with pd.option_context("display.max_rows", 500, "display.max_columns", 50, "display.width", 200,
                           "display.max_colwidth", 70, "display.float_format", "{:.4g}".format):
        print(df[cols].to_string(index=False))


def cmd_info(a) -> int:
    from attnlab import device
    from attnlab.backends import REGISTRY

    info = device.info()
    for what, value in info.as_rows():
        print(f"{what:>20}  {value}")
    shape = _shape(a)
    print(f"\nimplementations at {shape.describe()}:")
    for name, backend in REGISTRY.items():
        why = backend.unmet(shape, info)
        print(f"  {'no ' if why else 'yes':3}  {name:<11} {why or ''}")
    return 0


def cmd_compare(a) -> int:
    from attnlab.measure import runs

    shape = _shape(a)
    df = runs.to_frame(runs.run(shape, a.impl, accuracy=True, timed=True))
    notes = df["reference_note"].dropna().unique()
    if len(notes):
        print(f"float64 reference: {notes[0]}")
    _print(df, ["implementation", "status", "max_abs_error", "relative_error", "allclose", "compile_ms",
                "wall_ms", "throughput_ms", "device_ms", "kernel_count", "tflops", "pct_of_peak", "temp_bytes", "reason"])
    ok = df[df.status == runs.OK]
    return 0 if ok["allclose"].fillna(False).astype(bool).all() else 1


def cmd_sweep(a) -> int:
    from attnlab.backends import REGISTRY
    from attnlab.measure import runs

    base = _shape(a)
    values, bad = [], []
    for raw in a.values:
        try:
            value = int(raw)
        except ValueError:
            bad.append(f"{raw!r} is not a whole number")
            continue
        s = base.replace(**{a.over: value})
        if a.over == "q_len" and base.q_len == base.kv_len:
            s = s.replace(kv_len=value)
        problems = s.validate()
        (bad.append(f"{a.over}={value}: {' '.join(problems)}") if problems else values.append(value))
    if bad:
        raise SystemExit("invalid sweep values:\n  " + "\n  ".join(bad))
    _writable(a.csv, a.json)
    results = []
    for r in runs.sweep(base, a.over, values, a.impl or list(REGISTRY), accuracy=False, timed=True,
                        backward=a.backward):
        results.append(r)
        print(f"  {a.over}={getattr(r.shape, a.over):<8} {r.implementation:<11} {r.status}", file=sys.stderr)
    df = runs.to_frame(results)
    if a.csv:
        df.to_csv(a.csv, index=False)
    if a.json:
        df.to_json(a.json, orient="records", indent=1)
    _print(df, [a.over, "implementation", "status", "wall_ms", "throughput_ms", "device_ms", "tflops",
                "device_tflops", "pct_of_peak", "temp_bytes", "reason"])
    return 0


def cmd_bench(a) -> int:
    from attnlab.studies import suite

    _writable(a.out)
    t0 = time.perf_counter()
    result = suite.run(quick=a.quick, log=lambda s: print(f"[{time.perf_counter() - t0:5.0f} s] {s}", file=sys.stderr, flush=True))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result.to_json(), f, indent=1, default=str)
    print("\n".join(suite.summary(result)))
    return 0


def cmd_ladder(a) -> int:
    from attnlab.studies import ladder

    _writable(a.out)
    t0 = time.perf_counter()
    result = ladder.run_all(a.out, log=lambda s: print(f"[{time.perf_counter() - t0:5.0f} s] {s}", file=sys.stderr,
                                                       flush=True))
    print("\n".join(ladder.summary(result)))
    return 0


def cmd_decode(a) -> int:
    from attnlab.measure import runs
    from attnlab.studies import kvcache, suite

    _writable(a.out)
    t0 = time.perf_counter()
    log = lambda s: print(f"[{time.perf_counter() - t0:5.0f} s] {s}", file=sys.stderr, flush=True)  # noqa: E731
    kv_lens = a.kv_lens or ((256, 1024) if a.quick else kvcache.STUDY_KV_LENS)
    bases = {k: v for k, v in kvcache.study_bases().items() if not a.quick or v == AttentionShape()}
    rows = kvcache.decode_study(kv_lens, bases=bases, log=log)
    result = suite.SuiteRun(suite.environment(), suite.ceilings(), {"decode": rows})
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result.to_json(), f, indent=1, default=str)
    _print(pd.DataFrame(rows), ["base", "variant", "kv_len", "implementation", "status", "device_ms",
                                "throughput_ms", "kv_read_bytes", "kv_read_gb_per_s"])
    return 0 if any(r["status"] == runs.OK for r in rows) else 1


def cmd_warm(a) -> int:
    from attnlab.studies import warm

    seconds = warm.warm(log=print)
    print(f"warm: the codelab's shape (every backend that runs here) and the model presets (the codelab's "
          f"implementations) compiled and checked in {seconds:.1f} s")
    return 0


def cmd_gpucheck(a) -> int:
    """GPU-marked tests (core and pages), then the suite; the summary table is printed last."""
    import jax

    if jax.default_backend() != "gpu":
        print(f"gpucheck needs a GPU; JAX's backend here is {jax.default_backend()}.")
        return 2
    out = a.out or "gpucheck"
    os.makedirs(out, exist_ok=True)
    common = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors"]
    tests = subprocess.run(common + ["-m", "gpu", f"--junitxml={out}/gpu-tests.xml", "tests"],
                           text=True, capture_output=True)
    log = tests.stdout + tests.stderr
    if importlib.util.find_spec("streamlit"):  # the page tests too (the GPU image may need it carried)
        pages = subprocess.run(common + ["-m", "not gpu and not browser and not load", f"--junitxml={out}/page-tests.xml",
                                         "tests/pages"],
                               text=True, capture_output=True)
        log += "\n--- page tests (AppTest) ---\n" + pages.stdout + pages.stderr
    else:
        pages = None
        log += "\n--- page tests skipped: streamlit is not importable here ---\n"
    with open(f"{out}/gpu-tests.log", "w") as f:
        f.write(log)
    print(tests.stdout[-3000:])
    a.out, a.quick = f"{out}/results.json", False
    rc = cmd_bench(a)
    last = lambda p: ([ln for ln in p.stdout.splitlines() if ln.strip()][-1:] or ["(no pytest output)"])[0]  # noqa: E731
    print(f"GPU tests: {last(tests)}")
    print(f"page tests: {last(pages) if pages else 'skipped (no streamlit)'}")
    return tests.returncode or (pages.returncode if pages else 0) or rc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnlab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("info", help="device and which implementations can run a shape")
    _shape_args(s)
    s.set_defaults(func=cmd_info)
    s = sub.add_parser("compare", help="every implementation at one shape")
    _shape_args(s)
    s.add_argument("--impl", nargs="*", help="registry names (default: all)")
    s.set_defaults(func=cmd_compare)
    s = sub.add_parser("sweep", help="sweep one field")
    _shape_args(s)
    s.add_argument("--over", required=True, choices=["batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim"])
    s.add_argument("--values", nargs="+", required=True)
    s.add_argument("--impl", nargs="*", help="registry names (default: all)")
    s.add_argument("--backward", action="store_true", help="time forward+backward (jax.grad)")
    s.add_argument("--csv")
    s.add_argument("--json")
    s.set_defaults(func=cmd_sweep)
    s = sub.add_parser("bench", help="the benchmark suite")
    s.add_argument("--out", help="write the full results as JSON here")
    s.add_argument("--quick", action="store_true", help="a small subset (CPU-sized)")
    s.set_defaults(func=cmd_bench)
    s = sub.add_parser("ladder", help="the ladder XLA -> cuDNN, masks, DRAM bytes (page 10)")
    s.add_argument("--out", help="write the results as JSON here (attnlab/shipped/h200_ladder.json)")
    s.set_defaults(func=cmd_ladder)
    s = sub.add_parser("decode", help="a decode step of MHA, GQA and MQA over cache lengths (page 8)")
    s.add_argument("--out", help="write the results as JSON here (attnlab/shipped/h200_decode.json)")
    s.add_argument("--kv-lens", dest="kv_lens", nargs="+", type=int, help="cache lengths (default 4096 16384 65536 131072)")
    s.add_argument("--quick", action="store_true", help="the default shape only, short caches (CPU-sized)")
    s.set_defaults(func=cmd_decode)
    s = sub.add_parser("warm", help="compile the codelab's shape for every backend (what a server does at start)")
    s.set_defaults(func=cmd_warm)
    s = sub.add_parser("gpucheck", help="GPU tests + suite + summary (GPU machine)")
    s.add_argument("--out", help="folder for the logs and results.json")
    s.set_defaults(func=cmd_gpucheck)
    a = p.parse_args(argv)
    if getattr(a, "impl", None):
        from attnlab.backends import REGISTRY

        for n in a.impl:
            if n not in REGISTRY:
                p.error(f"unknown implementation {n!r}; choose from {', '.join(REGISTRY)}")
    try:
        return a.func(a)
    except KeyboardInterrupt:
        return 130
    except OSError as e:  # a file that could not be written after all, a full disk
        print(f"error: {e.strerror or e}: {e.filename or ''}", file=sys.stderr)
        return 1
    except Exception as e:  # anything else: one line, never a traceback (runs words their own failures)
        from attnlab.backends.base import error_text

        print(f"error: {error_text(e)}", file=sys.stderr)
        return 1
