"""Identity-Aware Proxy's signed header, checked by the UI server itself (serve.py puts `RequireIap` in front).

IAP signs every request it lets through (https://cloud.google.com/iap/docs/signed-headers-howto): the header
`x-goog-iap-jwt-assertion` carries an ES256 JWT signed by one of Google's keys (KEYS_URL), issued by
`https://cloud.google.com/iap`, for `/projects/PROJECT_NUMBER/global/backendServices/BACKEND_SERVICE_ID`. A
request that came some other way (`kubectl port-forward`, another Service, a load balancer whose IAP was off
by mistake) has no header that verifies: it is refused with 401 and one log line.

    ATTNLAB_IAP_AUDIENCE   unset or empty: no check (a laptop, CI, the campus door, the quick mode). Otherwise
                           the audience a token must carry: this value, or, when it ends in "/", any audience
                           that starts with it (deploy/setup.sh sets the `.../backendServices/` prefix, as GKE
                           names the backend service after the Ingress exists; deploy/README.md narrows it).

Streamlit's health endpoint stays open: the load balancer's and kubelet's probes bypass IAP, and it answers
"ok" only. Keys are kept for an hour; an unseen key id fetches them again, at most once a minute.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping

from attnlab import doors

HEADER = b"x-goog-iap-jwt-assertion"
ISSUER = "https://cloud.google.com/iap"
KEYS_URL = "https://www.gstatic.com/iap/verify/public_key"  # {key id: PEM public key}
ALGORITHM = "ES256"
OPEN_PATHS = ("_stcore/health",)  # below the server's base path; answered without a token
KEYS_KEPT_S = 3600.0
REFETCH_AT_MOST_EVERY_S = 60.0


class Refused(Exception):
    """A request without a valid assertion; the message says why (for the log, never for the browser)."""


def audience_from_env(env: Mapping[str, str] | None = None) -> str:
    """The audience tokens must carry, or "" (no check): ATTNLAB_IAP_AUDIENCE, read by attnlab/settings.py."""
    from attnlab.settings import Settings, settings

    return (settings() if env is None else Settings.from_env(env)).iap_audience


def fetch_keys(url: str = KEYS_URL, timeout: float = 10.0) -> dict[str, str]:
    """Google's IAP public keys, {key id: PEM}."""
    with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 (a fixed https URL)
        return dict(json.load(answer))


class Keys:
    """IAP's public keys, fetched on first use, kept for KEYS_KEPT_S, fetched again for an unknown key id."""

    def __init__(self, fetch: Callable[[], Mapping[str, str]] = fetch_keys, clock: Callable[[], float] = time.monotonic):
        self._fetch, self._clock = fetch, clock
        self._keys: dict[str, str] = {}
        self._fetched_at = -float("inf")
        self._lock = threading.Lock()

    def stale(self, key_id: str | None) -> bool:
        """Whether answering for this key id needs a fetch first (the caller may do that off its event loop)."""
        now = self._clock()
        if now - self._fetched_at > KEYS_KEPT_S:
            return True
        return key_id not in self._keys and now - self._fetched_at > REFETCH_AT_MOST_EVERY_S

    def refresh(self) -> None:
        with self._lock:
            self._keys = dict(self._fetch())
            self._fetched_at = self._clock()

    def get(self, key_id: str | None) -> dict[str, str]:
        if self.stale(key_id):
            self.refresh()
        return self._keys


def token_header(token: str) -> dict:
    """The JWT's header (which key, which algorithm), read without verifying anything; {} when it does not parse."""
    import base64

    try:
        first = token.split(".")[0]
        header = json.loads(base64.urlsafe_b64decode(first + "=" * (-len(first) % 4)))
    except Exception:
        return {}
    return header if isinstance(header, dict) else {}


def verify(token: str, audience: str, keys: Keys) -> dict:
    """The token's claims when IAP signed it for `audience` (exact, or a prefix ending in "/"); else Refused."""
    from google.auth import exceptions, jwt

    if not token:
        raise Refused(f"no {HEADER.decode()} header: the request did not come through IAP")
    header = token_header(token)
    if not header:
        raise Refused("the assertion is not a JWT")
    if header.get("alg") != ALGORITHM:
        raise Refused(f"the assertion is signed with {header.get('alg')!r}, not {ALGORITHM}")
    certs = keys.get(header.get("kid"))
    if header.get("kid") not in certs:
        raise Refused(f"the assertion's key {header.get('kid')!r} is not one of IAP's keys")
    try:
        claims = jwt.decode(token, certs=certs, audience=None, clock_skew_in_seconds=30)
    except (exceptions.GoogleAuthError, ValueError) as err:
        raise Refused(f"the assertion does not verify ({err})") from None
    if claims.get("iss") != ISSUER:
        raise Refused(f"the assertion's issuer is {claims.get('iss')!r}, not {ISSUER}")
    aud = str(claims.get("aud", ""))
    if not (aud.startswith(audience) if audience.endswith("/") else aud == audience):
        raise Refused(f"the assertion is for {aud!r}, not {audience!r}")
    return claims


def _log(message: str) -> None:
    print(f"attnlab-iap: {message}", file=sys.stderr, flush=True)


class RequireIap:
    """ASGI middleware: every HTTP request and websocket below the server's base path must carry a valid IAP
    assertion (OPEN_PATHS excepted); others get 401 (a websocket is closed before it opens: 403)."""

    def __init__(self, app, audience: str, base: str = "", keys: Keys | None = None):
        if not audience:
            raise ValueError("RequireIap needs an audience (ATTNLAB_IAP_AUDIENCE)")
        self.app, self.audience, self.keys = app, audience, keys or Keys()
        prefix = "/" + base.strip("/") if base.strip("/") else ""
        self.open = {f"{prefix}/{path}" for path in OPEN_PATHS}

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or scope["path"].rstrip("/") in self.open or doors.from_self(scope):
            return await self.app(scope, receive, send)
        token = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == HEADER), "")
        try:
            if token and self.keys.stale(token_header(token).get("kid")):
                await asyncio.to_thread(self.keys.refresh)  # a network fetch: off the event loop
            verify(token, self.audience, self.keys)
        except Refused as why:
            client = (scope.get("client") or ("?",))[0]
            _log(f"refused {scope['type']} {scope['path']} from {client}: {why}")
            return await self.refuse(scope, send)
        except Exception as err:  # the keys could not be fetched: refuse, and say why
            _log(f"refused {scope['path']}: IAP's keys could not be read ({type(err).__name__}: {err})")
            return await self.refuse(scope, send)
        return await self.app(scope, receive, send)

    @staticmethod
    async def refuse(scope, send) -> None:
        await doors.refuse(scope, send, b"This lab is served through Identity-Aware Proxy; this request did not "
                                        b"come through it.\n")
