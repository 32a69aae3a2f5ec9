"""What the doors in front of the server (attnlab/iap.py, attnlab/token_door.py) answer a request they refuse, and
the one caller they let through without a token: this server's own warm-up (pages/opening.py opens its pages at the
class's shapes over the loopback), which carries a secret made in this process and never sent anywhere else."""

from __future__ import annotations

import hmac
import ipaddress
import secrets

SELF_HEADER = "x-attnlab-self"
SELF = secrets.token_urlsafe(32)  # this process's own: a new one at every start


def loopback(host: str) -> bool:
    """127.0.0.0/8 or ::1, also as a dual-stack socket names IPv4 (::ffff:127.0.0.1)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def from_self(scope) -> bool:
    """The request came from this process: over the loopback, with `SELF` in its `SELF_HEADER`."""
    if not loopback(str((scope.get("client") or ("",))[0])):
        return False
    given = next((v for k, v in scope.get("headers", []) if k.lower() == SELF_HEADER.encode()), b"")
    return hmac.compare_digest(given, SELF.encode())


async def refuse(scope, send, body: bytes) -> None:
    """401 with `body` as plain text; a websocket is closed before it is accepted (the server answers 403)."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
