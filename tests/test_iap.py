"""IAP's signed header (attnlab/iap.py): a request without a valid assertion is refused, by the check itself
(tokens signed here with a key of our own, as IAP signs with its), by the ASGI middleware serve.py puts in
front of Streamlit, and by a real `python serve.py` started with ATTNLAB_IAP_AUDIENCE set."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("google.auth")
pytest.importorskip("cryptography")

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from google.auth import crypt, jwt  # noqa: E402

from attnlab import iap  # noqa: E402
from tests import asgi_util  # noqa: E402

PROJECT_NUMBER = "123456789012"
AUDIENCE = f"/projects/{PROJECT_NUMBER}/global/backendServices/4242"
PREFIX = f"/projects/{PROJECT_NUMBER}/global/backendServices/"


def _key_pair(kid: str):
    private = ec.generate_private_key(ec.SECP256R1())
    pem_private = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())
    pem_public = private.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return crypt.ES256Signer.from_string(pem_private, key_id=kid), pem_public


SIGNER, PUBLIC = _key_pair("iap-key-1")
OTHER_SIGNER, _ = _key_pair("iap-key-1")  # same key id, another key: a forgery


def _token(signer=SIGNER, **claims) -> str:
    now = int(time.time())
    payload = {"iss": iap.ISSUER, "aud": AUDIENCE, "sub": "accounts.google.com:1", "email": "learner@example.edu",
               "iat": now, "exp": now + 600, **claims}
    return jwt.encode(signer, payload).decode()


def _keys(fetched: list | None = None) -> iap.Keys:
    def fetch():
        if fetched is not None:
            fetched.append(1)
        return {"iap-key-1": PUBLIC}

    return iap.Keys(fetch=fetch)


def test_a_token_iap_signed_for_this_backend_is_accepted():
    claims = iap.verify(_token(), AUDIENCE, _keys())
    assert claims["email"] == "learner@example.edu"
    assert iap.verify(_token(), PREFIX, _keys())["aud"] == AUDIENCE  # any backend service of the project


@pytest.mark.parametrize(("token", "why"), [  # made when the test runs: a token made at collection expires in a long suite
    (lambda: "", "no x-goog-iap-jwt-assertion header"),
    (lambda: "not-a-jwt", "not a JWT"),
    (lambda: _token(signer=OTHER_SIGNER), "does not verify"),
    (lambda: _token(exp=int(time.time()) - 3600, iat=int(time.time()) - 7200), "does not verify"),
    (lambda: _token(iss="https://accounts.google.com"), "issuer"),
    (lambda: _token(aud="/projects/999/global/backendServices/4242"), "is for"),
    (lambda: jwt.encode(SIGNER, {"iss": iap.ISSUER, "aud": AUDIENCE}, header={"alg": "RS256"}).decode(), "not ES256"),
])
def test_a_request_without_a_valid_assertion_is_refused(token, why):
    with pytest.raises(iap.Refused, match=why):
        iap.verify(token(), AUDIENCE, _keys())


def test_a_prefix_audience_admits_only_this_projects_backends():
    with pytest.raises(iap.Refused, match="is for"):
        iap.verify(_token(aud="/projects/1234567890123/global/backendServices/1"), PREFIX, _keys())


def test_the_keys_are_fetched_once_and_again_only_for_an_unknown_key():
    fetched = []
    keys = _keys(fetched)
    for _ in range(5):
        iap.verify(_token(), AUDIENCE, keys)
    assert len(fetched) == 1
    unknown, _ = _key_pair("iap-key-2")
    with pytest.raises(iap.Refused, match="not one of IAP's keys"):
        iap.verify(_token(signer=unknown), AUDIENCE, keys)
    assert len(fetched) == 1  # fetched a minute ago: not again for every forged key id


def test_no_audience_means_no_check():
    assert iap.audience_from_env({}) == ""
    assert iap.audience_from_env({"ATTNLAB_IAP_AUDIENCE": f" {AUDIENCE} "}) == AUDIENCE
    with pytest.raises(ValueError):
        iap.RequireIap(app=None, audience="")


# ---------------------------------------------------------------------------------------------
# the middleware, as serve.py stacks it in front of Streamlit


def _call(scope: dict) -> tuple[list[dict], bool]:
    """Run RequireIap on one request; (what it sent, whether the app behind it was reached)."""
    return asgi_util.call(lambda app: iap.RequireIap(app, audience=AUDIENCE, base="", keys=_keys()), scope)


def _scope(kind: str = "http", path: str = "/", token: str | None = None) -> dict:
    headers = [(b"host", b"lab.example.edu")] + ([(iap.HEADER, token.encode())] if token is not None else [])
    return {"type": kind, "path": path, "method": "GET", "headers": headers, "client": ("10.0.0.9", 5555)}


def test_the_middleware_refuses_a_request_without_a_valid_assertion(capfd):
    for token in (None, "", _token(signer=OTHER_SIGNER)):
        sent, reached = _call(_scope(token=token))
        assert not reached
        assert sent[0]["status"] == 401
        assert b"Identity-Aware Proxy" in sent[1]["body"]
    assert "attnlab-iap: refused http / from 10.0.0.9" in capfd.readouterr().err


def test_the_middleware_closes_a_websocket_without_a_valid_assertion():
    sent, reached = _call(_scope("websocket", "/_stcore/stream"))
    assert not reached and sent == [{"type": "websocket.close", "code": 1008}]


def test_the_middleware_serves_a_request_iap_signed():
    sent, reached = _call(_scope(token=_token()))
    assert reached and sent[0]["status"] == 200


def test_the_health_check_needs_no_assertion():
    # the load balancer's health check and the kubelet's probes do not pass through IAP
    sent, reached = _call(_scope(path="/_stcore/health"))
    assert reached
    sent, reached = _call(_scope(path="/_stcore/healthz"))
    assert not reached


# ---------------------------------------------------------------------------------------------
# a real server


def _get(url: str, headers: dict | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


def test_serve_py_behind_iap_refuses_a_request_without_a_valid_assertion():
    from browser_util import StreamlitServer

    with StreamlitServer(env={"ATTNLAB_WARM": "0", "ATTNLAB_IAP_AUDIENCE": PREFIX}) as srv:
        assert _get(srv.url + "/_stcore/health") == 200
        assert _get(srv.url + "/") == 401
        assert _get(srv.url + "/causal", {"x-goog-iap-jwt-assertion": _token(signer=OTHER_SIGNER)}) == 401
        assert "attnlab-iap: refused http /" in srv.log()


@pytest.mark.parametrize("kind", ["http", "websocket"])
def test_the_servers_own_warm_up_passes_both_doors_and_nobody_else_does(kind):
    """pages/opening.py's visit of the class's shapes carries doors.SELF over the loopback: both doors let it in; the
    header from elsewhere, or another value over the loopback, is refused like any request without IAP's header."""
    from attnlab import doors, token_door

    def scope(client: str, value: str) -> dict:
        return {**_scope(kind, "/_stcore/stream"), "client": (client, 5555),
                "headers": [(b"host", b"127.0.0.1"), (doors.SELF_HEADER.encode(), value.encode())]}

    for door in (lambda app: iap.RequireIap(app, audience=AUDIENCE, keys=_keys()),
                 lambda app: token_door.RequireToken(app, token="s3cret")):
        assert asgi_util.call(door, scope("127.0.0.1", doors.SELF))[1]
        assert asgi_util.call(door, scope("::1", doors.SELF))[1]
        assert asgi_util.call(door, scope("::ffff:127.0.0.1", doors.SELF))[1]  # a dual-stack server's IPv4 client
        assert not asgi_util.call(door, scope("::ffff:10.0.0.9", doors.SELF))[1]
        assert not asgi_util.call(door, scope("10.0.0.9", doors.SELF))[1]  # the secret, but not from this machine
        assert not asgi_util.call(door, scope("127.0.0.1", doors.SELF[:-1] + "x"))[1]
        assert not asgi_util.call(door, scope("127.0.0.1", ""))[1]
