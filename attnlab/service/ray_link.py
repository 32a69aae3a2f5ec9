"""What a failure of the connection to Ray looks like, told apart from a device worker's death (ray_workers.py).

A Ray client (ray://) never recovers on its own from its head's restart. Reproduced with a local head killed
and started again on the same ports under a UI process (tests/test_service.py does it): the request in flight
waited out the client's reconnect grace period and raised ConnectionError ("Failed during this or a previous
request ... Attempted to reconnect a session that has already been cleaned up": grpc NOT_FOUND, the new head
does not know the old session), the next one ConnectionError ("Request can't be sent because the Ray client
has already been disconnected"), and every later one a bare Exception ("Ray Client is not connected"), for
good; a call while the client was trying its reconnect raised grpc's ValueError ("Cannot invoke RPC on closed
channel!"). So: a connection failure is ConnectionError, grpc's RpcError or its closed-channel ValueError, Ray's
RaySystemError or RpcError, or any exception while Ray says it is not connected; an actor's death
(RayActorError) is not one.

A connection can also take about 41 s to fail: the head's Ray client server starts a session process for each
client, and that process dies at birth now and then (a gRPC fork race in Ray's proxier: ray-project/ray#63202,
open); ray.init then waits for "Initialization failure from server", and nothing on the client's side ends the wait
sooner (ray.shutdown from another thread does not). In CPU tests of a head restarted under a UI (tests/test_service.py)
it happened to about one connection in three, a first one or a reconnect; the next attempt connected in 2-4 s.
Waiting for the head's `ray health-check --component ray_client_server` first did not avoid it. So a connection is
dialled `hedged`: another attempt beside it when the first has not answered in HEDGE_S, the first to connect kept
(a Ray client may hold several connections, each in a client context of its own: ray.init's allow_multiple).
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# how long Ray's client retries a broken connection before it says so (RAY_CLIENT_RECONNECT_GRACE_PERIOD; its
# default, 30 s, is how long a page hung after the head died; a restarted head refuses the old session anyway)
GRACE_S = "5"
# how long Ray's client waits for a head to answer when it connects: its first wait, then the most (its defaults,
# 5 and 30 s with 5 s more each of 3 tries, made a UI that met a head still starting wait about 50 s before it could
# try again: in a rehearsal one UI replica was ready 80 s after it started, the other at 30 s). A head that answers
# needs well under a second; one that does not is tried again on the next request anyway.
CONNECT_S = {"RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S": "1", "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": "2"}
# a connection not made within HEDGE_S is tried again beside it (one made took 2-4 s on this CPU, a stuck one 41 s),
# with at most DIALS attempts at once
HEDGE_S = 6.0
DIALS = 3
LOST = ("The connection to the GPU workers was lost (the Ray cluster's head restarted or cannot be reached); "
        "reconnecting: press the button again in a few seconds.")

# the entry points that run a learner's program (under attnlab/yourturn/suspects.py's markers)
LEARNERS = frozenset({"attnlab.yourturn.grade:check", "attnlab.yourturn.timed:time_solution",
                      "attnlab.service.faults:learner_abort", "attnlab.service.faults:learner_hang"})


def died(e: BaseException, learners: bool) -> str:
    """The sentence for a request whose actor died serving it (`learners`: it ran a learner's program, which the
    restarted actor remembers and refuses: the marker its dead process left, attnlab/yourturn/suspects.py)."""
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
    """dial() in a thread, and again beside it each `every_s` s while none has answered (`most` at once at most):
    the first that succeeds is returned and any that succeed later are closed; when every one fails, the last
    failure is raised. Why by hand: concurrent.futures' threads are joined at exit, and a stuck dial would hold a
    stopping UI pod for its 41 s (these are daemon threads)."""
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
