"""front.py, the front of `serve.py --workers K`: which worker a connection reaches, and that the
bytes pass unchanged (two small HTTP servers stand in for Streamlit workers)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import front  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from st_client import run  # noqa: E402  (asyncio.run in a thread: Playwright's loop may run in this one)

GET = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def test_the_cookie_names_a_worker_only_when_it_is_one_of_them():
    with_cookie = b"GET / HTTP/1.1\r\nHost: x\r\nCookie: a=1; attnlab_worker=1; b=2\r\n\r\n"
    assert front.worker_of(with_cookie, 2) == 1
    assert front.worker_of(with_cookie, 1) is None  # worker 1 of a one-worker server: none
    assert front.worker_of(GET, 2) is None
    assert front.worker_of(b"GET / HTTP/1.1\r\nCookie: attnlab_worker=x\r\n\r\n", 2) is None
    assert front.worker_of(b"GET / HTTP/1.1\r\nCookie: not_attnlab_worker=1\r\n\r\n", 2) is None


def test_a_request_without_the_cookie_asks_for_one_response_and_its_response_gets_the_cookie():
    head = front.closing(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
    assert head == b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    response = front.with_cookie(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", 3)
    assert response.endswith(b"Set-Cookie: attnlab_worker=3; Path=/; HttpOnly; SameSite=Lax\r\n\r\n")
    assert front.is_websocket(b"GET /_stcore/stream HTTP/1.1\r\nUpgrade: WebSocket\r\n\r\n")
    assert not front.is_websocket(GET)


async def _worker(name: bytes):
    """A one-line HTTP server that answers its name and closes."""
    async def handle(r, w):
        await r.readuntil(b"\r\n\r\n")
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(name), name))
        await w.drain()
        w.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _ask(port: int, request: bytes) -> bytes:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(request)
    await w.drain()
    data = await asyncio.wait_for(r.read(), 10)
    w.close()
    return data


def test_browsers_are_spread_over_the_workers_and_each_stays_on_its_own():
    async def main():
        (a, pa), (b, pb) = await _worker(b"A"), await _worker(b"B")
        ready = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(front.serve("127.0.0.1", 0, [("127.0.0.1", pa), ("127.0.0.1", pb)],
                                               ready=lambda s, f: ready.set_result((s, f))))
        server, _ = await ready
        port = server.sockets[0].getsockname()[1]
        first, second = await _ask(port, GET), await _ask(port, GET)
        pinned = [await _ask(port, b"GET / HTTP/1.1\r\nCookie: attnlab_worker=1\r\n\r\n") for _ in range(3)]
        a.close()  # worker A goes away: a browser pinned to it is served by B
        await a.wait_closed()
        moved = await _ask(port, b"GET / HTTP/1.1\r\nCookie: attnlab_worker=0\r\n\r\n")
        task.cancel()
        b.close()
        return first, second, pinned, moved

    first, second, pinned, moved = run(main())
    assert first.endswith(b"A") and b"Set-Cookie: attnlab_worker=0;" in first
    assert second.endswith(b"B") and b"Set-Cookie: attnlab_worker=1;" in second  # the next browser: the other worker
    assert all(p.endswith(b"B") and b"Set-Cookie" not in p for p in pinned)
    assert moved.endswith(b"B")


async def _front_of_one():
    """A front before one worker: (its task, its port)."""
    _, pa = await _worker(b"A")
    ready = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(front.serve("127.0.0.1", 0, [("127.0.0.1", pa)], ready=lambda s, f: ready.set_result(s)))
    return task, (await ready).sockets[0].getsockname()[1]


def test_a_client_that_never_finishes_its_request_head_is_dropped(monkeypatch):
    monkeypatch.setattr(front, "HEAD_TIMEOUT_S", 0.2)

    async def main():
        task, port = await _front_of_one()
        data = await _ask(port, b"GET / HTTP/1.1\r\nHost: slow")  # no blank line: never a whole head
        task.cancel()
        return data

    assert run(main()) == b""


@pytest.mark.parametrize("size", [front.MAX_HEAD * 2])
def test_a_request_head_over_the_limit_is_refused(size):
    async def main():
        task, port = await _front_of_one()
        data = await _ask(port, b"GET / HTTP/1.1\r\nX: " + b"a" * size + b"\r\n\r\n")
        task.cancel()
        return data

    assert run(main()) == b""


@pytest.mark.parametrize("request_head", [
    b"GET /_stcore/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",  # headless tabs
    GET,  # browsers opening the class link at the same moment
], ids=["websockets", "first requests"])
def test_a_class_arriving_at_once_is_spread_evenly_over_the_workers(request_head):
    """The worker is counted as busy when it is chosen, not once its connection is open: twenty
    connections chosen in the same instant would otherwise all see the same least busy worker."""
    async def main():
        workers = [await _worker(name) for name in (b"A", b"B", b"C", b"D")]
        ready = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(front.serve("127.0.0.1", 0, [("127.0.0.1", p) for _, p in workers],
                                               ready=lambda s, f: ready.set_result((s, f))))
        server, _ = await ready
        port = server.sockets[0].getsockname()[1]
        answers = await asyncio.gather(*[_ask(port, request_head) for _ in range(20)])
        task.cancel()
        for s, _ in workers:
            s.close()
        return answers

    answers = run(main())
    assert sorted(a[-1:] for a in answers) == [b"A"] * 5 + [b"B"] * 5 + [b"C"] * 5 + [b"D"] * 5
