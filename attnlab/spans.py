"""The timing log: with ATTNLAB_TIMING_LOG=path, each device turn, build, compile, part of a turn and timing appends
one line, 'start end thread pid kind [what]', on one monotonic clock for the machine's processes.

Read by scripts/load_test.device_rule (no timing shared the device) and scripts/request_log.py --spans (where a
class's seconds went on the device's line).
"""

from __future__ import annotations

import os
import threading


def log_span(kind: str, start: float, end: float, what: str = "") -> None:
    """Append this span to ATTNLAB_TIMING_LOG, if set; never fails a run over it (a diagnostic only)."""
    from attnlab.settings import settings

    path = settings().timing_log
    if path:
        try:
            with open(path, "a") as f:
                f.write(f"{start:.6f} {end:.6f} {threading.get_ident()} {os.getpid()} {kind}{' ' + what if what else ''}\n")
        except OSError:
            pass
