"""The device worker: the one process that owns a GPU, and the only code that runs on it.

    worker = DeviceWorker("device-0")
    worker.call(Request.of(runs.run, shape, ("naive", "sdpa_cudnn"), timed=True))  ->  Reply

A request names an entry point (attnlab/service/entries.py) and is served in the calling thread, so compiles
of several requests run side by side while device work goes one run at a time through `admission.DEVICE`.
Identical requests in flight share one run, and results are kept (the `RECENT` most recent, for `KEEP_S`) so a
class's repeated shapes cost one run; a result that says "try again" (a busy GPU) is returned but not kept."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import os
import threading
import time

from attnlab import oldest_first, threads
from attnlab.admission import DEVICE
from attnlab.budget import Budget
from attnlab.measure import disk_cache
from attnlab.service import entries
from attnlab.service.request import Reply, Request
from attnlab.settings import settings

RECENT = 2048  # results kept
KEEP_S = 12 * 3600.0


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """A worker, as a page or the instructor sees it."""

    name: str
    pid: int
    device: object  # attnlab.device.DeviceInfo
    budget: Budget
    running: int  # runs on the device now (0 or 1)
    waiting: int  # runs waiting for the device
    in_flight: int  # requests being served (compiling, waiting or running)
    served: int
    kept_hits: int  # requests answered from kept results
    busy_share: float  # share of the time since the start that a run held the device
    started_s_ago: float
    line: tuple[str, ...] = ()  # the requests (keys) on the device's line: the one on it (when `running`), then each waiting
    builds: tuple[str, ...] = ()  # the requests waiting to compile between runs (tuned compiles never overlap a run)
    building: tuple[str, ...] = ()  # the requests compiling now
    by_page: bool = False  # the line is in order of the pages' starts (oldest_first), not of the requests' arrivals


class DeviceWorker:
    def __init__(self, name: str = "device-0"):
        threading.Thread(target=disk_cache.bound, name="attnlab-cache-bound", daemon=True).start()
        self.name = name
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._recent: collections.OrderedDict[str, tuple[float, Reply]] = collections.OrderedDict()
        self._in_flight: dict[str, concurrent.futures.Future] = {}
        self._sessions: dict[str, set[str]] = {}  # a request in flight -> the sessions waiting for it
        self._threads: dict[str, int] = {}  # a request in flight -> the thread computing it
        self.served = self.kept_hits = 0

    def busy(self) -> bool:
        """Whether a request is being served (compiling, waiting or running)."""
        return bool(self._in_flight)

    def call(self, request: Request) -> Reply:
        t0 = time.perf_counter()
        key = request.key
        with self._lock:
            self.served += 1
            found = self._recent.get(key)
            if found is not None and time.monotonic() - found[0] < KEEP_S:
                self._recent.move_to_end(key)
                self.kept_hits += 1
                self._log(request, "kept", t0)
                return dataclasses.replace(found[1], cached=True, seconds=0.0)
            mine = key not in self._in_flight
            future = self._in_flight.setdefault(key, concurrent.futures.Future())
            self._sessions.setdefault(key, set()).add(request.session)
            if mine:
                self._threads[key] = threading.get_ident()
                DEVICE.abandon([threading.get_ident()], False)  # a mark left on this pool thread is not this request's
        if not mine:  # another thread computes this very request: its answer is ours
            try:
                return future.result()
            finally:
                self._log(request, "shared", t0)
        try:
            with DEVICE.ledger() as spent:
                reply = self._compute(request)
            reply = dataclasses.replace(reply, worker=self.name, seconds=time.perf_counter() - t0)
            self._log(request, "computed", t0, reply.error, spent)
            with self._lock:
                if reply.kept and reply.error is None:
                    self._recent[key] = (time.monotonic(), reply)
                    while len(self._recent) > RECENT:
                        self._recent.popitem(last=False)
            future.set_result(reply)
            return reply
        except BaseException as e:  # noqa: BLE001 (handed to the threads waiting on this request too)
            future.set_exception(e)
            raise
        finally:
            with self._lock:
                self._in_flight.pop(key, None)
                self._sessions.pop(key, None)
                self._threads.pop(key, None)
                DEVICE.abandon([threading.get_ident()], False)

    def _log(self, request: Request, how: str, t0: float, error: BaseException | None = None,
             spent: dict | None = None) -> None:
        """One JSON line per request when ATTNLAB_REQUEST_LOG names a file (where a class's time went, with
        `DEVICE.ledger`'s split); short lines appended whole, so processes share one file."""
        path = settings().request_log
        if not path:
            return
        line_t = time.time()
        line = {"t": line_t, "worker": self.name, "fn": request.fn.split(":")[-1], "what": request.describe()[:160],
                "how": how, "s": round(time.perf_counter() - t0, 4), "timed": request.timed,
                "page_s": round(line_t - request.since, 3) if request.since else None,  # its page's age as it ended
                "error": type(error).__name__ if error is not None else None,
                **{k: round(v, 4) for k, v in (spent or {}).items()}}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")

    @staticmethod
    def _compute(request: Request) -> Reply:
        try:
            entry = entries.get(request.fn)
        except KeyError as e:
            return Reply(error=e, kept=False)
        threads.serve_many_threads_once_imported()  # its requests are threads of this process (attnlab.threads says why)
        try:
            # every launch inside needs a turn (DEVICE.launch); the oldest page's work first (attnlab.oldest_first)
            with DEVICE.serving(), oldest_first.page_began(request.since):
                value = entry.fn(*request.args, **dict(request.kwargs))
        except Exception as e:  # an expected failure (over budget, busy, a backend's error) travels as a value
            return Reply(error=_portable(e), kept=False)
        return Reply(value=value, kept=entry.keep(value))

    def info(self) -> WorkerInfo:
        from attnlab import device

        s = DEVICE.stats
        now = DEVICE.line()
        with self._lock:
            key_of = {thread: key for key, thread in self._threads.items()}
        keys = lambda threads: tuple(key_of.get(t, "") for t in threads)  # noqa: E731
        return WorkerInfo(self.name, os.getpid(), device.info(), DEVICE.budget, int(now.holder is not None),
                          len(now.runs), len(self._in_flight), self.served, self.kept_hits,
                          s.busy_s / max(time.monotonic() - s.since, 1e-9), time.monotonic() - self.started,
                          keys(((now.holder,) if now.holder is not None else ()) + now.runs),
                          tuple(dict.fromkeys(keys(now.builds))), tuple(dict.fromkeys(keys(now.building))),
                          settings().oldest_first)

    def drop(self, sessions: list[str]) -> int:
        """`sessions` (browser tabs) ended: each request in flight only they wait for leaves the device's line
        (admission.Abandoned); how many. Never a session-less one (CLI, warm-up); one running finishes."""
        gone = set(sessions)
        with self._lock:  # held, so a thread is marked only while it computes the request found here
            held = [self._threads[k] for k, waiting in self._sessions.items() if k in self._threads and waiting <= gone]
            DEVICE.abandon(held)
        return len(held)

    def forget(self) -> int:
        """Drop every kept result (an instructor's "clear"); how many there were."""
        with self._lock:
            n = len(self._recent)
            self._recent.clear()
        return n


def _portable(e: Exception) -> Exception:
    """The exception itself when it survives pickling (to another process), else a RuntimeError with its words."""
    import pickle

    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")
