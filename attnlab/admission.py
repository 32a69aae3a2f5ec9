"""This process's device: `DEVICE.use(bytes)` runs alone, `DEVICE.building()` compiles between runs, one queue.

The device worker serves every entry point under `DEVICE.serving()`, where `DEVICE.launch` refuses a thread without
a turn, so no timing shares the device (tests/test_device_rule.py). Why: docs/design-notes.md, "The device's line".
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections import deque

from attnlab import oldest_first
from attnlab.budget import Budget
from attnlab.spans import log_span
from attnlab.threads import held_turn


class DeviceBusy(RuntimeError):
    """The queue is full or the wait was too long: the learner tries again shortly."""


class Abandoned(DeviceBusy):
    """Every tab waiting for this run has closed: it leaves the line."""

    def __init__(self, what: str = "run"):
        super().__init__(f"Every tab that asked for this {what} has closed: it left the device's line.")


class OverBudget(ValueError):
    """One run needs more memory than the whole budget: it can never be admitted."""


class OutsideTurn(RuntimeError):
    """Work for the device was about to launch, in a request being served, from a thread without a turn."""


@dataclasses.dataclass
class Stats:
    admitted: int = 0
    waited: int = 0
    longest_wait_s: float = 0.0
    peak_device_bytes: int = 0
    peak_host_bytes: int = 0
    busy_s: float = 0.0  # seconds a run held the device
    since: float = dataclasses.field(default_factory=time.monotonic)


@dataclasses.dataclass(eq=False)
class _Ticket:
    """A place in the device's line: a run's or a build's."""

    build: bool
    thread: int
    owner: int  # the thread serving the request it is for (a compile pool's thread builds for a request's thread)
    admitted: bool = False
    first: bool = False  # a run that waited through a build phase: it goes before the next phase
    key: tuple[float, int] = dataclasses.field(default_factory=oldest_first.key)  # its place: the oldest page first


@dataclasses.dataclass(frozen=True)
class Line:
    """The device's line at one moment, by the requests' threads: the run holding it, the runs waiting (in the order
    they will hold it), the builds waiting for a phase between runs and those compiling now."""

    holder: int | None
    runs: tuple[int, ...]
    builds: tuple[int, ...]
    building: tuple[int, ...]


def builds_at_once() -> int:
    """Tuned compiles in one build phase: a quarter of this process's CPUs, at least two (the autotuner is threaded)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(2, cpus // 4)


class Device:
    """One run at a time on this process's device, runs in order of their pages' start (attnlab.oldest_first);
    builds between runs, side by side."""

    def __init__(self, budget: Budget | None = None, max_waiting: int = 64, timeout_s: float = 600.0,
                 max_builds: int | None = None):
        self._budget, self.max_waiting, self.timeout_s = budget, max_waiting, timeout_s
        self.max_builds = max_builds or builds_at_once()
        self._cond = threading.Condition()
        self._line: deque[_Ticket] = deque()  # every waiter's ticket, runs' and builders', in order of their keys
        self._holder: int | None = None  # the thread that holds the device
        self._depth = 0
        self._building: list[int] = []  # the threads compiling now, in a build phase (between runs)
        self._local = threading.local()  # how deep this thread is in building(), and its request's ledger
        self._abandoned: set[int] = set()  # threads serving requests no one waits for any more (`abandon`)
        self.stats = Stats()

    @property
    def budget(self) -> Budget:
        if self._budget is None:
            self._budget = Budget.here()
        return self._budget

    @property
    def running(self) -> int:
        """1 while a run holds the device, else 0."""
        return int(self._holder is not None)

    def held_here(self) -> bool:
        """True in the thread that holds the device."""
        return self._holder == threading.get_ident()

    @contextlib.contextmanager
    def serving(self):
        """This thread serves an entry point: from here every launch must hold a turn."""
        before = getattr(self._local, "serving", False)
        self._local.serving = True
        try:
            yield
        finally:
            self._local.serving = before

    def launch(self, what: str) -> None:
        """Where work is put on the device: refused, in a request being served, from a thread without the device."""
        if getattr(self._local, "serving", False) and not self.held_here():
            raise OutsideTurn(f"{what} would launch on the device outside a turn (admission.DEVICE.use): refused, "
                              "so that no timing shares the device")

    @property
    def waiting(self) -> int:
        """Runs waiting for the device."""
        return sum(not t.build for t in self._line)

    def line(self) -> Line:
        """One look at the device's line (what a waiting page reads its place from: pages/waiting.py)."""
        with self._cond:
            return Line(self._holder, tuple(t.owner for t in self._line if not t.build),
                        tuple(t.owner for t in self._line if t.build), tuple(self._building))

    def _enter(self, ticket: _Ticket) -> None:
        """Into the line in the order of the tickets' keys (lock held): behind every page that began before its own
        (attnlab.oldest_first), then let in whoever's turn it is."""
        at = next((i for i, t in enumerate(self._line) if t.key > ticket.key), len(self._line))
        self._line.insert(at, ticket)
        self._admit()

    def _admit(self) -> None:
        """Let in whoever's turn it is (lock held): a run alone, first in line or through the last phase; else up to
        `max_builds` builds side by side, joining a phase in flight while no run waits."""
        if self._holder is not None or not self._line:
            return
        if self._building:
            if self.waiting:
                return
            joining = [t for t in self._line if t.build][: self.max_builds - len(self._building)]
        else:
            run = next((t for t in self._line if not t.build), None)
            if run is not None and (run.first or run is self._line[0]):
                self._line.remove(run)
                run.admitted, self._holder = True, run.thread
                self._cond.notify_all()
                return
            joining = [t for t in self._line if t.build][: self.max_builds]
        for t in joining:
            self._line.remove(t)
            t.admitted = True
            self._building.append(t.owner)
        if joining:
            self._cond.notify_all()

    def check(self, device_bytes: int, host_bytes: int = 0) -> str | None:
        return self.budget.check(device_bytes, host_bytes)

    @contextlib.contextmanager
    def ledger(self):
        """Seconds this thread's request spends on the line, by kind, in a dict that fills as it goes (the request log)."""
        spent = self._local.ledger = dict.fromkeys(("run_wait_s", "run_s", "build_wait_s", "build_s", "compile_s"), 0.0)
        try:
            yield spent
        finally:
            self._local.ledger = None

    def spend(self, kind: str, seconds: float) -> None:
        """Add to this thread's ledger (if it keeps one)."""
        spent = getattr(self._local, "ledger", None)
        if spent is not None:
            spent[kind] += seconds

    @contextlib.contextmanager
    def use(self, device_bytes: int = 0, host_bytes: int = 0, *, timeout_s: float | None = None):
        """Hold the device alone for a run of this size; yields the seconds waited. Its holder passes through."""
        me = threading.get_ident()
        if self._holder == me:
            self._depth += 1
            try:
                yield 0.0
            finally:
                self._depth -= 1
            return
        if getattr(self._local, "depth", 0):
            raise RuntimeError("a thread that is building a program cannot wait for the device (it would wait for itself)")
        why = self.check(device_bytes, host_bytes)
        if why:
            raise OverBudget(why)
        start, ticket = time.perf_counter(), _Ticket(build=False, thread=me, owner=me)
        with self._cond:
            if me in self._abandoned:
                raise Abandoned()
            if self._line or self._holder is not None or self._building:
                if self.waiting >= self.max_waiting:
                    raise DeviceBusy(f"The GPU is busy: {self.waiting} runs are already waiting. Try again shortly.")
                self.stats.waited += 1
            self._enter(ticket)
            self._cond.wait_for(lambda: ticket.admitted or me in self._abandoned,
                                timeout=self.timeout_s if timeout_s is None else timeout_s)
            if not ticket.admitted:
                self._line.remove(ticket)
                self._admit()
                if me in self._abandoned:
                    raise Abandoned()
                raise DeviceBusy(f"Waited {time.perf_counter() - start:.0f} s for the GPU without getting it. "
                                 "Try again shortly.")
            self._depth = 1
            waited = time.perf_counter() - start
            s = self.stats
            s.admitted += 1
            s.longest_wait_s = max(s.longest_wait_s, waited)
            s.peak_device_bytes = max(s.peak_device_bytes, device_bytes)
            s.peak_host_bytes = max(s.peak_host_bytes, host_bytes + (device_bytes if self.budget.shared else 0))  # CPU: one memory
        held_from = time.perf_counter()
        self.spend("run_wait_s", waited)
        try:
            with held_turn():  # the GIL back soon after each call into C (threads.held_turn)
                yield waited
        finally:
            self.spend("run_s", time.perf_counter() - held_from)
            log_span("turn", held_from, time.perf_counter())
            with self._cond:
                self.stats.busy_s += time.perf_counter() - held_from
                self._holder, self._depth = None, 0
                self._admit()

    def abandon(self, threads, abandoned: bool = True) -> None:
        """Mark the requests served in `threads` as wanted by no one (they leave the line: `Abandoned`), or clear it."""
        with self._cond:
            (self._abandoned.update if abandoned else self._abandoned.difference_update)(threads)
            self._cond.notify_all()

    @contextlib.contextmanager
    def building_for(self, owner: int):
        """This thread's builds are for the request served in thread `owner` (a compile pool's: `line`, `abandon`)."""
        before, self._local.owner = getattr(self._local, "owner", None), owner
        try:
            yield
        finally:
            self._local.owner = before

    @contextlib.contextmanager
    def building(self, quiet: bool = False, what: str = ""):
        """Compile a program: side by side with other builders, never during a run; the holder and a build inside a
        build pass through. quiet: untuned (`compiled.check_options()`), it launches nothing, so it never waits."""
        if quiet:
            yield
            return
        depth = getattr(self._local, "depth", 0)
        passing = depth or self._holder == threading.get_ident()
        owner = getattr(self._local, "owner", None) or threading.get_ident()
        start = time.perf_counter()
        if not passing:
            with self._cond:
                ticket = _Ticket(build=True, thread=threading.get_ident(), owner=owner)  # in line with the runs
                self._enter(ticket)
                self._cond.wait_for(lambda: ticket.admitted or {ticket.thread, owner} & self._abandoned)
                if not ticket.admitted:  # its request's tabs have all closed (`abandon`)
                    self._line.remove(ticket)
                    self._admit()
                    raise Abandoned("build")
            self.spend("build_wait_s", time.perf_counter() - start)
        self._local.depth = depth + 1
        built_from = time.perf_counter()
        try:
            yield
        finally:
            if not passing:
                self.spend("build_s", time.perf_counter() - built_from)
                log_span("build", built_from, time.perf_counter(), what)
            self._local.depth = depth
            if not passing:
                with self._cond:
                    self._building.remove(owner)
                    if not self._building:  # the phase is over: the runs that waited for it go first
                        for t in self._line:
                            t.first = not t.build
                    self._admit()


DEVICE = Device()
