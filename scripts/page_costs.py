#!/usr/bin/env python
"""What each page costs the server the first time anyone opens it at a shape: seconds, and the XLA
compiles inside them (how many, their sum, the longest, and which code asked).

    python scripts/page_costs.py                      # two new shapes, every page, this process cold
    ATTNLAB_COMPILE_THREADS=1 python scripts/page_costs.py   # the same with compiles one after another

One AppTest session per page, in one process with no compilation cache, so every shape is new to it.
Why: the slowest pages of a class are the ones nobody has opened yet at a learner's shape
(scripts/capacity.py measures the class); this says which pages and which compiles they wait for.
A benchmark, not a test: it prints and judges nothing.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPES = (
    {"batch": "2", "q_len": "72", "kv_len": "72", "heads": "8", "kv_heads": "2", "head_dim": "64", "dtype": "bfloat16"},
    {"batch": "1", "q_len": "136", "kv_len": "136", "heads": "4", "kv_heads": "4", "head_dim": "128",
     "dtype": "bfloat16", "causal": "true"},
    {"batch": "3", "q_len": "200", "kv_len": "200", "heads": "8", "kv_heads": "1", "head_dim": "64", "dtype": "float16"},
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=int, default=2, help=f"how many of the {len(SHAPES)} new shapes")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
    os.environ.setdefault("ATTNLAB_WARM", "0")
    # the device work in this process: its compiles are what the listener below counts (with the default, a child
    # worker's, it counted none and the pages' seconds were the round trips')
    os.environ.setdefault("ATTNLAB_DEVICE", "inprocess")
    os.environ.setdefault("ATTNLAB_RESULTS_DIR", f"/tmp/attnlab-page-costs-{os.getpid()}")  # an empty store
    os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
    import jax.monitoring
    from capacity import discover_pages
    from streamlit.testing.v1 import AppTest

    from attnlab.measure import compiled

    now: collections.Counter = collections.Counter()
    askers: collections.Counter = collections.Counter()

    def listen(event, secs, **kw):
        if event.endswith("backend_compile_duration"):
            now["compiles"] += 1
            now["compile_s"] += secs
            now["longest_s"] = max(now["longest_s"], secs)
            ours = [f for f in traceback.extract_stack() if "/attnlab/" in f.filename or "/pages/" in f.filename]
            askers[f"{Path(ours[-1].filename).name}:{ours[-1].name}" if ours else "elsewhere"] += secs

    jax.monitoring.register_event_duration_secs_listener(listen)
    rows = []
    print(f"compile threads: {compiled.compile_threads()}; device: {jax.devices()[0].device_kind}", flush=True)
    for params in SHAPES[: args.shapes]:
        for page in discover_pages():
            at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=900)
            for k, v in params.items():
                at.query_params[k] = v
            at.run()
            now.clear()
            askers.clear()
            t0 = time.perf_counter()
            at.switch_page(page)
            at.run()
            row = {"shape": " ".join(f"{k}={v}" for k, v in params.items()), "page": Path(page).stem,
                   "seconds": time.perf_counter() - t0, "compiles": now["compiles"], "compile_s": now["compile_s"],
                   "longest_compile_s": now["longest_s"], "exceptions": len(at.exception),
                   "asked_by": dict(askers.most_common(4))}
            rows.append(row)
            print(f"{row['page']:22s} {row['seconds']:6.2f} s  compiles {row['compiles']:3d} "
                  f"({row['compile_s']:5.2f} s, longest {row['longest_compile_s']:4.2f} s)  "
                  + ", ".join(f"{k} {v:.1f}" for k, v in row["asked_by"].items()), flush=True)
    per_page = collections.defaultdict(list)
    for r in rows:
        per_page[r["page"]].append(r["seconds"])
    print("\npage: seconds per new shape (mean)")
    for page, secs in sorted(per_page.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {page:22s} {sum(secs) / len(secs):6.2f}")
    print(f"all pages, one new shape: {sum(r['seconds'] for r in rows) / args.shapes:.1f} s; "
          f"compiles {sum(r['compiles'] for r in rows) / args.shapes:.0f}")
    if args.json:
        args.json.write_text(json.dumps({"compile_threads": compiled.compile_threads(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
