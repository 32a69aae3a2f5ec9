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
anyone who asks; ATTNLAB_METRICS=1 opens it again for an instructor who scrapes it.
Everything else is `streamlit run app.py` as is (same options, same config.toml), plus a head
start: while the server starts, a background thread imports what the first page needs and compiles
its tiny example (attnlab.warm.head_start; off with ATTNLAB_WARM=0, as the app's own warm-up).
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


class Harden:
    """ASGI middleware: HEADERS on every HTTP response; /_stcore/metrics answered 404 unless ATTNLAB_METRICS=1."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"].rstrip("/").endswith("/_stcore/metrics") and os.environ.get("ATTNLAB_METRICS") != "1":
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


def harden_the_server() -> None:
    """Put `Harden` first in Streamlit's middleware stack (Streamlit >= 1.5x serves with Starlette)."""
    try:
        from starlette.middleware import Middleware
        from streamlit.web.server.starlette import starlette_app
    except ImportError:
        print("serve.py: this Streamlit does not serve with Starlette; headers not added", file=sys.stderr)
        return
    own = starlette_app.create_streamlit_middleware
    starlette_app.create_streamlit_middleware = lambda: [Middleware(Harden), *own()]


def head_start() -> None:
    """The first run's one-time costs, in the background, overlapping the server's start and the
    first browser's download of Streamlit's JavaScript (2-3 s of the first page's run otherwise,
    measured with cProfile on a 2-core machine): page 1's imports and JAX compiles, and two costs
    Streamlit pays on the first run of a process."""
    if os.environ.get("ATTNLAB_WARM", "1") != "1":
        return

    def run() -> None:
        try:
            import inspect

            from attnlab import warm

            warm.head_start()
            import streamlit.emojis  # noqa: F401  (st.set_page_config's icon check loads this catalogue)

            # Streamlit's first element of a process calls inspect.stack() (its is-this-a-REPL check),
            # which resolves the path of every loaded module (0.3-0.6 s); inspect caches them.
            inspect.stack()
        except Exception as e:  # only a head start: the first run does all of it itself when this fails
            print(f"serve.py: head start failed: {type(e).__name__}: {e}", file=sys.stderr)

    threading.Thread(target=run, name="attnlab-head-start", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    from streamlit.web import cli

    use_st_navigation_from_the_first_session()
    harden_the_server()
    head_start()
    args = sys.argv[1:] if argv is None else argv
    sys.argv = ["streamlit", "run", str(APP), *args]
    cli.main(prog_name="streamlit")


if __name__ == "__main__":
    main()
