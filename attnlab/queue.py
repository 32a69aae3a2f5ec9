"""One GPU, many learners: admission by memory, and the device to oneself while timing.

Every run asks `DEVICE` for what it will hold (device bytes and host bytes) before it allocates
anything (reading what the compiler made allocates nothing and asks for nothing). Runs that only
compute (an output to check) share the device as long as their bytes fit the budget together; a
timing run waits until it has the device to itself, so no learner's timing is disturbed by
another's work. Requests are served in order of arrival. Inside one process, admitted runs then
use the device one thread at a time, and never while that process compiles (attnlab/gpu_turns.py:
CUDA refuses it). A request bigger than the whole budget is refused at once with a sentence; one
that would wait behind too many others, or too long, gets `DeviceBusy`. Both are expected events
a page shows as a message.

Budgets: `ATTNLAB_MEMORY_LIMIT_GIB` if set (for the whole server); else 80% of the GPU's free memory and half of the
host's available memory (on the CPU backend, device arrays live in host memory: one budget).

Several server processes on one GPU (`serve.py --workers K`, which sets ATTNLAB_WORKERS and
ATTNLAB_DEVICE_LOCK): each process gets 1/K of the budget, and a lock file extends "the device to
oneself" across them (attnlab/across.py): compute runs hold it shared, a timing run alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections import deque
from collections.abc import Callable

from attnlab import waiting
from attnlab.across import AcrossProcesses
from attnlab.gpu_turns import TURNS, Turns
from attnlab.shapes import GIB, format_bytes


class DeviceBusy(RuntimeError):
    """The queue is full or the wait was too long: the learner tries again shortly."""


class OverBudget(ValueError):
    """One run needs more memory than the whole budget: it can never be admitted."""


def _cgroup_memory_left() -> int | None:
    """Bytes this process's memory cgroup (v2 or v1) may still grow by, or None without a limit."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            limit, used = f"/sys/fs/cgroup{path}/memory.max", f"/sys/fs/cgroup{path}/memory.current"
        elif "memory" in controllers.split(","):
            base = f"/sys/fs/cgroup/memory{path}"
            limit, used = f"{base}/memory.limit_in_bytes", f"{base}/memory.usage_in_bytes"
        else:
            continue
        try:
            with open(limit) as f:
                raw = f.read().strip()
            with open(used) as f:
                current = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if raw.isdigit() and int(raw) < 2**60:
            return int(raw) - current
    return None


def host_available_bytes() -> int:
    """Memory this process may still use: its cgroup's limit (a container) or MemAvailable, the smaller."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    left = _cgroup_memory_left()
    if left is not None:
        avail = left if avail is None else min(avail, left)
    return avail if avail is not None else 8 * GIB


@dataclasses.dataclass(frozen=True)
class Budget:
    device_bytes: int
    host_bytes: int
    shared: bool  # the CPU backend: device arrays are host memory, so both count against host_bytes
    source: str = ""  # where the figures come from, said with a refusal (they differ between machines and starts)

    @classmethod
    def here(cls) -> Budget:
        env = os.environ.get("ATTNLAB_MEMORY_LIMIT_GIB")
        from attnlab import device  # late: reading the device initialises JAX's backend

        info = device.info()
        shared = info.backend == "cpu" or not info.memory_free_bytes
        if env:
            try:
                cap = int(float(env) * GIB)
                return cls(cap, cap, shared, "ATTNLAB_MEMORY_LIMIT_GIB").split(workers())
            except ValueError:
                pass
        host = int(host_available_bytes() * 0.5)
        source = ("half of the memory available when this server started" if shared else
                  "GPU: 80 % of its memory free when this server started; host: half of the memory available then")
        return cls(host if shared else int(info.memory_free_bytes * 0.8), host, shared, source).split(workers())

    def said(self) -> str:
        return f" ({self.source})" if self.source else ""

    def split(self, k: int) -> Budget:
        """This process's share when `k` server processes share the machine."""
        return self if k <= 1 else Budget(self.device_bytes // k, self.host_bytes // k, self.shared,
                                          f"{self.source}, split among {k} server processes")


def workers() -> int:
    """How many server processes share this GPU (ATTNLAB_WORKERS, set by serve.py --workers)."""
    try:
        return max(1, int(os.environ.get("ATTNLAB_WORKERS", "1")))
    except ValueError:
        return 1


@dataclasses.dataclass
class Stats:
    admitted: int = 0
    waited: int = 0
    longest_wait_s: float = 0.0
    peak_device_bytes: int = 0
    peak_host_bytes: int = 0


class DeviceQueue:
    """Admission by memory, first come first served; `exclusive` runs have the device alone."""

    def __init__(self, budget: Budget | None = None, max_waiting: int = 64, timeout_s: float = 600.0,
                 turns: Turns | None = TURNS):
        """`turns`: how admitted runs of this process take turns on the device with its compiles
        (None: admitted runs go side by side, as runs of different processes do)."""
        self._budget, self.max_waiting, self.timeout_s = budget, max_waiting, timeout_s
        self._turns = turns
        self._cond = threading.Condition()
        self._queue: deque[object] = deque()
        self._device = self._host = self._running = 0
        self._exclusive = False
        self._held = threading.local()
        self.stats = Stats()
        lock = os.environ.get("ATTNLAB_DEVICE_LOCK")
        self.across = AcrossProcesses(lock, busy=DeviceBusy) if lock else None

    @property
    def budget(self) -> Budget:
        if self._budget is None:
            self._budget = Budget.here()
        return self._budget

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        """Runs waiting for the device: in this process's queue, or in every server process's."""
        return self.across.waiting() if self.across is not None else len(self._queue)

    def check(self, device_bytes: int, host_bytes: int) -> str | None:
        """Why a run of this size can never be admitted here, or None when it can."""
        b = self.budget
        host = host_bytes + (device_bytes if b.shared else 0)
        if not b.shared and device_bytes > b.device_bytes:
            return (f"needs about {format_bytes(device_bytes)} of GPU memory, over this lab's budget of "
                    f"{format_bytes(b.device_bytes)}{b.said()}")
        if host > b.host_bytes:
            where = "memory" if b.shared else "host memory"
            return (f"needs about {format_bytes(host)} of {where}, over this lab's budget of "
                    f"{format_bytes(b.host_bytes)}{b.said()}")
        return None

    def _fits(self, device_bytes: int, host: int, exclusive: bool) -> bool:
        if self._exclusive or (exclusive and self._running):
            return False
        b = self.budget
        return self._host + host <= b.host_bytes and (b.shared or self._device + device_bytes <= b.device_bytes)

    def _taking_turns(self):
        return self._turns.running() if self._turns is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def slot(self, device_bytes: int = 0, host_bytes: int = 0, *, exclusive: bool = False,
             on_wait: Callable[[int], None] | None = None, timeout_s: float | None = None):
        """Hold `device_bytes` and `host_bytes` of the budget (and the device alone if `exclusive`);
        yields the seconds spent waiting. A thread that already holds a slot passes straight through."""
        if getattr(self._held, "depth", 0):
            self._held.depth += 1
            try:
                yield 0.0
            finally:
                self._held.depth -= 1
            return
        why = self.check(device_bytes, host_bytes)
        if why:
            raise OverBudget(why)
        host = host_bytes + (device_bytes if self.budget.shared else 0)
        start, ticket = time.perf_counter(), object()
        with self._cond:
            if self._queue or not self._fits(device_bytes, host, exclusive):
                if len(self._queue) >= self.max_waiting:
                    raise DeviceBusy(f"The GPU is busy: {len(self._queue)} runs are already waiting. Try again shortly.")
                if on_wait:
                    on_wait(self._running + len(self._queue))
                waiting.about_to_wait()
                self._queue.append(ticket)
                self.stats.waited += 1
                mark = self.across.mark() if self.across is not None else contextlib.nullcontext()
                try:
                    with mark:
                        ok = self._cond.wait_for(lambda: self._queue[0] is ticket and self._fits(device_bytes, host, exclusive),
                                                 timeout=self.timeout_s if timeout_s is None else timeout_s)
                finally:
                    self._queue.remove(ticket)
                    self._cond.notify_all()
                if not ok:
                    raise DeviceBusy(f"Waited {time.perf_counter() - start:.0f} s for the GPU without getting it. "
                                     "Try again shortly.")
            self._running += 1
            self._device += device_bytes
            self._host += host
            self._exclusive = exclusive
            waited = time.perf_counter() - start
            s = self.stats
            s.admitted += 1
            s.longest_wait_s = max(s.longest_wait_s, waited)
            s.peak_device_bytes = max(s.peak_device_bytes, self._device)
            s.peak_host_bytes = max(s.peak_host_bytes, self._host)
        self._held.depth = 1
        try:
            if self.across is None:
                with self._taking_turns():  # not while this process compiles (gpu_turns.py says why)
                    yield waited
            else:
                limit = self.timeout_s if timeout_s is None else timeout_s
                with self.across.hold(exclusive, start + limit), self._taking_turns():
                    waited = time.perf_counter() - start
                    with self._cond:
                        self.stats.longest_wait_s = max(self.stats.longest_wait_s, waited)
                    yield waited
        finally:
            self._held.depth = 0
            with self._cond:
                self._running -= 1
                self._device -= device_bytes
                self._host -= host
                self._exclusive = False
                self._cond.notify_all()


DEVICE = DeviceQueue()
