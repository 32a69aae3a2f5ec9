"""Learners' programs that crashed or hung the device worker: remembered by hash, refused at once next time.

    with suspects.running(digest):          # around a learner's compile and run, in the device worker
        ...
    suspects.refusal(digest)  ->  None, or the sentence that refuses a program that crashed a worker before
    suspects.left_by(pid, how) ->  the programs a dead worker had in flight (its supervisor asks, then counts)

While a learner's program is compiled or run, a file names it (`<digest>.<pid>.<n>.run` in `folder()`). A
worker that ends normally removes it; one a native abort or the watchdog ends leaves it, and whoever sees the
death first (the child's supervisor, or the next worker in the same place) turns it into `<digest>.bad` with
how the worker died. A program alone in flight at a death is bad at once; one of several at its second such
death (a program that merely ran beside the crashing one is not refused). Files, not memory: the next worker
(a restarted child or Ray actor) reads the same folder.

The watchdog ends the worker (SIGKILL) when a learner's program has been in flight longer than `bound_s`: a
device call cannot be stopped half way, and a held worker holds the class's device. Its marker stays."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import tempfile
import threading
import time

_COUNT = itertools.count()
_WATCH: dict[str, tuple[float, float]] = {}  # marker -> (start, bound_s)
_LOCK = threading.Lock()
_WATCHING: list[threading.Thread] = []


def folder(where: str | None = None) -> str:
    """Markers' folder: `where`, else ATTNLAB_SUSPECTS_DIR (set per app by the supervisor), else per user."""
    path = where or os.environ.get("ATTNLAB_SUSPECTS_DIR") or os.path.join(tempfile.gettempdir(),
                                                                            f"attnlab-suspects-{os.getuid()}")
    os.makedirs(path, exist_ok=True)
    return path


@contextlib.contextmanager
def running(digest: str, bound_s: float | None = None):
    """Mark `digest` in flight in this process while the block runs (compile and run of a learner's program)."""
    name = f"{digest}.{os.getpid()}.{next(_COUNT)}.run"
    path = os.path.join(folder(), name)
    with open(path, "w") as f:
        f.write(str(time.time()))
    if bound_s:
        _watch(path, bound_s)
    try:
        yield
    finally:
        with _LOCK:
            _WATCH.pop(path, None)
        with contextlib.suppress(OSError):
            os.remove(path)


def refusal(digest: str) -> str | None:
    """The sentence refusing a program that crashed or hung a device worker before; None for any other."""
    _sweep()
    try:
        with open(os.path.join(folder(), f"{digest}.bad")) as f:
            how = f.read().strip()
    except OSError:
        return None
    return (f"this very program stopped the device worker when it ran before ({how}), so the lab does not run it "
            "again: change the code (look for huge shapes, or far more work than the exercise needs)")


def left_by(pid: int, how: str, where: str | None = None) -> tuple[list[str], str]:
    """The digests of the learner's programs the dead worker `pid` had in flight, now remembered as bad (or
    suspect), and how it died in words (the watchdog's, when it ended it); ([], how) when it had none."""
    base = folder(where)
    found = [n for n in _markers(base) if n.split(".")[1] == str(pid)]
    for n in found:
        with contextlib.suppress(OSError):
            with open(os.path.join(base, n)) as f:
                held = f.read().splitlines()[1:]  # the watchdog's words, when it ended the worker
            if held:
                how = f"it {held[0]}, so the worker was ended"
            os.remove(os.path.join(base, n))
    digests = sorted({n.split(".")[0] for n in found})
    for d in digests:
        _remember(os.path.join(base, d), how, alone=len(digests) == 1)
    return digests, how


def _markers(base: str | None = None) -> list[str]:
    try:
        return [n for n in os.listdir(base or folder()) if n.endswith(".run") and n.count(".") == 3]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _sweep() -> None:
    """Markers left by workers that are gone (a Ray actor restarted, with no supervisor to ask): remembered."""
    dead = {int(pid) for pid in {n.split(".")[1] for n in _markers()} if pid.isdigit() and not _alive(int(pid))}
    for pid in dead:
        left_by(pid, "the device worker died while it ran")


def _remember(base: str, how: str, alone: bool) -> None:
    if not alone:
        seen = os.path.exists(base + ".suspect")
        if not seen:
            with open(base + ".suspect", "w") as f:
                f.write(how)
            return
    with open(base + ".bad", "w") as f:
        f.write(how)


def _watch(path: str, bound_s: float) -> None:
    with _LOCK:
        _WATCH[path] = (time.monotonic(), bound_s)
        if not _WATCHING or not _WATCHING[0].is_alive():
            t = threading.Thread(target=_watchdog, name="attnlab-learner-watchdog", daemon=True)
            _WATCHING[:] = [t]
            t.start()


def _watchdog() -> None:
    while True:
        time.sleep(0.5)
        with _LOCK:
            over = [(p, b) for p, (start, b) in _WATCH.items() if time.monotonic() - start > b]
        if over:
            path, bound = over[0]
            with contextlib.suppress(OSError), open(path, "a") as f:
                f.write(f"\nheld the device worker past {bound:.0f} s")
            print(f"attnlab: a learner's program held this worker past {bound:.0f} s: ending the worker "
                  f"({os.path.basename(path)})", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
