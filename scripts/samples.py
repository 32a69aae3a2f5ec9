#!/usr/bin/env python
"""Summarise the sampling profiler's files (ATTNLAB_SAMPLE_TO=DIR, attnlab/sampler.py): where the
page threads of every server process spent their time, as shares of all samples.

    python scripts/samples.py DIR [--top 25]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    pairs: collections.Counter = collections.Counter()
    for f in sorted(args.folder.glob("sample-*.json")):
        for r in json.loads(f.read_text())["rows"]:
            pairs[(r["thread"], r["ours"], r["innermost"])] += r["samples"]
    total = sum(pairs.values())
    if not total:
        print(f"no samples in {args.folder}")
        return 1
    for title, key in (("by thread and the lab's frame", lambda k: k[:2]), ("by innermost frame", lambda k: k[2:]),
                       ("by all three", lambda k: k)):
        grouped: collections.Counter = collections.Counter()
        for k, n in pairs.items():
            grouped[key(k)] += n
        print(f"\n{title} ({total} samples):")
        for k, n in grouped.most_common(args.top):
            print(f"  {100 * n / total:5.1f}%  {'  '.join(k)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
