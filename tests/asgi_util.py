"""Drive an ASGI middleware (the doors in front of serve.py) through one request, as the tests of each door do."""

from __future__ import annotations

import asyncio
import concurrent.futures


def call(door, scope: dict) -> tuple[list[dict], bool]:
    """`door(app)` on one request with `scope`: (the messages it sent, whether the app behind it was reached)."""
    reached, sent = [], []

    async def app(scope, receive, send):
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"the lab"})

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a loop of its own: Playwright may run one in this thread
        pool.submit(asyncio.run, door(app)(scope, receive, send)).result()
    return sent, bool(reached)
