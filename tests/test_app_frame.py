import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_page_files_are_not_named_after_their_urls():
    # Until st.navigation first runs in a server process, Streamlit treats pages/ the old (v1) way:
    # a file named N_<url>.py would then be run on its own, without app.py's sidebar and shape.
    # Our files are pN_<name>.py with url paths of their own, so app.py always runs.
    pages = re.findall(r'st\.Page\("pages/(p\d)_(\w+)\.py".*?url_path="([\w-]+)"', (ROOT / "app.py").read_text())
    assert [p for p, _, _ in pages] == [f"p{i}" for i in range(1, 10)]
    for prefix, stem, url in pages:
        assert (ROOT / "pages" / f"{prefix}_{stem}.py").exists()
        v1_url = re.sub(r"^\d+_?", "", f"{prefix}_{stem}")  # v1 drops a leading number only
        assert v1_url != url and v1_url.startswith("p")


def test_the_core_never_imports_streamlit():
    for path in (ROOT / "attnlab").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"^\s*(import streamlit|from streamlit)", text, re.MULTILINE), path


def test_page_runs_take_turns_when_limited(monkeypatch):
    # ATTNLAB_MAX_RUNS caps the page scripts running at once; a run gives its turn back when done,
    # and a run that has to wait for one still renders its page.
    import threading
    import time

    from pages import turns
    from tests.apptest_util import open_page

    monkeypatch.setenv("ATTNLAB_MAX_RUNS", "1")
    at = open_page("pages/p2_gpu_check.py")
    assert at.title and not at.exception
    slots = turns._SLOTS[1]
    assert slots.acquire(blocking=False)  # the finished run gave its turn back; now held here
    threading.Timer(0.5, slots.release).start()  # ... for half a second
    start = time.perf_counter()
    at.run()
    assert time.perf_counter() - start >= 0.4 and not at.exception and at.title
    assert slots.acquire(blocking=False)
    slots.release()
