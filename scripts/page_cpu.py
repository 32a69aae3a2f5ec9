#!/usr/bin/env python
"""CPU seconds a cached visit of each page costs the server: one learner, one process, no browser.

    .venv/bin/python scripts/page_cpu.py [--passes 3]

One AppTest session of app.py opens every page once (so its results are cached), then visits every
page `--passes` more times; the process's user + system CPU time (resource.getrusage) around each
visit is summed per page. On one server, page scripts share one Python interpreter lock, so this
is the budget a class spends on pages it already computed: scripts/capacity.py measures the class.
A benchmark, not a test: it prints and judges nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
from pathlib import Path

ROOT = Path(os.environ.get("ATTNLAB_ROOT") or Path(__file__).resolve().parents[1])  # the app to measure


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("ATTNLAB_WARM", "0")  # no background warm-up competing for the CPU
    from streamlit.testing.v1 import AppTest

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from capacity import discover_pages, server_like_apptest

    server_like_apptest()  # one ScriptCache, as a server has: page scripts are compiled once, not per visit
    pages = discover_pages()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.run()
    for page in pages:  # compute and cache every page's results first
        at.switch_page(page)
        at.run()
    spent = dict.fromkeys(pages, 0.0)
    for _ in range(args.passes):
        for page in pages:
            start = cpu_s()
            at.switch_page(page)
            at.run()
            spent[page] += cpu_s() - start
    per_pass = sum(spent.values()) / args.passes
    print(f"one cached pass over {len(pages)} pages: {per_pass:.2f} s of CPU (mean of {args.passes})")
    for page, s in spent.items():
        print(f"  {Path(page).stem:24} {s / args.passes:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
