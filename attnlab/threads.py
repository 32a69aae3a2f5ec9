"""Many threads in one process: how the two processes that serve a class share their interpreter.

The UI server runs each learner's page in a thread, the device worker each request. A thread that lets go
of the GIL for a short call into C waits a busy thread's switch interval (5 ms) to get it back: the convoy.
pandas ≥ 3 keeps strings in pyarrow, whose kernels let go of the GIL, so each small DataFrame operation paid
that. `serve_many_threads()`, set at the start of the UI server (serve.py) and in every device worker before its first
table (`serve_many_threads_once_imported`, service.worker.DeviceWorker), keeps strings as Python objects, changing
no value a page shows; the switch interval stays at Python's default (shorter made the class slower), except in a
device worker while a run holds the device (`held_turn`).
Measurements: docs/design-notes.md. A device worker imports no pandas to start (0.4 s of the 1.4 s its imports
took here, on the path of a restarted worker's first page): the run layer makes no table, and an entry point
that makes one imports pandas with its module, after which the worker sets this before calling it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings

_SET = [False]  # whether serve_many_threads() ran in this process


def serve_many_threads() -> None:
    """Set this process up to serve many threads at once: pandas's object strings (the module's docstring says why)."""
    import pandas as pd

    with warnings.catch_warnings():  # pandas 3 warns that the option goes in pandas 4; until then it is the fix
        warnings.simplefilter("ignore")
        try:
            pd.set_option("future.infer_string", False)
        except (KeyError, pd.errors.OptionError):  # a pandas without the option: nothing to set
            pass
    _SET[0] = True


def serve_many_threads_once_imported() -> None:
    """`serve_many_threads()` once pandas is imported (a device worker, before each entry point it calls); else
    nothing, and no import of pandas."""
    if not _SET[0] and "pandas" in sys.modules:
        serve_many_threads()


def serving_many_threads() -> bool:
    """Whether `serve_many_threads()` holds in this process."""
    import pandas as pd

    return pd.Series(["a"]).dtype == object


@contextlib.contextmanager
def held_turn():
    """While a run holds the device: Python's switch interval ATTNLAB_TURN_SWITCH_S (0.1 ms), not 5 ms. A turn is
    mostly calls into C (the device, XLA, NumPy), and after each its thread takes the GIL back from whichever thread
    is busy in Python (a lowering, a trace), which keeps it for up to the switch interval. On this CPU a check's turn
    held the device 39 ms alone, 404 ms beside one thread lowering programs and 92 ms with 0.1 ms, the lowerings
    going faster, 45 -> 56 a second (scripts/gil_turns.py, deploy/measurements/cpu_gil_turns_2026-12-06.json). On an
    H100, as a class of 20 moved to new shapes, it halved the device held per run (0.24-0.26 s -> 0.11-0.13 s;
    deploy/measurements/h100_turn_switch_ab_2026-12-06/). The first holder sets it and the last puts Python's back
    (a process has one `Device`; a test may hold several)."""
    from attnlab.settings import settings

    interval = settings().turn_switch_s
    if not interval:
        yield
        return
    with _HOLDERS_LOCK:
        if not _HOLDERS:
            _HOLDERS.append(sys.getswitchinterval())
            sys.setswitchinterval(interval)
        _HOLDERS.append(interval)
    try:
        yield
    finally:
        with _HOLDERS_LOCK:
            _HOLDERS.pop()
            if len(_HOLDERS) == 1:
                sys.setswitchinterval(_HOLDERS.pop())


_HOLDERS: list[float] = []  # Python's own interval first, then one entry per turn held now
_HOLDERS_LOCK = threading.Lock()
