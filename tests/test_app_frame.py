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
