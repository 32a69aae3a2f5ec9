#!/usr/bin/env python
"""Sum up py-spy's samples of a served class (ATTNLAB_SAMPLE_TO=DIR python scripts/capacity.py --serve K ...,
which records DIR/<class>/pyspy-<pid>.txt): where the threads doing the lab's work waited, as shares of
their samples.

    python scripts/samples.py DIR [--top 25] [--inside runs.py:_run_held]

Counted: page threads (Streamlit's ScriptRunner), compile threads at work, and threads serving a device
worker's request (a frame of attnlab/service/worker.py); idle pools and the threads that only wait for
messages (a worker's main loop, the reader of its pipe, the warm-up waiting for quiet) are not.
What py-spy's own views do not give: these threads alone, grouped by the innermost frame of the lab's own
code (what it was doing) beside the innermost frame of all (where it waited).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attnlab.procs import Frame, Stack, read_raw  # noqa: E402

OURS = (f"{os.sep}attnlab{os.sep}", f"{os.sep}pages{os.sep}")
SERVING = f"{os.sep}attnlab{os.sep}service{os.sep}worker.py"  # a device worker's request, in any of its homes


def name(f: Frame) -> str:
    return f"{Path(f.path).name}:{f.function.rsplit('.', 1)[-1]}"


def key(stack: Stack, inside: str | None = None) -> tuple[str, str, str] | None:
    """(thread, the lab's innermost frame or "elsewhere", the innermost frame), or None for a thread not counted:
    counted are page threads, compile threads at work, and threads serving a device worker's request. With `inside`
    ("runs.py:_run_held", say), only stacks through that frame, and the lab's frame with its line (which part)."""
    if not stack.frames or (inside and not any(name(f) == inside for f in stack.frames)):
        return None
    ours = next((f for f in reversed(stack.frames) if any(k in f.path for k in OURS) and "-packages" not in f.path), None)
    thread = stack.thread.split(".")[0].rstrip("_-0123456789") or "?"
    serving = any(f.path.endswith(SERVING) for f in stack.frames)
    if not (thread == "ScriptRunner" or (thread == "attnlab-compile" and ours) or serving):
        return None
    lab = (f"{name(ours)}:{ours.line}" if inside else name(ours)) if ours else "elsewhere"
    return thread, lab, name(stack.frames[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--inside", metavar="FILE:FUNCTION", help="only the samples inside this frame, the lab's frames "
                    "with their lines: 'runs.py:_run_held' is where a device turn's time went")
    args = ap.parse_args(argv)
    counts: collections.Counter = collections.Counter()
    for f in sorted(args.folder.rglob("pyspy-*.txt")):
        for s in read_raw(f):
            if (k := key(s, args.inside)) is not None:
                counts[k] += s.count
    total = sum(counts.values())
    if not total:
        print(f"no samples in {args.folder}")
        return 1
    for title, part in (("by thread and the lab's frame", lambda k: k[:2]), ("by innermost frame", lambda k: k[2:]),
                        ("by all three", lambda k: k)):
        grouped: collections.Counter = collections.Counter()
        for k, n in counts.items():
            grouped[part(k)] += n
        print(f"\n{title} ({total} samples):")
        for k, n in grouped.most_common(args.top):
            print(f"  {100 * n / total:5.1f}%  {'  '.join(k)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
