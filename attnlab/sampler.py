"""Where a server process's page runs spend their time: a sampling profiler for benchmarks.

    ATTNLAB_SAMPLE_TO=DIR streamlit run app.py     # each process writes DIR/sample-<pid>.json

Every `interval` seconds it looks at the stack of every thread that runs a page (Streamlit's
script threads) or compiles for one, and counts (where, what): the innermost frame of the lab's
own code (attnlab/ or pages/) and the innermost Python frame of all (for example queue.py:slot
and threading.py:wait: waiting for the device). A sample is taken when this thread holds Python's
interpreter lock, so time in C that keeps the lock is seen as the Python frame that called it.
Off unless asked for; never used to decide anything.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

THREADS = ("ScriptRunner", "attnlab-compile")  # name prefixes of the threads sampled


def where(frame) -> tuple[str, str]:
    """(innermost frame of attnlab/ or pages/, innermost frame), each as 'file.py:function'."""
    name = lambda f: f"{Path(f.f_code.co_filename).name}:{f.f_code.co_name}"  # noqa: E731
    what, ours = name(frame), "elsewhere"
    while frame is not None:
        path = frame.f_code.co_filename
        if f"{os.sep}attnlab{os.sep}" in path or f"{os.sep}pages{os.sep}" in path:
            ours = name(frame)
            break
        frame = frame.f_back
    return ours, what


def start(folder: str | os.PathLike, interval: float = 0.02, write_every: float = 5.0,
          active: Callable[[], bool] = lambda: True) -> threading.Thread:
    """Sample in a daemon thread; rewrite folder/sample-<pid>.json every `write_every` seconds. Only while
    `active()`: the app counts only while a learner's page runs, so a warm-up alone leaves no samples."""
    out = Path(folder) / f"sample-{os.getpid()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    counts: collections.Counter = collections.Counter()

    def loop():
        last = time.monotonic()
        while True:
            time.sleep(interval)
            frames = sys._current_frames() if active() else {}
            for t in threading.enumerate():
                if t.name.startswith(THREADS) and t.ident in frames:
                    ours, what = where(frames[t.ident])
                    if what != "thread.py:_worker":  # an idle compile thread, waiting for work
                        counts[(t.name.split(".")[0].rstrip("_0123456789"), ours, what)] += 1
            if time.monotonic() - last > write_every:
                last = time.monotonic()
                rows = [{"thread": k[0], "ours": k[1], "innermost": k[2], "samples": n}
                        for k, n in counts.most_common()]
                tmp = out.with_suffix(".tmp")
                tmp.write_text(json.dumps({"interval_s": interval, "rows": rows}))
                tmp.replace(out)

    thread = threading.Thread(target=loop, name="attnlab-sampler", daemon=True)
    thread.start()
    return thread
