"""Serve AttnLab: `streamlit run app.py`, with every session, the first one too, run the st.navigation way.

    python serve.py [streamlit options]      e.g.  python serve.py --server.port 8501

Why not plain `streamlit run app.py`: with a `pages/` folder beside the entry script, Streamlit
decides when it creates its first session that the app uses the old pages-directory navigation
(`PagesManager.uses_pages_directory`, set from the folder's existence), and only the first call
of `st.navigation` turns that off. Until then a session runs the pages folder's own navigation,
which knows no page called /causal, and so the first visitor after a (re)start who follows a
shared link gets a 'Page not found' modal ('Running the app's main page') over the right page
(streamlit/streamlit#9992). The lab needs its top-level `pages/` folder, so this launcher tells
Streamlit before the server starts what `st.navigation` would tell it on its first run.
It also puts a small ASGI middleware in front of Streamlit's own (`Harden`): security headers on
every HTTP response (no framing by other sites, no MIME sniffing, no referrer to other sites) and
Streamlit's `/_stcore/metrics` closed (404), since it describes every learner's session and cache to
anyone who asks; ATTNLAB_METRICS=1 opens it again for an instructor who scrapes it. It also tells a
page's HTML where the server is (BASE_URL_HINT), so a page opened by its link connects at once, and it
answers READY_PATH, the pod's readiness: 200 "ok" while the device service can be reached, else 503 with a
sentence (Streamlit's /_stcore/health stays the liveness: a Ray outage must not restart every UI).
Everything else is `streamlit run app.py` as is (same options, same config.toml), plus two things
started while the server starts: the device worker (attnlab.service: a child process by default, the
one process that runs JAX on the device; this process runs JAX on the CPU only, for page 1's tiny
example, and never opens the GPU), and a head start (attnlab.studies.warm.head_start: what the first
page imports and compiles; off with ATTNLAB_WARM=0, as the app's own warm-up).

A class is served by several such UI processes (GKE: a Deployment's replicas behind the Ingress's cookie
affinity) sharing device workers on Ray (ATTNLAB_DEVICE=ray): deploy/README.md.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"


def use_st_navigation_from_the_first_session() -> None:
    from streamlit.runtime.pages_manager import PagesManager

    if not hasattr(PagesManager, "uses_pages_directory"):  # a Streamlit that no longer has the v1 switch
        print("serve.py: this Streamlit has no PagesManager.uses_pages_directory; nothing to set", file=sys.stderr)
        return
    PagesManager.uses_pages_directory = False  # what st.navigation sets on its first run


HEADERS = [  # what every HTTP response carries (the websocket upgrade is not an HTTP response)
    (b"x-frame-options", b"SAMEORIGIN"),
    (b"content-security-policy", b"frame-ancestors 'self'; object-src 'none'; base-uri 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


# Streamlit's frontend finds its server by trying the page's own path first: a learner who opens
# /causal waits for /causal/_stcore/health to fail (404) and then 100 ms more before it tries
# /_stcore/health (its retry delay): in a network trace the websocket opened 0.13 s later than with the
# hint below (the page as a whole was 0.05-0.1 s slower: the browser had other work meanwhile).
# A page's HTML says where the server is instead (window.__streamlit.BACKEND_BASE_URL, Streamlit's
# own setting for hosts that embed it): the page's URL without its last segment.
BASE_URL_HINT = (b"<script>(function(){var p=location.pathname.replace(/\\/+$/,'');"
                 b"window.__streamlit={BACKEND_BASE_URL:location.origin+p.slice(0,p.lastIndexOf('/')+1)};})();</script>")


def is_page_path(path: str, base: str) -> bool:
    """A page's own URL: one segment below the server's base path, not a file or Streamlit's endpoint
    (/causal, /lab/causal with base 'lab'; not /, /favicon.png, /_stcore, /static/...)."""
    prefix = "/" + base.strip("/") if base.strip("/") else ""
    if not path.startswith(prefix + "/"):
        return False
    rest = path[len(prefix) + 1:].rstrip("/")
    return bool(rest) and "/" not in rest and "." not in rest and not rest.startswith("_stcore")


READY_PATH = "/_attnlab/ready"  # below the server's base path, as /_stcore/health is


async def ready_answer() -> tuple[int, bytes]:
    """(200, b"ok") when the device service can be reached, else (503, its sentence). The check runs in a thread
    (attnlab.service.ready: at most about 2 s, its answer kept 2 s), never on the event loop; never raises."""
    import asyncio

    try:
        from attnlab import service

        why = await asyncio.to_thread(service.ready)
    except Exception as e:  # noqa: BLE001 (a probe gets an answer, always)
        why = f"The readiness check failed: {type(e).__name__}: {e}"
    return (200, b"ok") if why is None else (503, why.encode())


class Harden:
    """ASGI middleware: HEADERS on every HTTP response; /_stcore/metrics answered 404 unless ATTNLAB_METRICS=1;
    READY_PATH answered here (ready_answer); a page's HTML (not the root's) carries BASE_URL_HINT."""

    def __init__(self, app, base: str = "", metrics: bool = False):
        self.app = app
        self.base = base  # Streamlit's server.baseUrlPath
        self.metrics = metrics  # ATTNLAB_METRICS: serve /_stcore/metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["method"] == "GET" and is_page_path(scope["path"], self.base):
            return await self.page_html(scope, receive, send)
        if scope["path"].rstrip("/").endswith(READY_PATH):
            status, body = await ready_answer()
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store"),
                                    *HEADERS]})
            await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})
            return
        if scope["path"].rstrip("/").endswith("/_stcore/metrics") and not self.metrics:
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain"),
                                                                                   *HEADERS]})
            await send({"type": "http.response.body", "body": b"not found"})
            return

        async def with_headers(message):
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []),
                                                  *(h for h in HEADERS if h[0] not in names)]}
            await send(message)

        await self.app(scope, receive, with_headers)

    async def page_html(self, scope, receive, send):
        """Streamlit's answer (index.html, asked for uncompressed: it is 8 kB) with BASE_URL_HINT first in
        its head and HEADERS added; any other answer (a 304, a file) passes as it is, headers added."""
        scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != b"accept-encoding"]}
        start, chunks = {}, []

        async def edit(message):
            if message["type"] == "http.response.start":
                start.update(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            headers, body = start.get("headers", []), b"".join(chunks)
            html = any(k.lower() == b"content-type" and v.startswith(b"text/html") for k, v in headers)
            if start.get("status") == 200 and html and b"<head>" in body:
                body = body.replace(b"<head>", b"<head>" + BASE_URL_HINT, 1)
                headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode()))
            names = {k.lower() for k, _ in headers}
            await send({**start, "headers": [*headers, *(h for h in HEADERS if h[0] not in names)]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, edit)


def harden_the_server() -> None:
    """Put `Harden` first in Streamlit's middleware stack (Streamlit >= 1.5x serves with Starlette)."""
    from attnlab import iap, token_door

    audience = iap.audience_from_env()  # behind IAP: every request must carry IAP's signed header
    token = token_door.token_from_env()  # the quick mode's door: a one-time token, then a cookie
    try:
        from starlette.middleware import Middleware
        from streamlit.web.server.starlette import starlette_app
    except ImportError:
        if audience or token:
            sys.exit("serve.py: ATTNLAB_IAP_AUDIENCE or ATTNLAB_ACCESS_TOKEN is set but this Streamlit does not "
                     "serve with Starlette: the door could not be checked, so the server does not start")
        print("serve.py: this Streamlit does not serve with Starlette; headers not added", file=sys.stderr)
        return
    from streamlit import config

    from attnlab.settings import settings

    own = starlette_app.create_streamlit_middleware

    def stack() -> list:
        base = config.get_option("server.baseUrlPath") or ""
        door = [Middleware(iap.RequireIap, audience=audience, base=base)] if audience else []
        door += [Middleware(token_door.RequireToken, token=token, base=base)] if token else []
        return [Middleware(Harden, base=base, metrics=settings().metrics), *door, *own()]

    starlette_app.create_streamlit_middleware = stack


def head_start() -> None:
    """The first run's one-time costs, in the background, overlapping the server's start and the
    first browser's download of Streamlit's JavaScript (2-3 s of the first page's run otherwise,
    measured with cProfile on a 2-core machine): page 1's imports and JAX compiles, and two costs
    Streamlit pays on the first run of a process."""
    from attnlab.settings import settings

    if not settings().warm:
        return

    def run() -> None:
        try:
            import inspect

            from attnlab.studies import warm

            warm.head_start()
            import streamlit.emojis  # noqa: F401  (st.set_page_config's icon check loads this catalogue)

            # Streamlit's first element of a process calls inspect.stack() (its is-this-a-REPL check),
            # which resolves the path of every loaded module (0.3-0.6 s); inspect caches them.
            inspect.stack()
        except Exception as e:  # only a head start: the first run does all of it itself when this fails
            print(f"serve.py: head start failed: {type(e).__name__}: {e}", file=sys.stderr)

    threading.Thread(target=run, name="attnlab-head-start", daemon=True).start()


def refuse_cache_clearing() -> None:
    """Any client may send Streamlit's "clear cache" message (a developer's menu item), and the
    server then drops every cached result of every learner and every cached resource (the warm-up
    runs again): one learner's websocket could empty a class's results over and over. Refused here,
    with a log line; ATTNLAB_ALLOW_CLEAR_CACHE=1 lets an instructor's browser clear them."""
    from attnlab.settings import settings

    if settings().allow_clear_cache:
        return
    from streamlit.runtime.app_session import AppSession

    def refuse(self) -> None:
        print("serve.py: a client asked to clear the server's caches; refused (ATTNLAB_ALLOW_CLEAR_CACHE=1 allows it)",
              file=sys.stderr, flush=True)

    AppSession._handle_clear_cache_request = refuse


# XLA runs a GPU program's kernels as a CUDA graph, captured on the program's first run. A server runs many
# learners' programs from many threads, and while one thread captures, another thread's CUDA call (a compile
# loading its kernels, a launch) is refused or crashes: on the H200 an own-shape class of 20 got "Failed to
# launch CUDA graph: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: operation not permitted when stream is capturing"
# and a worker killed by SIGSEGV inside a program's call. Off for the server (each kernel launched on its
# own: a few microseconds more per kernel); an instructor's own XLA_FLAGS naming the flag win.
NO_CUDA_GRAPHS = "--xla_gpu_enable_command_buffer="


def server_xla_flags(flags: str) -> str:
    """XLA_FLAGS for the server's processes: `flags` plus CUDA graphs off, unless `flags` already sets them."""
    if "xla_gpu_enable_command_buffer" in flags:
        return flags
    return f"{flags} {NO_CUDA_GRAPHS}".strip()


def device_env() -> dict[str, str]:
    """What the device worker runs with: the JAX platform asked for (JAX_PLATFORMS=cuda on a GPU), while this
    process keeps JAX on the CPU, so a page process never holds a CUDA context or GPU memory."""
    return {"JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "")}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    os.environ["XLA_FLAGS"] = server_xla_flags(os.environ.get("XLA_FLAGS", ""))  # before anything starts JAX
    import faulthandler

    from attnlab import service, threads
    from attnlab.settings import settings

    threads.serve_many_threads()  # every learner's page is a thread of this process (attnlab.threads says why)

    for problem in settings().problems:
        print(f"serve.py: {problem}", file=sys.stderr)
    service.WORKER_ENV.update(device_env())
    os.environ["JAX_PLATFORMS"] = "cpu"  # this process: page 1's tiny example only
    service.start()  # the device worker starts beside the server

    from streamlit.web import cli

    faulthandler.enable()  # a crash in native code prints every thread's Python stack
    use_st_navigation_from_the_first_session()
    harden_the_server()
    refuse_cache_clearing()
    head_start()
    sys.argv = ["streamlit", "run", str(APP), *args]
    cli.main(prog_name="streamlit")


if __name__ == "__main__":
    main()
