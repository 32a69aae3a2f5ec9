"""The device service: pages ask for work on the device and get results back; they never touch a GPU.

    from attnlab import service
    results = service.call(runs.run, shape, ("naive", "sdpa_cudnn"), timed=True)

    request.py     a Request (an entry point and its arguments) and its Reply; WorkerLost
    client.py      DeviceClient: the methods every home of the worker below implements (the one boundary)
    entries.py     the entry points a request may name: the lab's functions that run on the device
    worker.py      the device worker: owns one GPU, serves requests, shares and keeps results
    local.py       the worker in this process (the CLI and unit tests: no process boundary)
    child.py       the worker in a child process, started again when it dies (the app's default)
    ray_workers.py one worker per GPU as Ray actors (a hosted class; CPU tests with fake GPUs)

Which one serves is ATTNLAB_DEVICE (attnlab/settings.py); the client is made once per process, on first use.
`ready()` says whether the device service can be reached now (serve.py's /_attnlab/ready: readiness)."""

from __future__ import annotations

import threading
import time

from attnlab.service.client import DeviceClient
from attnlab.service.request import Reply, Request, WorkerLost
from attnlab.service.worker import WorkerInfo
from attnlab.settings import settings

__all__ = ["Reply", "Request", "WorkerLost", "call", "client", "ready", "send", "start", "workers"]

_CLIENT: list = []
_LOCK = threading.Lock()
WORKER_ENV: dict[str, str] = {}  # what the app's device worker runs with (serve.py: the GPU's JAX_PLATFORMS)


def client() -> DeviceClient:
    """This process's DeviceClient (attnlab/service/client.py), made on first use as ATTNLAB_DEVICE says."""
    with _LOCK:
        if not _CLIENT:
            s = settings()
            if s.device == "inprocess":
                from attnlab.service.local import InProcess

                _CLIENT.append(InProcess())
            elif s.device == "ray":
                from attnlab.service.ray_workers import RayWorkers

                _CLIENT.append(RayWorkers(s.ray_address, workers=s.device_workers, threads=s.worker_threads,
                                          fake_gpus=s.fake_gpus, worker_env=WORKER_ENV))
            else:
                from attnlab.service.child import ChildWorker

                _CLIENT.append(ChildWorker(env=WORKER_ENV, threads=s.worker_threads))
        return _CLIENT[0]


def start() -> None:
    """Make the client now, in the background (a server starts its device worker while it starts)."""
    threading.Thread(target=client, name="attnlab-service-start", daemon=True).start()


def send(request: Request) -> Reply:
    return client().call(request)


def call(fn, *args, **kwargs):
    """fn(*args, **kwargs) run by the device worker that owns it; its value, or its exception raised here."""
    return send(Request.of(fn, *args, **kwargs)).unwrap()


def workers() -> list[WorkerInfo]:
    """Every device worker's figures now (attnlab.service.worker.WorkerInfo), those that answer."""
    return client().infos()


READY_WAIT_S = 2.0  # how long ready() waits for a check (a probe's timeout is 5 s)
READY_KEEP_S = 2.0  # how long a check's answer is reused (probes of several kinds, a curl, come together)


class _Readiness:
    """One check at a time, in its own thread: callers wait at most READY_WAIT_S, never on a hung check."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answer: str | None = "not checked yet"
        self.at = -READY_KEEP_S
        self.thread: threading.Thread | None = None

    def check(self) -> None:
        try:
            answer = client().ready()
        except Exception as e:  # noqa: BLE001 (a sentence, never an exception)
            answer = f"The device service cannot be reached: {type(e).__name__}: {e}"
        with self.lock:
            self.answer, self.at = answer, time.monotonic()

    def get(self, wait: float) -> str | None:
        with self.lock:
            if time.monotonic() - self.at < READY_KEEP_S:
                return self.answer
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self.check, name="attnlab-ready", daemon=True)
                self.thread.start()
            thread = self.thread
        thread.join(wait)
        with self.lock:
            if thread.is_alive():
                return f"The device service did not answer within {wait:.0f} s."
            return self.answer


_READINESS = _Readiness()


def ready(wait: float = READY_WAIT_S) -> str | None:
    """None when the device service answers (the child: its worker is up or being started again; Ray: the cluster's
    head answers); else a sentence saying why not. Within about `wait` seconds, and never raises."""
    return _READINESS.get(wait)  # the module's current one (reset() replaces it)


def reset() -> None:
    """Close this process's client (tests; a new one is made on next use), and forget the last readiness check."""
    global _READINESS
    _READINESS = _Readiness()
    with _LOCK:
        while _CLIENT:
            _CLIENT.pop().close()
