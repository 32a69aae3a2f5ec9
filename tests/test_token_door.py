"""The quick mode's door (attnlab/token_door.py): the lab opens with its one-time token, then a cookie; a request
with neither is refused, by the middleware and by a real `python serve.py` with ATTNLAB_ACCESS_TOKEN set."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from attnlab import token_door
from tests import asgi_util

TOKEN = "s3cret-token"


def _call(kind: str = "http", path: str = "/", query: str = "", cookie: str | None = None):
    headers = [(b"cookie", cookie.encode())] if cookie is not None else []
    scope = {"type": kind, "path": path, "query_string": query.encode(), "headers": headers, "method": "GET"}
    return asgi_util.call(lambda app: token_door.RequireToken(app, token=TOKEN), scope)


def test_the_token_opens_the_lab_once_and_the_cookie_thereafter():
    sent, reached = _call(query=f"token={TOKEN}")
    assert reached
    (cookie,) = [v for k, v in sent[0]["headers"] if k == b"set-cookie"]
    assert cookie.startswith(f"attnlab_token={TOKEN};".encode()) and b"HttpOnly" in cookie
    sent, reached = _call(cookie=f"attnlab_token={TOKEN}")
    assert reached and not [k for k, _ in sent[0]["headers"] if k == b"set-cookie"]
    _, reached = _call("websocket", "/_stcore/stream", cookie=f"attnlab_token={TOKEN}")
    assert reached


@pytest.mark.parametrize(("query", "cookie"), [("", None), ("token=wrong", None), ("", "attnlab_token=wrong"),
                                               ("", "attnlab_token=")])
def test_a_request_without_the_token_is_refused(query, cookie):
    sent, reached = _call(query=query, cookie=cookie)
    assert not reached and sent[0]["status"] == 401


def test_a_websocket_without_the_cookie_is_closed_and_the_health_check_is_open():
    sent, reached = _call("websocket", "/_stcore/stream", query=f"token={TOKEN}")
    assert not reached and sent == [{"type": "websocket.close", "code": 1008}]
    _, reached = _call(path="/_stcore/health")
    assert reached
    with pytest.raises(ValueError):
        token_door.RequireToken(None, token="")


def test_serve_py_with_a_token_refuses_a_request_without_it():
    from browser_util import StreamlitServer

    def status(url: str) -> int:
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                return answer.status
        except urllib.error.HTTPError as err:
            return err.code

    with StreamlitServer(env={"ATTNLAB_WARM": "0", "ATTNLAB_ACCESS_TOKEN": TOKEN}) as srv:
        assert status(srv.url + "/_stcore/health") == 200
        assert status(srv.url + "/") == 401
        assert status(srv.url + "/?token=wrong") == 401
        assert status(srv.url + f"/?token={TOKEN}") == 200
