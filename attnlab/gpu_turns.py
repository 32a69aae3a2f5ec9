"""Whose turn it is on this process's GPU: building programs, or running them.

On the H200 a server process aborted while one thread ran a program and two others compiled:
the running program's synchronisation was refused because a CUDA stream capture was open in the
process (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, a fatal check in XLA), and nothing but the two
compiles was running then. So, inside one process, programs are built side by side (lowering,
compiling: the slow part of a new shape, which XLA does without Python's lock), and device work
runs only when no program is being built, one thread at a time. Other processes have CUDA
contexts of their own and are not held. A thread that holds the device may build (it waits for
nobody); a thread that wants the device goes before builders that come after it, so a
measurement is never starved by compiles.
"""

from __future__ import annotations

import contextlib
import threading


class Turns:
    def __init__(self):
        self._cond = threading.Condition()
        self._builders = 0
        self._runner: int | None = None  # the thread that holds the device
        self._depth = 0
        self._wanting = 0
        self._building = threading.local()  # how deep this thread is in building()

    @contextlib.contextmanager
    def building(self):
        """Lower or compile a program: side by side with other builders, never while device work runs."""
        me, depth = threading.get_ident(), getattr(self._building, "depth", 0)
        # the device's holder builds what it needs to run; a builder may build inside a build
        pass_through = depth or self._runner == me
        if not pass_through:
            with self._cond:
                self._cond.wait_for(lambda: self._runner is None and not self._wanting)
                self._builders += 1
        self._building.depth = depth + 1
        try:
            yield
        finally:
            self._building.depth = depth
            if not pass_through:
                with self._cond:
                    self._builders -= 1
                    self._cond.notify_all()

    @contextlib.contextmanager
    def running(self):
        """Use the device (run, copy, synchronise): alone in this process, once builds in flight finish."""
        me = threading.get_ident()
        if getattr(self._building, "depth", 0) and self._runner != me:
            raise RuntimeError("a thread that is building a program cannot wait for the device (it would wait for itself)")
        with self._cond:
            if self._runner != me:
                self._wanting += 1
                try:
                    self._cond.wait_for(lambda: self._runner is None and self._builders == 0)
                finally:
                    self._wanting -= 1
                self._runner = me
            self._depth += 1
        try:
            yield
        finally:
            with self._cond:
                self._depth -= 1
                if not self._depth:
                    self._runner = None
                    self._cond.notify_all()


TURNS = Turns()
