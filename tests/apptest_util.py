"""Opening one page of the app the way a learner's browser does: app.py first, then the page."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def open_page(page: str, params: dict[str, str] | None = None) -> AppTest:
    """Run app.py with the URL's query parameters, switch to `page`, run it; no exception allowed."""
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in (params or {}).items():
        at.query_params[k] = v
    at.run()  # AppTest needs one run of the entry point before switch_page
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at
