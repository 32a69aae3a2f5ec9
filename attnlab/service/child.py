"""The embedded default: the device worker in a child process of the app, started again when it dies.

    client = ChildWorker(env={"JAX_PLATFORMS": "cuda"})   # `make run`; the app's pages use it
    client.call(request)  ->  Reply, or WorkerLost when the child died while serving it

`python -m attnlab.service.child FD` is the child: a `DeviceWorker` serving requests from one socket (a
socketpair made by the parent), each in a thread of its pool. A native abort (SIGABRT, SIGSEGV in XLA, cuDNN
or a Pallas lowering) ends only the child: the parent fails its requests in flight with `WorkerLost` and
starts a new child at once. A child that keeps dying within QUICK_S of its start is given up on, but a death
while a learner's program ran (the markers of attnlab/yourturn/suspects.py) never counts: that program is
refused from then on, so no learner can stop the lab for the class.

Not `ProcessPoolExecutor` (one task per worker; one dead worker breaks the pool) nor
`multiprocessing.managers` (a connection per calling thread, and Streamlit runs each page in a new thread):
one connection, many numbered requests in flight on it, and a restart when the child dies; Ray
(attnlab/service/ray_workers.py) across machines."""

from __future__ import annotations

import concurrent.futures
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

from attnlab.service.request import Reply, Request, WorkerLost

START_TIMEOUT_S = 180.0
# a child that dies this many times within QUICK_S of its start, serving no request, is not started again; a death
# while it served one is that request's (the crash links with the known-abort refusal off cost 2-4 in seconds)
QUICK_DEATHS = 3
QUICK_S = 20.0


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


class ChildWorker:
    """The parent's side: a child process running the device worker, and the requests in flight to it."""

    def __init__(self, env: dict[str, str] | None = None, threads: int = 64, name: str = "device-0"):
        self.env, self.threads, self.name = env or {}, threads, name
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._ids = itertools.count()
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._ready = threading.Event()
        self._quick_deaths = 0  # deaths in a row, each within QUICK_S of its start (a learner's program's not counted)
        self.learner_deaths = 0  # deaths while a learner's program ran (attnlab/yourturn/suspects.py remembers it)
        # where the child marks the learners' programs it runs: this supervisor reads it after a death
        self._own_suspects_dir = not self.env.get("ATTNLAB_SUSPECTS_DIR")
        self.suspects_dir = self.env.get("ATTNLAB_SUSPECTS_DIR") or tempfile.mkdtemp(prefix="attnlab-suspects-")
        self.restarts = 0
        self.last_death = ""
        self.gave_up = ""
        self._closed = False
        self._start()

    # -- the child's life ------------------------------------------------------------------------
    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1", "ATTNLAB_SUSPECTS_DIR": self.suspects_dir}
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "attnlab.service.child",
                                      str(theirs.fileno()), str(self.threads), self.name],
                                     pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        self.started = time.monotonic()
        self.conn: Connection | None = Connection(ours.detach())
        threading.Thread(target=self._read, args=(self.conn, self.proc), name="attnlab-child-reader",
                         daemon=True).start()

    def _read(self, conn: Connection, proc: subprocess.Popen) -> None:
        """Replies from the child until its end; then every request in flight fails, and a new child starts."""
        try:
            while True:
                number, reply = conn.recv()
                if number == -1:  # the child's "ready"
                    self._ready.set()
                    continue
                with self._lock:
                    future = self._pending.pop(number, None)
                if future is not None:
                    future.set_result(reply)
        except (EOFError, OSError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._closed:
            return
        how = signal_words(proc.returncode)
        from attnlab.yourturn import suspects  # the standard library only: cheap in the app's process

        learners, why = suspects.left_by(proc.pid, how, self.suspects_dir)
        self.last_death = how
        if learners:  # a learner's program caused it: remembered, refused from now on, never a reason to give up
            self.learner_deaths += 1
            lost = WorkerLost(f"The device worker {how} while it ran a learner's program ({why}). That program is "
                              "remembered, and the lab refuses it at once from now on, with this reason; the worker "
                              "has been started again and nothing else was lost. If it was yours, change the code "
                              "(a huge shape, or far more work than the exercise needs?); if not, press the button "
                              "again.")
        else:
            lost = WorkerLost(f"The device worker {how} while serving this request (a crash in native code: XLA, "
                              "cuDNN or a kernel compiler). Nothing else was lost: it has been started again, so press "
                              "the button again, or choose another shape.")
        with self._lock:  # from here no request is sent to the dead child; the new one takes them when ready
            pending, self._pending, self.conn = self._pending, {}, None
            self._ready.clear()
            if not learners and not pending:
                self._quick_deaths = self._quick_deaths + 1 if time.monotonic() - self.started < QUICK_S else 1
            quick = self._quick_deaths >= QUICK_DEATHS
            if quick:
                self.gave_up = f"the device worker {how} {QUICK_DEATHS} times in a row within {QUICK_S:.0f} s of starting"
        for future in pending.values():
            future.set_exception(lost)
        print(f"attnlab: the device worker (pid {proc.pid}) {how}; "
              + ("not starting it again (it keeps dying at start)" if quick else "starting it again"),
              file=sys.stderr, flush=True)
        if quick:
            self._ready.set()  # waiting senders wake and read gave_up
            return
        with self._lock:
            self.restarts += 1
            self._start()

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> bool:
        return self._ready.wait(timeout)

    def close(self) -> None:
        self._closed = True
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self._own_suspects_dir:
            shutil.rmtree(self.suspects_dir, ignore_errors=True)

    # -- requests --------------------------------------------------------------------------------
    def send(self, op: str, payload=None, timeout: float | None = None):
        """One message to the child and its answer (op: "call" with a Request, "info", "forget", "drop")."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        while True:
            if not self._ready.wait(START_TIMEOUT_S):
                raise WorkerLost(f"The device worker did not start within {START_TIMEOUT_S:.0f} s. Try again shortly.")
            if self.gave_up:
                raise WorkerLost(f"The device worker cannot run here: {self.gave_up}. The server log says why.")
            with self._lock:
                conn = self.conn
                if conn is not None:  # a live child: this request is its to answer, or to fail by dying
                    number = next(self._ids)
                    self._pending[number] = future
                    break
        try:
            with self._send_lock:
                conn.send((number, op, payload))
        except OSError:  # the child is gone; its reader fails this request as it fails the others
            pass
        return future.result(timeout)

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
        return f"the device worker in a child process (pid {self.proc.pid})"


# -- the child -------------------------------------------------------------------------------------
def main(fd: int, threads: int, name: str) -> None:
    from attnlab.service.worker import DeviceWorker, WorkerInfo

    conn = Connection(fd)
    worker = DeviceWorker(name)
    pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="attnlab-request")
    send_lock = threading.Lock()

    def reply(number: int, value) -> None:
        with send_lock:
            conn.send((number, value))

    def serve(number: int, op: str, payload) -> None:
        answer: Reply | WorkerInfo | int
        try:
            if op == "call":
                answer = worker.call(payload)
            elif op == "info":
                answer = worker.info()
            elif op == "forget":
                answer = worker.forget()
            elif op == "drop":
                answer = worker.drop(payload)
            else:
                answer = Reply(error=ValueError(f"unknown operation {op!r}"), kept=False)
        except BaseException as e:  # noqa: BLE001 (a reply, never a dead reader)
            answer = Reply(error=RuntimeError(f"{type(e).__name__}: {e}"), kept=False)
        try:
            reply(number, answer)
        except Exception as e:  # a value that cannot be pickled: its words instead
            reply(number, Reply(error=RuntimeError(f"the answer could not be sent back: {type(e).__name__}: {e}"),
                                kept=False))

    from attnlab import device
    from attnlab.studies import warm

    device.info()  # JAX and its device, before the first request
    reply(-1, "ready")
    threading.Thread(target=warm.worker_start, args=(worker.busy,), name="attnlab-worker-start", daemon=True).start()
    while True:
        try:
            number, op, payload = conn.recv()
        except (EOFError, OSError):  # the parent is gone: so is this worker
            os._exit(0)
        pool.submit(serve, number, op, payload)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
