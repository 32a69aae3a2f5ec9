"""A class on Ray: one device worker per GPU, each a Ray actor that Ray restarts when it dies.

    client = RayWorkers("auto")          # or "ray://attnlab-head:10001" from a UI pod, or "local"
    client.call(request)  ->  Reply, or WorkerLost when the actor died while serving it

Each worker is a named, detached actor (`attnlab-device-0`, `-1`, ...) asking for one GPU
(`num_gpus=1`), restarted by Ray without limit (`max_restarts=-1`) and never retried (a request that
killed a worker would kill the next one too). Every UI process finds the same actors by name, and
creates the missing ones when the cluster has more GPUs than workers: a class grows by adding GPU
nodes. A request goes to the worker that owns its route (rendezvous hashing over the workers' names:
every request at one shape meets the worker that compiled that shape's programs, and adding a worker
moves only its share of the shapes); a timing goes to its owner when the owner is idle, else to the
least busy worker. Ray does the rest: placement on GPUs, restarts, moving the objects, the dashboard.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time

from attnlab.service.request import Reply, Request, WorkerLost

NAMESPACE = "attnlab"
PREFIX = "attnlab-device-"
REFRESH_S = 30.0  # how often a UI process looks for GPUs added to the cluster


class DeviceActor:
    """The Ray actor around a DeviceWorker (Ray's `@ray.remote` is applied in `_actor_class`)."""

    def __init__(self, name: str):
        from attnlab.service.worker import DeviceWorker
        from attnlab.studies import warm

        self.worker = DeviceWorker(name)
        # JAX's device and tokamax's import (seconds), in the background as the child worker does: Ray serves the
        # actor once this returns, so a worker restarted after a crash answers its next request in seconds
        threading.Thread(target=warm.worker_start, name="attnlab-worker-start", daemon=True).start()

    def call(self, request: Request) -> Reply:
        return self.worker.call(request)

    def info(self):
        return self.worker.info()

    def forget(self) -> int:
        return self.worker.forget()


def _actor_class():
    import ray

    return ray.remote(DeviceActor)


def owner(route: str, names: list[str]) -> str:
    """The worker that owns `route`: the highest hash of (route, name) (rendezvous hashing)."""
    return max(names, key=lambda n: hashlib.sha256(f"{route}|{n}".encode()).digest())


class RayWorkers:
    def __init__(self, address: str = "auto", *, workers: int | None = None, threads: int = 64,
                 fake_gpus: int = 0, worker_env: dict[str, str] | None = None):
        import ray

        self.address = address
        if not ray.is_initialized():
            if address == "local":
                root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
                path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH", "")]))  # Ray itself too
                ray.init(namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
                         logging_level="warning", num_gpus=fake_gpus or None,
                         runtime_env={"env_vars": {"PYTHONPATH": path, **(worker_env or {})}})
            else:
                ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="warning")
        self.wanted, self.threads = workers, threads
        # a local cluster without GPUs (a laptop, CPU tests) runs its workers on the CPU; a hosted one always asks
        # for a GPU each (its GPU pool may be at 0 nodes now: the worker waits for one)
        self.gpus_each = 1 if address != "local" or ray.cluster_resources().get("GPU", 0) >= 1 else 0
        self._lock = threading.Lock()
        self._actors: dict[str, object] = {}
        self._sent: dict[str, int] = {}  # requests this process has in flight to each worker
        self._looked = 0.0
        self._refresh(force=True)

    def _count(self) -> int:
        import ray

        return self.wanted or int(ray.cluster_resources().get("GPU", 0)) or 1

    def _refresh(self, force: bool = False) -> None:
        """The workers the cluster should have (one per GPU): found by name, the missing ones created."""
        if not force and time.monotonic() - self._looked < REFRESH_S:
            return
        n = self._count()
        with self._lock:
            self._looked = time.monotonic()
            if len(self._actors) == n and not force:
                return
            cls = _actor_class()
            actors = {}
            for i in range(n):
                name = f"{PREFIX}{i}"
                actors[name] = self._actors.get(name) or cls.options(
                    name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, num_gpus=self.gpus_each, num_cpus=0,
                    max_restarts=-1, max_task_retries=0, max_concurrency=self.threads).remote(name)
            self._actors = actors

    @property
    def names(self) -> list[str]:
        self._refresh()
        return list(self._actors)

    def _get(self, ref, timeout: float | None = None):
        import ray

        try:
            return ray.get(ref, timeout=timeout)
        except (ray.exceptions.RayActorError, getattr(ray.exceptions, "ActorUnavailableError", ray.exceptions.RayActorError)) as e:
            raise WorkerLost("The GPU worker serving this request stopped (a crash in native code: XLA, cuDNN or a "
                             "kernel compiler, or its machine went away). Ray is starting it again: press the button "
                             f"again in a few seconds. ({type(e).__name__})") from None

    def _choose(self, request: Request, reserve: bool = False) -> str:
        """The owner of the request's route; for a timing, the owner if it is idle, else the least busy worker
        (busy: what the workers say they run and queue, plus what this process has sent them and not yet
        heard back, so a burst of timings from one UI process spreads before the workers report it).
        `reserve`: count the request as sent to the chosen worker (chosen and counted under one lock)."""
        names = self.names
        mine = owner(request.route, names)
        infos = self._infos(names, timeout=2.0) if request.timed and len(names) > 1 else {}
        with self._lock:
            if infos:
                busy = {n: self._sent.get(n, 0) + (i.running + i.waiting if i is not None else 1 << 30)
                        for n, i in infos.items()}
                if busy[mine]:
                    mine = min(names, key=lambda n: (busy[n], n != mine, n))
            if reserve:
                self._sent[mine] = self._sent.get(mine, 0) + 1
        return mine

    def call(self, request: Request) -> Reply:
        name = self._choose(request, reserve=True)
        try:
            return self._get(self._actors[name].call.remote(request))
        finally:
            with self._lock:
                self._sent[name] -= 1

    def _infos(self, names: list[str], timeout: float) -> dict:
        import ray

        refs = {n: self._actors[n].info.remote() for n in names}
        out = {}
        for n, ref in refs.items():
            try:
                out[n] = ray.get(ref, timeout=timeout)
            except Exception:  # a worker starting, restarting or gone: no figures for it now
                out[n] = None
        return out

    def wait_ready(self, timeout: float = 180.0) -> bool:
        """Whether every worker answered within `timeout` seconds (a new actor imports JAX first; one that Ray
        is restarting refuses calls until it is back)."""
        import ray

        deadline = time.monotonic() + timeout
        while True:
            try:
                ray.get([a.info.remote() for a in self._actors.values()], timeout=max(1.0, deadline - time.monotonic()))
                return True
            except Exception:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.5)

    def infos(self) -> list:
        return [i for i in self._infos(self.names, timeout=5.0).values() if i is not None]

    def forget(self) -> int:
        import ray

        return sum(ray.get([a.forget.remote() for a in self._actors.values()]))

    def describe(self) -> str:
        return f"{len(self._actors)} device worker(s) on Ray ({self.address})"

    def close(self) -> None:
        pass  # the actors are detached: they serve the next UI process too
