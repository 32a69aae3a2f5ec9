#!/usr/bin/env python
"""How long a learner waits for Check: the lab's solution checked on page 4, as a browser's session asks (AppTest).

    python scripts/check_latency.py                 # 6 checks on an idle machine
    python scripts/check_latency.py --busy 4 -n 2   # with 4 busy loops beside it (a server's other work, CI's load)

Each check sends a new text (the solution and a comment), so no kept answer serves it: the device worker's sandbox
traces it (attnlab/yourturn/sandbox.py), then the worker checks it at every case against float64. The first
includes the worker's start. Prints the first, then the median and worst of the rest."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=6, help="checks")
    ap.add_argument("--busy", type=int, default=0, help="busy loops (processes) beside it")
    args = ap.parse_args()
    from attnlab.yourturn import exercises
    from tests.apptest_util import button, open_page

    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        at = open_page("pages/p4_naive_vs_fused.py")
        times = []
        for i in range(args.n):
            at.text_area(key="yt_attention_code").set_value(exercises.ATTENTION.solution + f"\n# try {i}\n")
            start = time.monotonic()
            button(at, "yt_attention_check").click().run()
            times.append(time.monotonic() - start)
            if not any("Right at every case" in s.value for s in at.success):
                print("not passed:", [w.value for w in at.warning] + [e.value for e in at.error])
                return 1
    finally:
        for p in loops:
            p.kill()
    rest = times[1:] or times
    print(f"{args.n} checks, {args.busy} busy loops: first {times[0]:.2f} s; then median "
          f"{statistics.median(rest):.2f} s, worst {max(rest):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
