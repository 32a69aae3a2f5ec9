"""The device worker in a child process, started again when it dies: the app's default, and a Ray actor's inside.

    client = ChildWorker(env={"JAX_PLATFORMS": "cuda"})   # `make run`; a Ray DeviceActor (ray_actor.py) holds one
    client.call(request)  ->  Reply, or WorkerLost when the child died while serving it

`python -m attnlab.service.child FD` is the child: a `DeviceWorker` serving requests from one socket (a
socketpair made by the parent), each in a thread of its pool. A native abort (SIGABRT, SIGSEGV in XLA, cuDNN
or a Pallas lowering) ends only the child: the parent fails the requests it had read (RECEIVED) with
`WorkerLost`, hands the device to its spare and sends it the rest. A child that keeps dying within QUICK_S of
its start is given up on, but a death while a learner's program ran (the markers of attnlab/yourturn/suspects.py)
never counts: that program is refused from then on, so no learner can stop the lab for the class.

The spare (ATTNLAB_SPARE_WORKER, default on): a second child started once the first answers, with Python, JAX and
the lab's modules imported but no device (no JAX backend, no GPU memory), waiting for the word to take over. A
death then costs JAX's device (0.4 s on an H100) instead of a new Python's start and imports (a Ray actor's
restart on the H100 took 2.4-3.4 s to its first request), and a new spare is started once the new child answers.

Not `ProcessPoolExecutor` (one task per worker; one dead worker breaks the pool) nor `multiprocessing.managers`
(a connection per calling thread; Streamlit runs each page in a new thread): one connection, many numbered
requests in flight on it, a restart when the child dies, and a spare that has done its imports. Ray
(attnlab/service/ray_workers.py) across machines: a Ray actor per GPU, this inside it (Ray starts a new Python
for each restart of an actor, docs/design-notes.md)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection

from attnlab.service.child_process import GO, RECEIVED
from attnlab.service.request import Reply, Request, WorkerLost

START_TIMEOUT_S = 180.0
# a child that dies this many times within QUICK_S of its start, serving no request, is not started again; a death
# while it served one is that request's (the crash links with the known-abort refusal off cost 2-4 in seconds)
QUICK_DEATHS = 3
QUICK_S = 20.0
DIED = "attnlab: the device worker (pid"  # how the log begins each line about the serving worker's death
UNREAD = object()  # a request's result where its child died before reading it: sent to the next child


def signal_words(returncode: int | None) -> str:
    """How a process ended, in words: 'was killed by signal 6 (SIGABRT)', 'exited with code 1'."""
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with code {returncode}"


@dataclasses.dataclass(eq=False)
class _Child:
    proc: subprocess.Popen
    conn: Connection
    started: float  # when it was told to take the device (a spare: when its process started)


class ChildWorker:
    """The parent's side: a child process running the device worker, its spare, and the requests in flight."""

    def __init__(self, env: dict[str, str] | None = None, threads: int = 64, name: str = "device-0",
                 spare: bool | None = None):
        from attnlab.settings import settings

        self.env, self.threads, self.name = env or {}, threads, name
        self.spare = settings().spare_worker if spare is None else spare
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._ids = itertools.count()
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._received: set[int] = set()  # requests in flight the child said it read (only these can die with it)
        self._ready = threading.Event()
        self._quick_deaths = 0  # deaths in a row, each within QUICK_S of its start (a learner's program's not counted)
        self.learner_deaths = 0  # deaths while a learner's program ran (attnlab/yourturn/suspects.py remembers it)
        # where the child marks the learners' programs it runs: this supervisor reads it after a death
        self._own_suspects_dir = not self.env.get("ATTNLAB_SUSPECTS_DIR")
        self.suspects_dir = self.env.get("ATTNLAB_SUSPECTS_DIR") or tempfile.mkdtemp(prefix="attnlab-suspects-")
        self.restarts = 0
        self.promotions = 0  # restarts the spare took over
        self.last_death = ""
        self.gave_up = ""
        self._closed = False
        self._active: _Child | None = None
        self._spare: _Child | None = None
        self.proc: subprocess.Popen  # the process that serves now (the spare's once it took over)
        with self._lock:
            self._take_over()

    @property
    def conn(self) -> Connection | None:
        return self._active.conn if self._active else None

    # -- the children's lives --------------------------------------------------------------------
    def _spawn(self) -> _Child:
        ours, theirs = socket.socketpair()
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1", "ATTNLAB_SUSPECTS_DIR": self.suspects_dir}
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "attnlab.service.child",
                                 str(theirs.fileno()), str(self.threads), self.name],
                                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        child = _Child(proc, Connection(ours.detach()), time.monotonic())
        threading.Thread(target=self._read, args=(child,), name="attnlab-child-reader", daemon=True).start()
        return child

    def _take_over(self) -> None:
        """(Under the lock.) The spare, else a new child, is told to take the device; the requests wait for its
        "ready"."""
        if self._spare is not None and self._spare.proc.poll() is not None:
            self._spare = None  # died meanwhile; its reader says so
        child, self._spare = self._spare or self._spawn(), None
        child.started = time.monotonic()
        self._active, self.proc = child, child.proc
        with contextlib.suppress(OSError), self._send_lock:  # it died meanwhile: its reader starts the next
            child.conn.send((GO, "go", None))

    def _read(self, child: _Child) -> None:
        """Replies from one child until its end; then, if it served, every request in flight fails and the spare
        takes over; a spare's death costs nothing but a cold start at the next death."""
        try:
            while True:
                number, reply = child.conn.recv()
                if number == GO:  # the child's "ready": it holds the device
                    with self._lock:
                        if child is self._active:
                            self._ready.set()
                            if self.spare and self._spare is None and not self._closed:
                                self._spare = self._spawn()
                    continue
                with self._lock:
                    if number == RECEIVED:  # the child read request `reply` and is about to serve it
                        self._received.update({reply} & self._pending.keys())
                        continue
                    self._received.discard(number)
                    future = self._pending.pop(number, None)
                if future is not None:
                    future.set_result(reply)
        except (EOFError, OSError):
            pass
        proc = child.proc
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._closed:
            return
        how = signal_words(proc.returncode)
        with self._lock:
            if child is not self._active:  # a spare that died before it was needed
                if child is self._spare:
                    self._spare = None
                print(f"attnlab: the spare device worker (pid {proc.pid}) {how}", file=sys.stderr, flush=True)
                return
        self._died(child, how)

    def _died(self, child: _Child, how: str) -> None:
        from attnlab.yourturn import suspects  # the standard library only: cheap in the app's process

        learners, why = suspects.left_by(child.proc.pid, how, self.suspects_dir)
        self.last_death = how
        if learners:  # a learner's program caused it: remembered, refused from now on, never a reason to give up
            self.learner_deaths += 1
            lost = WorkerLost(f"The device worker {how} while it ran a learner's program{f' ({why})' * (why != how)}. That program is "
                              "remembered, and the lab refuses it at once from now on, with this reason; the worker "
                              "has been started again and nothing else was lost. If it was yours, change the code "
                              "(a huge shape, or far more work than the exercise needs?); if not, press the button "
                              "again.")
        else:
            lost = WorkerLost(f"The device worker {how} while serving this request (a crash in native code: XLA, "
                              "cuDNN or a kernel compiler). Nothing else was lost: it has been started again, so press "
                              "the button again, or choose another shape.")
        with self._lock:  # from here no request is sent to the dead child; the next one takes them when ready
            pending, self._pending, self._active = self._pending, {}, None
            received, self._received = self._received, set()
            self._ready.clear()
            if not learners and not received:
                self._quick_deaths = self._quick_deaths + 1 if time.monotonic() - child.started < QUICK_S else 1
            quick = self._quick_deaths >= QUICK_DEATHS
            if quick:
                self.gave_up = f"the device worker {how} {QUICK_DEATHS} times in a row within {QUICK_S:.0f} s of starting"
        for number, future in pending.items():
            if number in received:
                future.set_exception(lost)
            else:  # one it never read did not die with it: it goes to the next
                future.set_result(UNREAD)
        with self._lock:
            spare = self._spare if self._spare is not None and self._spare.proc.poll() is None else None
            print(f"{DIED} {child.proc.pid}) {how}; "
                  + ("not starting it again (it keeps dying at start)" if quick else
                     f"its spare (pid {spare.proc.pid}) takes over" if spare else "starting it again"),
                  file=sys.stderr, flush=True)
            if quick:
                self._ready.set()  # waiting senders wake and read gave_up
                return
            self.restarts += 1
            self.promotions += spare is not None
            self._take_over()

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> bool:
        return self._ready.wait(timeout)

    def close(self) -> None:
        self._closed = True
        for child in (self._active, self._spare):
            if child is None:
                continue
            try:
                child.conn.close()
            except OSError:
                pass
            if child.proc.poll() is None:
                child.proc.terminate()
                try:
                    child.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.proc.kill()
        if self._own_suspects_dir:
            shutil.rmtree(self.suspects_dir, ignore_errors=True)

    # -- requests --------------------------------------------------------------------------------
    def send(self, op: str, payload=None, timeout: float | None = None):
        """One message to the child and its answer (op: "call" with a Request, "info", "forget", "drop"); one the
        child never read (RECEIVED) is sent to the next child if it dies (not told it died "serving" it)."""
        while True:
            future: concurrent.futures.Future = concurrent.futures.Future()
            number, conn = self._register(future)
            with contextlib.suppress(OSError), self._send_lock:  # gone, unread: its reader sends it on with the rest
                conn.send((number, op, payload))
            result = future.result(timeout)
            if result is not UNREAD:
                return result

    def _register(self, future: concurrent.futures.Future) -> tuple[int, Connection]:
        """A number for a request in flight, and the connection of the child that is ready to take it."""
        while True:
            if not self._ready.wait(START_TIMEOUT_S):
                raise WorkerLost(f"The device worker did not start within {START_TIMEOUT_S:.0f} s. Try again shortly.")
            if self.gave_up:
                raise WorkerLost(f"The device worker cannot run here: {self.gave_up}. The server log says why.")
            with self._lock:
                conn = self.conn if self._ready.is_set() else None
                if conn is not None:  # a live child: this request is its to answer, or to fail by dying
                    number = next(self._ids)
                    self._pending[number] = future
                    return number, conn

    def call(self, request: Request) -> Reply:
        return self.send("call", request)

    def infos(self) -> list:
        return [self.send("info", timeout=30)]

    def drop(self, sessions: list[str]) -> int:
        return self.send("drop", list(sessions), timeout=30)

    def forget(self) -> int:
        return self.send("forget", timeout=30)

    def ready(self) -> str | None:
        """None once the worker answered and was not given up on (a crash costs one request); else why not."""
        if self.gave_up:
            return f"The device worker cannot run here: {self.gave_up}."
        if not (self._ready.is_set() or self.restarts):
            return "The device worker is starting (JAX and its device)."
        return None

    def restarting(self) -> bool:
        return bool(self.restarts) and not self._ready.is_set() and not self.gave_up

    def describe(self) -> str:
        spare = self._spare
        return (f"the device worker in a child process (pid {self.proc.pid})"
                + (f", its spare pid {spare.proc.pid}" if spare else ""))


if __name__ == "__main__":  # the child (the command above): attnlab/service/child_process.py
    from attnlab.service.child_process import main

    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])

