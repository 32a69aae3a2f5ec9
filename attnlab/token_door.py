"""A one-time token at the door, for `deploy/setup.sh --quick` (a workshop of an hour, on a bare address).

The lab is opened once with `http://ADDRESS/?token=TOKEN`, as a Jupyter server is: the answer sets a cookie
with the token (HttpOnly, SameSite=Strict) and every later request of that browser, its websocket included,
carries it. Anything without the cookie or the token gets 401. Plain HTTP: the token crosses the network
unencrypted, which is why the quick mode is for an hour's workshop and never for a class (deploy/README.md).

    ATTNLAB_ACCESS_TOKEN   unset or empty: no door (read here, as attnlab/iap.py reads its own).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from attnlab import doors

COOKIE = "attnlab_token"
OPEN_PATHS = ("_stcore/health",)


def token_from_env(env: Mapping[str, str] | None = None) -> str:
    """The quick mode's token, or "" (no door): ATTNLAB_ACCESS_TOKEN, read by attnlab/settings.py."""
    from attnlab.settings import Settings, settings

    return (settings() if env is None else Settings.from_env(env)).access_token


class RequireToken:
    """ASGI middleware: the token in the query (then a cookie is set) or in the cookie, else 401."""

    def __init__(self, app, token: str, base: str = ""):
        if not token:
            raise ValueError("RequireToken needs a token (ATTNLAB_ACCESS_TOKEN)")
        self.app, self.token = app, token
        prefix = "/" + base.strip("/") if base.strip("/") else ""
        self.open = {f"{prefix}/{path}" for path in OPEN_PATHS}

    def _matches(self, given: str | None) -> bool:
        if not given:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or scope["path"].rstrip("/") in self.open or doors.from_self(scope):
            return await self.app(scope, receive, send)
        headers = {k.lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get(b"cookie", ""))
        except Exception:
            pass
        if COOKIE in cookie and self._matches(cookie[COOKIE].value):
            return await self.app(scope, receive, send)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if scope["type"] == "http" and self._matches((query.get("token") or [None])[0]):
            set_cookie = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict".encode()

            async def with_cookie(message):
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", set_cookie)]}
                await send(message)

            return await self.app(scope, receive, with_cookie)
        await doors.refuse(scope, send, b"Open the address with its token (?token=...), as the instructor gave it.\n")
