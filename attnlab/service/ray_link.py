"""The UI process's connection to Ray (Link), and what a failure of it looks like, told apart from a device
worker's death (ray_workers.py holds the workers and reconnects through a Link).

A Ray client (ray://) never recovers on its own from its head's restart (tests/test_service.py reproduces it).
So a connection failure is ConnectionError, grpc's RpcError or its closed-channel ValueError, Ray's
RaySystemError or RpcError, or any exception while Ray says it is not connected; an actor's death
(RayActorError) is not one.

A connection can also hang about 41 s (ray-project/ray#63202: the head's session process for it dies at
birth), and nothing on the client's side ends that wait. So a connection is dialled `hedged`: another attempt
beside it after HEDGE_S without an answer, the first to connect kept."""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# how long Ray's client retries a broken connection before it says so (RAY_CLIENT_RECONNECT_GRACE_PERIOD; its
# default, 30 s, is how long a page hung after the head died)
GRACE_S = "5"
# how long Ray's client waits for a head to answer when it connects, first and at most (its defaults kept a UI
# that met a starting head waiting about 50 s; a head that answers needs well under a second)
CONNECT_S = {"RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S": "1", "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": "2"}
# a connection not made within HEDGE_S is tried again beside it, with at most DIALS attempts at once
HEDGE_S = 6.0
DIALS = 3
LOST = ("The connection to the GPU workers was lost (the Ray cluster's head restarted or cannot be reached); "
        "reconnecting: press the button again in a few seconds.")

NAMESPACE = "attnlab"

# the entry points that run a learner's program (under attnlab/yourturn/suspects.py's markers)
LEARNERS = frozenset({"attnlab.yourturn.grade:check", "attnlab.yourturn.timed:time_solution",
                      "attnlab.service.faults:learner_abort", "attnlab.service.faults:learner_hang"})


def now() -> str:
    """The wall clock in the log's lines (a head fault's timeline is read against the pods' own logs)."""
    return time.strftime("%H:%M:%S")


class Link:
    """One connection to Ray: "local" (a cluster of its own), "auto" (this node's) or "ray://host:port" (a UI
    pod's: Ray's client, dialled `hedged`, each attempt its own client context, set per thread by `using`)."""

    def __init__(self, address: str, fake_gpus: int = 0, worker_env: dict[str, str] | None = None):
        self.address, self.fake_gpus, self.worker_env = address, fake_gpus, worker_env or {}
        self._client = None  # a ray:// connection: (Ray's ClientContext, its client context)
        if address.startswith("ray://"):
            os.environ.setdefault("RAY_CLIENT_RECONNECT_GRACE_PERIOD", GRACE_S)
            for name, value in CONNECT_S.items():  # read when Ray's client module is first imported: by ray.init
                os.environ.setdefault(name, value)

    def open(self) -> None:
        """Connect (never to a cluster a stale /tmp/ray pointer names, for "local")."""
        import ray

        if self.address.startswith("ray://"):
            why = reachable(self.address)  # a head that does not even accept TCP: ray.init would retry it 30 s
            if why:
                raise ConnectionError(why)
            self._client = hedged(self._dial, lambda client: client[0].disconnect(), HEDGE_S)  # read now: a test sets it
        elif not ray.is_initialized():
            if self.address == "local":
                root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
                path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH", "")]))  # Ray itself too
                lasting(lambda: ray.init(address="local", namespace=NAMESPACE, include_dashboard=False,
                                         log_to_driver=False, logging_level="warning",  # type: ignore[arg-type]
                                         # (Ray says `logging_level: int`, yet takes a level's name)
                                         num_gpus=self.fake_gpus or None,
                                         runtime_env={"env_vars": {"PYTHONPATH": path, **self.worker_env}}))
            else:
                ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False,
                         logging_level="warning")  # type: ignore[arg-type]  # a level's name, as above

    def close(self) -> None:
        """End this connection (a ray:// one only: ray.shutdown would end every client context)."""
        import ray

        with contextlib.suppress(Exception):
            if self._client is not None:
                self._client[0].disconnect()
            else:
                ray.shutdown()

    def _dial(self):
        """One connection over ray://, in a client context of its own (the hedged attempts beside it have theirs)."""
        import ray
        from ray.util.client import ray as client

        t0, outcome = time.monotonic(), "connected"
        try:
            context = ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False, allow_multiple=True,
                               logging_level="warning")  # type: ignore[arg-type]  # a level's name, as above
            with context:  # on this thread only: Ray's ClientContext swaps contexts in a field of its own
                return context, client.get_context()
        except Exception as e:
            outcome = f"{type(e).__name__}: {e}"[:200]
            raise
        finally:
            if time.monotonic() - t0 > HEDGE_S:  # a stuck attempt (another was started beside it)
                print(f"attnlab {now()}: an attempt to connect to Ray at {self.address} took "
                      f"{time.monotonic() - t0:.1f} s ({outcome})", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def using(self):
        """Ray's calls inside it go over this connection (a ray:// one is a client context, set per thread)."""
        if self._client is None:
            yield
            return
        from ray.util.client import ray as client

        before = client.set_context(self._client[1])
        try:
            yield
        finally:
            client.set_context(before)


def lasting(start: Callable[[], object]) -> None:
    """start() in a thread that lives as long as this process, when called from any other than the main one.

    Ray's processes (its GCS, raylet, workers) are started with PR_SET_PDEATHSIG, which kills them when the
    *thread* that started them ends: a Streamlit server first asks for its client in a page's script thread, so a
    cluster started there (ATTNLAB_RAY_ADDRESS=local) died with that page's run, and the server with it ("Failed
    to connect to GCS within 60 seconds", seen 2026-12-06)."""
    if threading.current_thread() is threading.main_thread():
        start()
        return
    started: queue.Queue = queue.Queue()

    def keep() -> None:
        try:
            start()
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
            started.put(e)
            return
        started.put(None)
        threading.Event().wait()  # Ray's processes live while this thread does

    threading.Thread(target=keep, name="attnlab-ray-local", daemon=True).start()
    if (error := started.get()) is not None:
        raise error


def owner(route: str, names: list[str]) -> str:
    """The worker that owns `route`: the highest hash of (route, name) (rendezvous hashing)."""
    return max(names, key=lambda n: hashlib.sha256(f"{route}|{n}".encode()).digest())


def died(e: BaseException, learners: bool) -> str:
    """A request's sentence when its actor died (`learners`: in a learner's program, refused from now on)."""
    if learners:
        return ("The GPU worker stopped while it ran a learner's program. That program is remembered, and the lab "
                "refuses it at once from now on; Ray is starting the worker again and nothing else was lost. If it "
                "was yours, change the code (a huge shape, or far more work than the exercise needs?); if not, press "
                f"the button again. ({type(e).__name__})")
    return ("The GPU worker serving this request stopped (a crash in native code: XLA, cuDNN or a kernel compiler, "
            f"or its machine went away). Ray is starting it again: press the button again in a few seconds. "
            f"({type(e).__name__})")


def connection_failure(e: BaseException) -> bool:
    """Whether `e` says the connection to Ray failed (not an actor's death: RayActorError, told apart by _get)."""
    import ray

    types = [ConnectionError, ray.exceptions.RaySystemError, ray.exceptions.RpcError]
    with contextlib.suppress(ImportError):
        import grpc

        types.append(grpc.RpcError)
    if isinstance(e, tuple(types)):
        return True
    if isinstance(e, ValueError) and "channel" in str(e):  # grpc: "Cannot invoke RPC on closed channel!"
        return True
    try:
        return not ray.is_initialized()
    except Exception:  # noqa: BLE001 (a client that cannot even say: not connected)
        return True


def reachable(address: str, timeout: float = 2.0) -> str | None:
    """None when a ray:// head's port accepts a TCP connection (or the address is not ray://); else why not."""
    if not address.startswith("ray://"):
        return None
    netloc = address.removeprefix("ray://").partition("/")[0]
    host, colon, port = netloc.rpartition(":")
    if not colon:
        host, port = netloc, "10001"  # Ray client's default port
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
        return None
    except (OSError, ValueError) as e:
        return f"nothing answers at {address} ({type(e).__name__}: {e})"


def hedged(dial: Callable[[], T], close: Callable[[T], None], every_s: float = HEDGE_S, most: int = DIALS) -> T:
    """dial() in a thread, and again beside it each `every_s` s while none has answered (`most` at once): the
    first success is returned, later ones closed; when all fail, the last failure is raised. Daemon threads,
    as a stuck dial must not hold a stopping UI pod (concurrent.futures joins its threads at exit)."""
    results: queue.Queue = queue.Queue()

    def attempt() -> None:
        try:
            results.put((True, dial()))
        except BaseException as e:  # noqa: BLE001 (handed to the caller, raised there)
            results.put((False, e))

    started = pending = 0

    def start() -> None:
        nonlocal started, pending
        threading.Thread(target=attempt, name=f"attnlab-dial-{started}", daemon=True).start()
        started, pending = started + 1, pending + 1

    start()
    while True:
        try:
            ok, value = results.get(timeout=every_s if started < most else None)
        except queue.Empty:
            start()  # none answered in time: one more beside them
            continue
        pending -= 1
        if ok:
            if pending:
                threading.Thread(target=_close_late, args=(results, pending, close), daemon=True).start()
            return value
        if not pending:
            raise value


def _close_late(results: queue.Queue, pending: int, close: Callable) -> None:
    """Close each of the `pending` attempts still running that connects after another was kept."""
    for _ in range(pending):
        ok, value = results.get()
        if ok:
            with contextlib.suppress(Exception):
                close(value)
