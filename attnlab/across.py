"""The device between server processes (`serve.py --workers K`): one lock file on the machine.

queue.DEVICE orders the runs of one process; this orders the processes: a compute run holds the
file shared, a timing run holds it alone, as the queue does inside a process (ATTNLAB_DEVICE_LOCK).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time

from attnlab import waiting


class AcrossProcesses:
    """The device between server processes, through a lock file (flock): compute runs hold it
    shared, a timing run alone. A run waiting to time holds a gate (a second file) that new runs
    pass through, so a stream of short compute runs from other processes cannot starve it. Every
    run that waits, here or in its own process's queue, leaves a mark in a folder beside the lock
    while it waits, so a timing knows how many wait behind it in all processes (`waiting`)."""

    def __init__(self, path: str, busy: type[Exception] = TimeoutError):
        self.path, self.busy = path, busy  # `busy`: raised when the wait passes its deadline
        self.marks = path + ".waiting"

    @contextlib.contextmanager
    def hold(self, exclusive: bool, deadline: float):
        with open(self.path + ".gate", "a+b") as gate, open(self.path, "a+b") as dev:
            self._lock(gate, fcntl.LOCK_EX, deadline)
            try:
                self._lock(dev, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline)
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)
            try:
                yield
            finally:
                fcntl.flock(dev, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def mark(self):
        """This thread waits for the device (seen by every process's `waiting`)."""
        os.makedirs(self.marks, exist_ok=True)
        path = os.path.join(self.marks, f"{os.getpid()}-{threading.get_ident()}")
        open(path, "w").close()
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.remove(path)

    def waiting(self) -> int:
        """Runs waiting for the device in every server process (marks of processes still alive)."""
        try:
            names = os.listdir(self.marks)
        except OSError:
            return 0
        return sum(_alive(int(n.split("-")[0])) for n in names if n.split("-")[0].isdigit())

    def _lock(self, f, op: int, deadline: float) -> None:
        try:
            fcntl.flock(f, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        waiting.about_to_wait()
        pause = 0.001
        with self.mark():
            while True:
                try:
                    fcntl.flock(f, op | fcntl.LOCK_NB)
                    return
                except BlockingIOError:
                    if time.perf_counter() > deadline:
                        raise self.busy("Another server process kept the GPU too long. Try again shortly.") from None
                    time.sleep(pause)
                    pause = min(pause * 2, 0.01)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True
