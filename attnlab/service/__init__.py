"""The device service: pages ask for work on the device and get results back; they never touch a GPU.

    from attnlab import service
    results = service.call(runs.run, shape, ("naive", "sdpa_cudnn"), timed=True)

    request.py     a Request (an entry point and its arguments) and its Reply; WorkerLost
    entries.py     the entry points a request may name: the lab's functions that run on the device
    worker.py      the device worker: owns one GPU, serves requests, shares and keeps results
    local.py       the worker in this process (the CLI and unit tests: no process boundary)
    child.py       the worker in a child process, started again when it dies (the app's default)
    ray_workers.py one worker per GPU as Ray actors (a hosted class; CPU tests with fake GPUs)

Which one serves is ATTNLAB_DEVICE (attnlab/settings.py). The client is made on first use, once per process.
"""

from __future__ import annotations

import threading

from attnlab.service.request import Reply, Request, WorkerLost
from attnlab.settings import settings

__all__ = ["Reply", "Request", "WorkerLost", "call", "client", "send", "start", "workers"]

_CLIENT: list = []
_LOCK = threading.Lock()
WORKER_ENV: dict[str, str] = {}  # what the app's device worker runs with (serve.py: the GPU's JAX_PLATFORMS)


def client():
    """This process's way to the device worker(s), made on first use as ATTNLAB_DEVICE says."""
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


def workers() -> list:
    """Every device worker's figures now (attnlab.service.worker.WorkerInfo), those that answer."""
    return client().infos()


def reset() -> None:
    """Close this process's client (tests; a new one is made on next use)."""
    with _LOCK:
        while _CLIENT:
            _CLIENT.pop().close()
