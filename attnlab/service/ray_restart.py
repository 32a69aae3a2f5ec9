"""A device worker Ray is starting again: how a call learns it (Restarting, never run, so sent again), and how the
callers of a UI process wait for the new process together (REVIVAL) instead of each meeting Ray's refusals.

A call that met the dying process is not this: it may be what killed it, so it is a sentence (ray_link.died)."""

from __future__ import annotations

import contextlib
import threading
import time

from attnlab.service.ray_link import connection_failure, died
from attnlab.service.request import WorkerLost

# how long a request, or a page's look at the workers, waits for a worker that Ray is restarting (after a crash
# in native code, or a killed process: a new process takes seconds, JAX's GPU client included)
RESTART_WAIT_S = 60.0
POLL_S = 0.5  # how often a worker Ray is restarting is asked again
RESTARTING = ("The GPU worker is restarting (Ray is starting it again after it stopped) and did not answer within "
              f"{RESTART_WAIT_S:.0f} s: try again shortly.")


def refusal(e: BaseException, learners: bool) -> WorkerLost:
    """What a request raises when its actor failed it (`e`): Restarting where Ray refused it while it restarts the
    actor (never run), else WorkerLost with died()'s sentence (it died serving it, or the call met its death)."""
    return Restarting(RESTARTING) if restarting(e) else WorkerLost(died(e, learners))


class Restarting(WorkerLost):
    """Ray refused the call: its actor is restarting (the call never ran; RayWorkers.call sends it again)."""


_REFUSED = [-1e9]  # when a call was last refused as restarting, in this process (restarting_now)


def restarting(e: BaseException) -> bool:
    """Whether `e` is Ray refusing a call because its actor is restarting: the call never ran, so sending it again
    once the actor is back is safe (a call in flight when the actor died says "RpcError" instead: not this)."""
    import ray

    unavailable = getattr(ray.exceptions, "ActorUnavailableError", None)
    refused = unavailable is not None and isinstance(e, unavailable) and "actor is restarting" in str(e)
    if refused:
        _REFUSED[0] = time.monotonic()
    return refused


def answered(actor, deadline: float) -> bool:
    """Whether `actor` answers a probe (`info`) before `deadline`: one sent every POLL_S, each without waiting for
    the last to be refused, so the first sent after the new process is up answers within POLL_S of it."""
    import ray

    pending: list = []
    next_at = 0.0
    while (t := time.monotonic()) < deadline:
        if t >= next_at:
            pending.append(actor.info.remote())
            next_at = t + POLL_S
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, min(next_at, deadline) - time.monotonic()))
        for ref in ready:
            try:
                ray.get(ref)
                return True
            except Exception as e:  # still restarting, or dead again: probe on until the deadline
                if connection_failure(e):
                    raise
                restarting(e)  # the pages' spinners say so while it lasts (restarting_now)
    return False


class Revival:
    """One wait per worker for the process Ray is starting again, shared by the callers of this process.

    Ray refuses a call made while it restarts an actor ("The actor is restarting") only after its wait for the old
    process's death info (`timeout_ms_task_wait_for_death_info`, 1 s) and that wait's next check: 2.0 s each on a
    local Ray 2.60 (docs/design-notes.md, "On Ray"). A caller that sent, heard "restarting" and sent again met the
    new process up to 2.5 s after it could answer (4.3 s against 1.9-2.4 s for one restart in five here). Here
    the first refused caller probes (`answered`), every other caller of that worker waits for it (`join`), and
    each sends its call once a probe is answered."""

    def __init__(self):
        self._lock = threading.Lock()
        self._watches: dict[str, threading.Event] = {}

    def join(self, name: str, deadline: float) -> None:
        """Wait for the watch of `name` under way, if any (a restart another call found), before sending."""
        with self._lock:
            done = self._watches.get(name)
        if done is not None:
            done.wait(max(0.0, deadline - time.monotonic()))

    def wait(self, name: str, actor, deadline: float) -> None:
        """Until the worker `name` (`actor`, refused as restarting) answers a probe, or `deadline`."""
        done = self._begin(name)
        if done is None:
            self.join(name, deadline)
            return
        try:
            answered(actor, deadline)
        finally:
            self._end(name, done)

    def wait_all(self, actors: dict, deadline: float) -> None:
        """`wait` for each worker (name -> actor) refused as restarting."""
        for name, actor in actors.items():
            self.wait(name, actor, deadline)

    def watch(self, name: str, actor, link, deadline: float) -> None:
        """`wait` in the background for the worker `name`, whose process died under a call, so that the calls made
        after it are sent once the new process answers (`join`) instead of into Ray's refusals; over `link`."""
        done = self._begin(name)
        if done is None:
            return

        def run() -> None:
            try:
                with contextlib.suppress(Exception), link.using():  # a broken connection: its callers hear of it
                    answered(actor, deadline)
            finally:
                self._end(name, done)

        threading.Thread(target=run, name="attnlab-ray-revival", daemon=True).start()

    def active(self) -> bool:
        """Whether a worker of this process is being waited for (a death or a refusal met, no probe answered yet)."""
        return bool(self._watches)

    def _begin(self, name: str) -> threading.Event | None:
        """A new watch of `name` (the event its end sets), or None where one is under way."""
        with self._lock:
            if name in self._watches:
                return None
            done = self._watches[name] = threading.Event()
            return done

    def _end(self, name: str, done: threading.Event) -> None:
        with self._lock:
            self._watches.pop(name, None)
        done.set()


REVIVAL = Revival()


def restarting_now() -> bool:
    """Whether a worker of this process is being started again: one is watched (REVIVAL, from the death a call met:
    Ray's first refusal comes 2 s later, and none at all where the new process is quicker), or a call was refused as
    restarting in the last 2 s (its waiting calls ask every 0.5 s)."""
    return REVIVAL.active() or time.monotonic() - _REFUSED[0] < 2.0
