"""A class on Ray: one device worker per GPU, each the child of a Ray actor (ray_actor.py) that Ray restarts if it dies.

    client = RayWorkers("auto")          # or "ray://attnlab-head:10001" from a UI pod, or "local"
    client.call(request)  ->  Reply, or WorkerLost when the actor died serving it (one refused while Ray restarts it waits)

Each worker is a named, detached actor (`attnlab-device-0`, ...) asking for one GPU, restarted by Ray without
limit and never retried; every UI process finds them by name and creates the missing ones (a class grows by
adding GPU nodes). A request goes to its route's owner (rendezvous hashing), a timing to the owner when idle,
else the least busy. A failed connection fails the request with WorkerLost and is made again in the background
(ray_link.py). Why each: docs/design-notes.md, "On Ray"."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import weakref
from typing import Any

from attnlab.service import ray_link, ray_restart
from attnlab.service.ray_actor import actor_class
from attnlab.service.ray_link import LEARNERS, LOST, NAMESPACE, Link, connection_failure, now, reachable
from attnlab.service.request import Reply, Request, WorkerLost

__all__ = ["LOST", "RayWorkers", "connection_failure", "reachable"]

PREFIX = "attnlab-device-"
REFRESH_S = 30.0  # how often a UI process looks for GPUs added to the cluster
RETRY_S = 2.0  # the shortest time between two attempts to reconnect
WAIT_S = 10.0  # how long a request waits for another thread's reconnect before it gives up


def _heal(workers: weakref.ref) -> None:
    """Reconnect every RETRY_S while broken, so a head that is back is found in seconds (held weakly)."""
    while (w := workers()) is not None and w.broken:
        with contextlib.suppress(WorkerLost):
            w._reconnect(w.generation)
        del w
        time.sleep(RETRY_S)


class RayWorkers:
    def __init__(self, address: str = "auto", *, workers: int | None = None, threads: int = 64,
                 fake_gpus: int = 0, worker_env: dict[str, str] | None = None):
        self.address, self.link = address, Link(address, fake_gpus, worker_env)
        self.wanted, self.threads = workers, threads
        self._lock = threading.Lock()
        self._reconnecting = threading.Lock()
        self._actors: dict[str, Any] = {}  # Ray's actor handles: their methods (.call.remote) are found by name
        self._sent: dict[str, int] = {}  # requests this process has in flight to each worker
        self._looked = 0.0
        self.generation = 0  # connections made so far; a failure counts only against the one it met
        self.broken = ""  # why the connection failed, until a reconnect succeeds
        self._tried = -RETRY_S  # when the last reconnect was tried
        self.reconnects = 0
        self._healer: threading.Thread | None = None
        try:
            self._connect()
        except Exception as e:
            if address == "local" or not connection_failure(e):
                raise
            self._break(f"{type(e).__name__}: {e}", f"Ray at {address} cannot be reached")  # its head is away

    def _connect(self) -> None:
        """The connection (Link.open), then the workers over it."""
        self.link.open()
        with self.link.using():
            self._found()

    def _found(self) -> None:
        """The workers, found or created, over a connection just made."""
        import ray

        # a local cluster without GPUs runs its workers on the CPU; a hosted one asks for a GPU each (it may wait)
        self.gpus_each = 1 if self.address != "local" or ray.cluster_resources().get("GPU", 0) >= 1 else 0
        with self._lock:
            self._actors = {}  # handles of the last connection are not this one's
        self._refresh(force=True)
        self.generation += 1
        self.broken = ""

    def _reconnect(self, generation: int) -> None:
        """Connect again if the connection `generation` failed and nobody has since; WorkerLost if it cannot be now."""
        if not self._reconnecting.acquire(timeout=WAIT_S):
            raise WorkerLost(LOST)
        try:
            if self.generation != generation or not self.broken:
                return  # another request reconnected meanwhile
            if time.monotonic() - self._tried < RETRY_S:
                raise WorkerLost(LOST)
            self._tried = time.monotonic()
            self.link.close()
            t0 = time.monotonic()
            try:
                self._connect()
            except Exception as e:
                why = f"{type(e).__name__}: {e}"
                if why.split(" (")[0] != self.broken.split(" (")[0]:  # each new reason once (a head fault's timeline)
                    print(f"attnlab {now()}: not yet connected to Ray at {self.address} after {time.monotonic() - t0:.1f} s: "
                          f"{why[:300]}", file=sys.stderr, flush=True)
                self.broken = why
                raise WorkerLost(LOST) from None
            self.reconnects += 1
            again = "reconnected" if self.generation > 1 else "connected"  # the first connection may be a retry too
            print(f"attnlab {now()}: {again} to Ray at {self.address} in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        finally:
            self._reconnecting.release()

    @contextlib.contextmanager
    def _connection(self):
        """Ray calls inside it: a broken connection made again first; one failing inside raises WorkerLost(LOST)."""
        generation = self.generation
        if self.broken:
            self._reconnect(generation)
            generation = self.generation
        with self.link.using():
            try:
                yield
            except WorkerLost:
                raise
            except Exception as e:
                if not connection_failure(e):
                    raise
                if self.generation == generation and not self.broken:
                    self._break(f"{type(e).__name__}: {e}", f"the connection to Ray at {self.address} failed")
                raise WorkerLost(LOST) from None

    def _break(self, why: str, what: str) -> None:
        """Broken (`what`, `why` logged): reconnected in the background (`_heal`) and by any request."""
        self.broken = why
        print(f"attnlab {now()}: {what} ({why[:300]}); reconnecting in the background", file=sys.stderr, flush=True)
        with self._lock:
            if self._healer is None or not self._healer.is_alive():
                self._healer = threading.Thread(target=_heal, args=(weakref.ref(self),), name="attnlab-ray-heal",
                                                daemon=True)
                self._healer.start()

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
            cls = actor_class()
            names = [f"{PREFIX}{i}" for i in range(n)]
            self._actors = {name: self._actors.get(name) or self._create(cls, name) for name in names}

    def _create(self, cls, name: str):
        """The named worker, made if missing (or found by name where another UI process made it first)."""
        import ray

        try:
            handle = cls.options(name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
                                 num_gpus=self.gpus_each, num_cpus=0, max_restarts=-1, max_task_retries=0,
                                 max_concurrency=self.threads).remote(name)
            ref = getattr(handle, "actor_ref", None)  # a Ray client's handle is made in the background: wait for it
            if ref is not None:
                ref.id  # noqa: B018 - raises here, under our lock, if another process took the name
            return handle
        except (ValueError, getattr(ray.exceptions, "ActorAlreadyExistsError", ValueError)):
            return ray.get_actor(name, namespace=NAMESPACE)

    @property
    def names(self) -> list[str]:
        self._refresh()
        return list(self._actors)

    def _get(self, ref, timeout: float | None = None, learners: bool = False) -> Reply:
        """The reply; WorkerLost (ray_restart.refusal) when the actor died serving it or is restarting, or the one the
        actor returned when its device worker, its child, died (ray_actor.py)."""
        import ray

        try:
            reply = ray.get(ref, timeout=timeout)
            if isinstance(reply.error, WorkerLost):
                raise reply.error
            return reply
        except (ray.exceptions.RayActorError, getattr(ray.exceptions, "ActorUnavailableError", ray.exceptions.RayActorError)) as e:
            raise ray_restart.refusal(e, learners) from None

    def _choose(self, request: Request, reserve: bool = False) -> str:
        """The owner of the request's route; a timing's owner if idle, else the least busy worker (running,
        queued, and sent by this process unanswered). `reserve`: count it as sent there."""
        names = self.names
        mine = ray_link.owner(request.route, names)
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
        """The reply; a request refused because its worker is restarting waits for it (RESTART_WAIT_S at most)."""
        deadline = time.monotonic() + ray_restart.RESTART_WAIT_S
        while True:
            with self._connection():
                name = self._choose(request, reserve=True)
                try:
                    ray_restart.REVIVAL.join(name, deadline)  # a restart another call met: sent once it answers
                    return self._get(self._actors[name].call.remote(request), learners=request.fn in LEARNERS)
                except ray_restart.Restarting:
                    if time.monotonic() > deadline:
                        raise
                except WorkerLost:  # it met the process's death: the calls after it wait for the new one
                    ray_restart.REVIVAL.watch(name, self._actors[name], self.link, deadline)
                    raise
                finally:
                    with self._lock:
                        self._sent[name] -= 1
                ray_restart.REVIVAL.wait(name, self._actors[name], deadline)

    def _infos(self, names: list[str], timeout: float, restart_s: float = 0.0) -> dict:
        """Each worker's figures (None: no answer); one Ray is restarting is waited for, `restart_s` at most."""
        import ray

        out: dict = {}
        deadline, ask = time.monotonic() + restart_s, list(names)
        while ask:
            refs = {n: self._actors[n].info.remote() for n in ask}
            ask = []
            for n, ref in refs.items():
                try:
                    out[n] = ray.get(ref, timeout=timeout)
                except Exception as e:  # a worker starting, restarting or gone: no figures for it now
                    if connection_failure(e):
                        raise  # not the worker's: the connection's (_connection says so)
                    out[n] = None
                    if ray_restart.restarting(e) and time.monotonic() < deadline:
                        ask.append(n)
            ray_restart.REVIVAL.wait_all({n: self._actors[n] for n in ask}, deadline)
        return out

    def wait_ready(self, timeout: float = 180.0) -> bool:
        """Whether every worker answered within `timeout` seconds (new or restarting actors, a reconnect: waited for)."""
        import ray

        deadline = time.monotonic() + timeout
        while True:
            try:
                with self._connection():
                    ray.get([a.info.remote() for a in self._actors.values()],
                            timeout=max(1.0, deadline - time.monotonic()))
                return True
            except Exception:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.5)

    def ready(self) -> str | None:
        """None when the cluster's head answers (workers still starting leave it ready); else a sentence."""
        import ray

        try:
            with self._connection():
                ray.cluster_resources()  # an answer from the head (its GCS), through this connection
            return None
        except WorkerLost:
            return f"The Ray cluster at {self.address} cannot be reached: {self.broken or 'reconnecting'}"[:500]

    def infos(self) -> list:
        with self._connection():
            return [i for i in self._infos(self.names, timeout=5.0, restart_s=ray_restart.RESTART_WAIT_S).values() if i is not None]

    def forget(self) -> int:
        return self._each("forget")

    def drop(self, sessions: list[str]) -> int:
        return self._each("drop", list(sessions))

    def _each(self, method: str, *args) -> int:
        """Every worker's answer to `method`, summed."""
        import ray

        with self._connection():
            return sum(ray.get([getattr(a, method).remote(*args) for a in self._actors.values()]))

    def restarting(self) -> bool:
        return ray_restart.restarting_now()

    def describe(self) -> str:
        return f"{len(self._actors)} device worker(s) on Ray ({self.address})"

    def close(self) -> None:
        pass  # the actors are detached: they serve the next UI process too
