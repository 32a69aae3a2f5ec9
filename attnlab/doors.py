"""What the doors in front of the server (attnlab/iap.py, attnlab/token_door.py) answer a request they refuse."""

from __future__ import annotations


async def refuse(scope, send, body: bytes) -> None:
    """401 with `body` as plain text; a websocket is closed before it is accepted (the server answers 403)."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
