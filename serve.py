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
Everything else is `streamlit run app.py` as is (same options, same config.toml).
"""

from __future__ import annotations

import sys
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"


def use_st_navigation_from_the_first_session() -> None:
    from streamlit.runtime.pages_manager import PagesManager

    if not hasattr(PagesManager, "uses_pages_directory"):  # a Streamlit that no longer has the v1 switch
        print("serve.py: this Streamlit has no PagesManager.uses_pages_directory; nothing to set", file=sys.stderr)
        return
    PagesManager.uses_pages_directory = False  # what st.navigation sets on its first run


def main(argv: list[str] | None = None) -> None:
    from streamlit.web import cli

    use_st_navigation_from_the_first_session()
    args = sys.argv[1:] if argv is None else argv
    sys.argv = ["streamlit", "run", str(APP), *args]
    cli.main(prog_name="streamlit")


if __name__ == "__main__":
    main()
