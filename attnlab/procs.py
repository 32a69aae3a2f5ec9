"""Processes, for the benchmarks (scripts/) and the tests: a free port, a process tree, its CPU seconds and
memory (psutil), and where its threads spend their time (py-spy). One copy of each; the app never uses it.

    port = free_port()
    with Record([server_pid], every=0.02, folder=Path("samples")) as rec:   # py-spy, until the block ends
        ...
    for s in read_raw(rec.files[0]): s.thread, s.frames[-1], s.count      # innermost frame last

Ours, not the libraries': `Record` runs `py-spy record` per process (children with it) and stops it with
SIGINT, on which py-spy writes its samples; `read_raw` reads the raw output back into process, thread, frames.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(pid: int) -> list[psutil.Process]:
    """The process and every process below it; [] when it is gone."""
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.Error:
        return []


CHILD = "attnlab.service.child"  # a device worker's command line (`python -m attnlab.service.child`)
ACTOR = "ray::DeviceActor"  # Ray's name for a DeviceActor's process, the supervisor of a GPU's device worker


def device_workers(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Of `procs`, the device workers that hold a device: each supervisor's (the app's, a DeviceActor's) child that
    started first, since its spare starts after it and holds none (attnlab/service/child.py); a DeviceActor with no
    child yet. Gone and zombie processes left out."""
    children: dict[int, list[psutil.Process]] = {}
    actors = []
    for p in procs:
        try:
            line = " ".join(p.cmdline())
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if CHILD in line:
                children.setdefault(p.ppid(), []).append(p)
            elif ACTOR in line:
                actors.append(p)
        except psutil.Error:
            continue
    first = [min(kids, key=lambda k: k.create_time()) for kids in children.values()]
    return first + [a for a in actors if a.pid not in children]


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process; None when it is gone."""
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.Error:
        return None


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of all cores since boot; Δbusy/Δtotal between two readings is the load."""
    t = psutil.cpu_times()
    total = sum(t)
    return total - t.idle - getattr(t, "iowait", 0.0), total


def rss_bytes(pid: int) -> int | None:
    """Resident memory of one process; None when it is gone."""
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return None


# --------------------------------------------------------------------------------------------
# where threads spend their time: py-spy
# --------------------------------------------------------------------------------------------
def py_spy() -> str | None:
    """The py-spy program: beside this Python (a virtualenv's bin/), else on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


class Record:
    """`py-spy record` of each process in `pids` and its children while the block runs: every thread (--idle),
    every `every` s, unpaused (--nonblocking); raw output per process in `files`, else `error` says why."""

    def __init__(self, pids: list[int], every: float = 0.02, folder: Path | None = None, children: bool = True):
        self.pids, self.every, self.children = list(pids), every, children
        self.folder = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="attnlab-pyspy-"))
        self.files: list[Path] = []
        self.error: str | None = None
        self._procs: list[tuple[subprocess.Popen, Path]] = []

    def __enter__(self) -> Record:
        exe = py_spy()
        if exe is None:
            self.error = "py-spy is not installed (pip install py-spy)"
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        for pid in self.pids:
            out = self.folder / f"pyspy-{pid}.txt"
            cmd = [exe, "record", "--pid", str(pid), "--idle", "--threads", "--full-filenames", "--nonblocking",
                   "--format", "raw", "--rate", str(max(1, round(1 / self.every))), "--output", str(out)]
            cmd += ["--subprocesses"] if self.children else []
            self._procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True),
                                out))
        return self

    def __exit__(self, *exc) -> None:
        errors = []
        for proc, out in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            if out.is_file():
                self.files.append(out)
            else:
                errors.append(f"py-spy exited {proc.returncode}: {(err or '').strip()[-300:]}")
        self.error = self.error or ("; ".join(errors) or None)


@dataclass(frozen=True)
class Frame:
    function: str  # as py-spy names it: qualified (Class.method) on Python 3.11+
    path: str
    line: int


@dataclass
class Stack:
    """One distinct stack of py-spy's raw output: processes and frames (outermost first), thread, count."""

    processes: list[str]
    thread: str  # the thread's name ("MainThread", "ScriptRunner.scriptThread", ...)
    frames: list[Frame]
    count: int


_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>.*):(?P<line>\d+)\)$")
_PROCESS = re.compile(r'process (?P<pid>\d+):"(?P<command>.*?)";(?=process \d+:"|thread \()', re.S)
_THREAD = re.compile(r"^thread \(\w+\): ?(?P<name>.*)$")


def read_raw(path: Path) -> list[Stack]:
    """py-spy's `--format raw` output (one line per distinct stack: `frame;frame;... count`, root first; with
    --subprocesses and --threads, `process PID:"command line"` and `thread (TID): name` segments first. A
    command line may hold newlines and semicolons: a stack ends at the first line ending in a count)."""
    stacks, pending = [], ""
    for line in Path(path).read_text(errors="replace").splitlines():
        pending += line
        head, _, count = pending.rpartition(" ")
        if not head or not count.isdigit():
            pending += "\n"
            continue
        pending = ""
        processes, thread = [], ""
        frames: list[Frame] = []
        while m := _PROCESS.match(head):
            processes.append(f'{m["pid"]}:"{m["command"]}"')
            head = head[m.end():]
        for part in head.split(";"):
            if not frames and (m := _THREAD.match(part)):
                thread = m["name"]
            elif m := _FRAME.match(part):
                frames.append(Frame(m["function"], m["path"], int(m["line"])))
            else:
                frames.append(Frame(part, "", 0))
        stacks.append(Stack(processes, thread, frames, int(count)))
    return stacks


__all__ = ["Frame", "Record", "Stack", "cpu_seconds", "free_port", "machine_cpu", "py_spy", "read_raw", "rss_bytes",
           "tree"]
