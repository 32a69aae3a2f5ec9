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
    head_start()
    args = sys.argv[1:] if argv is None else argv
    sys.argv = ["streamlit", "run", str(APP), *args]
    cli.main(prog_name="streamlit")


if __name__ == "__main__":
    main()
