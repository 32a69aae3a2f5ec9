"""The front of a server with several Streamlit processes: one port, each browser kept on one process.

    python serve.py --workers 4 --server.port 8501      # serve.py starts the workers and this front

Why several processes: a page script is Python, and one process runs Python on one core at a time
(the interpreter lock). A class of twenty clicking through pages keeps one process's core busy
while the GPU and the machine's other cores wait (deploy/README.md, capacity). Workers are
ordinary Streamlit servers on local ports; this front is the only one learners see.

How: a TCP proxy. It reads the head of each new connection's first request and picks a worker:
the one named by the `attnlab_worker` cookie, else the one with the fewest open websockets (the
fewest cookies handed out breaks ties). Then it pipes bytes both ways until either side closes.
A request without the cookie is sent with `Connection: close` and its response gets the cookie,
so a browser's later connections (its websocket, where its session lives, and the downloads and
uploads of that session) reach the same worker. A websocket without the cookie (a headless
client) goes to the least busy worker. A worker that does not answer is skipped for the next;
a browser whose worker died gets a new session on another and its page runs again (the shape is
in the URL). Nothing here reads or changes a body.
"""

from __future__ import annotations

import asyncio
import re

COOKIE = b"attnlab_worker"
MAX_HEAD = 64 * 1024  # a request head larger than this is refused
HEAD_TIMEOUT_S = 30.0  # a client that sends no complete head in this time is dropped
_COOKIE_RE = re.compile(rb"(?:^|[;\s])" + COOKIE + rb"=(\d{1,3})(?:;|\s|$)")


def _header(head: bytes, name: bytes) -> list[bytes]:
    """Values of header `name` (lower case) in a request or response head."""
    out = []
    for line in head.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            out.append(value.strip())
    return out


def worker_of(head: bytes, workers: int) -> int | None:
    """The worker named by the request's cookie, or None (no cookie, or not a worker here)."""
    for value in _header(head, b"cookie"):
        m = _COOKIE_RE.search(value)
        if m and int(m.group(1)) < workers:
            return int(m.group(1))
    return None


def is_websocket(head: bytes) -> bool:
    return any(v.lower() == b"websocket" for v in _header(head, b"upgrade"))


def closing(head: bytes) -> bytes:
    """The request head with `Connection: close` (the worker then ends the connection after one response)."""
    lines = [ln for ln in head.split(b"\r\n") if ln and not ln.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n"


def with_cookie(head: bytes, worker: int) -> bytes:
    """A response head with the cookie that keeps this browser on `worker`."""
    cookie = b"Set-Cookie: " + COOKIE + b"=%d; Path=/; HttpOnly; SameSite=Lax" % worker
    return head[:-2] + cookie + b"\r\n\r\n"


class Front:
    def __init__(self, workers: list[tuple[str, int]]):
        self.workers = workers
        self.sockets = [0] * len(workers)  # open websockets per worker
        self.handed = [0] * len(workers)  # cookies handed out per worker

    def least_busy(self) -> int:
        return min(range(len(self.workers)), key=lambda i: (self.sockets[i], self.handed[i]))

    def _count(self, i: int, ws: bool, cookie: bool, n: int) -> None:
        if ws:
            self.sockets[i] += n
        if cookie:
            self.handed[i] += n

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(client_r.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            client_w.close()
            return
        named = worker_of(head, len(self.workers))
        ws = is_websocket(head)
        set_cookie = named is None and not ws
        first = self.least_busy() if named is None else named
        for i in [first] + [j for j in range(len(self.workers)) if j != first]:
            # counted when chosen, before the connection is awaited: a class arriving in the same
            # instant would otherwise all see one least busy worker (and all land on it)
            self._count(i, ws, set_cookie, +1)
            try:
                worker_r, worker_w = await asyncio.open_connection(*self.workers[i])
                break
            except OSError:
                self._count(i, ws, set_cookie, -1)
        else:
            client_w.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await _close(client_w)
            return
        worker_w.write(closing(head) if set_cookie else head)
        try:
            await asyncio.gather(_pipe(client_r, worker_w),
                                 _pipe(worker_r, client_w, (lambda h: with_cookie(h, i)) if set_cookie else None))
        finally:
            if ws:
                self.sockets[i] -= 1
            await _close(worker_w)
            await _close(client_w)


async def _pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter, edit_head=None) -> None:
    try:
        if edit_head is not None:
            head = await r.readuntil(b"\r\n\r\n")
            w.write(edit_head(head))
        while data := await r.read(1 << 16):
            w.write(data)
            await w.drain()
        if w.can_write_eof():
            w.write_eof()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
        w.close()


async def _close(w: asyncio.StreamWriter) -> None:
    w.close()
    try:
        await w.wait_closed()
    except (ConnectionError, OSError):
        pass


async def serve(address: str, port: int, workers: list[tuple[str, int]], ready=None) -> None:
    front = Front(workers)
    server = await asyncio.start_server(front.handle, address, port, limit=MAX_HEAD)
    if ready is not None:
        ready(server, front)
    async with server:
        await server.serve_forever()
