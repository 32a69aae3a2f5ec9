"""The child's side of attnlab/service/child.py: a `DeviceWorker` serving numbered requests from one socket.

    python -m attnlab.service.child FD THREADS NAME

It imports the lab; if the word to take the device (GO) has not come yet it is a spare, and imports every entry
point's module too (`warm.spare_start`); then it waits for GO, opens JAX's device, says "ready" and serves each
request in a thread of its pool. No JAX backend is opened before GO (a spare holds no GPU memory) unless
ATTNLAB_SPARE_DEVICE asks the spare to meet its device's first uses too (`warm.spare_device`)."""

from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
import time
from multiprocessing.connection import Connection

from attnlab.service.request import Reply

GO = -1  # the message number of "take the device" (parent to child) and of "ready" (child to parent)
RECEIVED = -2  # (RECEIVED, number): the child read request `number` and serves it now (a request it never read
# cannot have caused its death: the parent sends that one to the next child)


def main(fd: int, threads: int, name: str) -> None:
    from attnlab import spans
    from attnlab.service.worker import DeviceWorker, WorkerInfo
    from attnlab.settings import settings
    from attnlab.studies import warm

    conn = Connection(fd)
    try:
        if not conn.poll(0):  # a spare: the rest of its imports while nothing waits for it
            warm.spare_start()
            if settings().spare_device:
                t0 = time.perf_counter()
                done = ", ".join(warm.spare_device(needed=lambda: conn.poll(0))) or "nothing"
                spans.log_span("spare", t0, time.perf_counter(), done)  # for scripts/request_log.py --spans
                print(f"attnlab: spare {name} (pid {os.getpid()}) met {done} before it was needed, in "
                      f"{time.perf_counter() - t0:.2f} s", file=sys.stderr, flush=True)
        conn.recv()  # GO
    except (EOFError, OSError):  # the parent is gone (or closed its spare)
        os._exit(0)
    worker = DeviceWorker(name)
    pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="attnlab-request")
    send_lock = threading.Lock()

    def reply(number: int, value) -> None:
        with send_lock:
            conn.send((number, value))

    def serve(number: int, op: str, payload) -> None:
        answer: Reply | WorkerInfo | int
        reply(RECEIVED, number)  # before any of its work
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

    device.info()  # JAX and its device, before the first request
    reply(GO, "ready")
    threading.Thread(target=warm.worker_start, args=(worker.busy,), name="attnlab-worker-start", daemon=True).start()
    while True:
        try:
            number, op, payload = conn.recv()
        except (EOFError, OSError):  # the parent is gone: so is this worker
            os._exit(0)
        pool.submit(serve, number, op, payload)
