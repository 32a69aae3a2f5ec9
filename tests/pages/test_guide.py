"""The codelab path and the glossary in the sidebar: each step leads to a page that exists, each button it
names is a button that page draws, and each glossary word is one the lab uses."""

import re
import sys
from pathlib import Path

from tests.apptest_util import APP, open_page

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from capacity import page_paths  # noqa: E402

URLS = page_paths()  # {page file: its URL path}


def _sources(page: str) -> str:
    """A page's source and that of the pages/ modules it draws through (the buttons live in those too)."""
    text = (ROOT / page).read_text()
    for module in set(re.findall(r"from pages(?:\.\w+)? import ([\w, ]+)", text)):
        for name in module.replace(" ", "").split(","):
            path = ROOT / "pages" / f"{name}.py"
            if path.exists():
                text += path.read_text()
    return text


def test_every_codelab_step_leads_to_a_listed_page_and_names_buttons_that_page_draws():
    from pages import guide

    app = (ROOT / APP).read_text()
    for step, page, where in guide.CODELAB:
        assert f'st.Page("{page}"' in app, (step, page)
        source = _sources(page)
        for button in re.findall(r"button \*\*(.+?)\*\*", where):
            # the pieces around "…" (where the label goes on with the shape); a sweep's name is its `what`
            for piece in filter(None, (part.strip() for part in button.split("…"))):
                assert piece in source or piece.removeprefix("Run the ") in source, (step, piece)


def test_the_codelabs_steps_follow_its_order():
    from pages import guide

    steps = [s for s, _, _ in guide.CODELAB]
    assert steps[0] == "How attention works" and steps[-1].startswith("FP8")
    assert steps.index("Naive attention") < steps.index("cuDNN fused attention (`HAS_CUDNN_SDPA`)") < steps.index(
        "Causal masking") < steps.index("Sequence-length sweep") < steps.index("Batch-size sweep")


def test_glossary_words_are_used_by_the_lab():
    from pages import guide

    lab = " ".join(p.read_text() for p in [*(ROOT / "pages").glob("*.py"), *(ROOT / "attnlab").rglob("*.py")]
                   if p.name != "guide.py")
    for word, _ in guide.GLOSSARY:
        first = word.strip("`").split(" ")[0].split("/")[0]
        assert first.lower() in lab.lower(), word


def test_the_sidebar_has_the_codelab_path_and_the_glossary_on_every_page():
    for page in ("pages/p1_attention.py", "pages/p7_benchmarks.py"):
        at = open_page(page)
        labels = [e.label for e in at.sidebar if type(e).__name__ == "Expander"]
        assert "📓 The codelab, step by step" in labels and "📖 Glossary" in labels
        links = [p.proto.label for p in at.get("page_link")]
        assert any(link.startswith("**4. Naive attention** · *Same answer?*") for link in links), links
        assert any(link.startswith("**10. Batch-size sweep** · tab *Sweeps*") for link in links), links


def test_each_codelab_page_says_its_steps_and_links_the_next_steps_page():
    """Under each page: the codelab steps it covers, and a link to the next step's page (the last: beyond it)."""
    from pages import guide

    pages = list(dict.fromkeys(p for _, p, _ in guide.CODELAB))
    for here, following in zip(pages, [*pages[1:], None], strict=True):
        at = open_page(here)
        assert not at.exception, (here, [e.value for e in at.exception])
        main = [p.proto for p in at.get("page_link") if p.proto.label.startswith(("Next: ", "Beyond the codelab"))]
        assert len(main) == 1, (here, [p.proto.label for p in at.get("page_link")])
        captions = " ".join(c.value for c in at.caption)
        assert all(f"{i}. {guide.CODELAB[i - 1][0]}" in captions for i in guide.steps_on(here)), here
        if following:
            first = guide.steps_on(following)[0]
            assert main[0].label == f"Next: codelab step {first}. {guide.CODELAB[first - 1][0]}", here
            assert main[0].page == URLS[following], here
        else:
            assert main[0].label.startswith("Beyond the codelab")


def test_one_timed_implementation_gives_one_spread_not_a_range_of_one():
    import pandas as pd

    from attnlab.measure import runs
    from attnlab.studies import timing_demo

    df = pd.DataFrame([{"implementation": "naive", "status": runs.OK, "wall_ms": 2.0, "wall_ms_iqr": 0.5,
                        "throughput_ms": 2.0, "compiled_before": None}])
    first = timing_demo.notes(df, on_gpu=False)[0]
    assert "is 25 % of the median" in first and "–" not in first.split("median")[0]


def test_implementations_refused_for_one_reason_share_one_row(monkeypatch):
    from attnlab.shapes import AttentionShape
    from pages import common

    why = "needs tokamax: installed and importable (here: tokamax is not installed (pip install tokamax))"
    monkeypatch.setattr(common, "unmet", lambda shape: {"naive": None, "tokamax_triton": why, "tokamax_mosaic": why,
                                                        "sdpa_cudnn": "needs an NVIDIA GPU"})
    t = common.support_table(AttentionShape(), merged=True)
    assert list(t["implementation"]) == ["naive", "tokamax_triton, tokamax_mosaic", "sdpa_cudnn"]
    assert list(t["why not"]).count(why) == 1 and len(common.support_table(AttentionShape())) == 4


def test_the_sidebars_step_links_wrap_instead_of_being_cut_mid_word():
    """Streamlit draws a page link's label on one line, cut with "…" ("2. Setup: is the default backend a"): the
    sidebar's steps carry a style that lets them wrap (Chromium: tests/test_browser.py looks at the sidebar)."""
    from pages import guide

    at = open_page("pages/p3_qkv.py")
    styles = [e.proto.body for e in at.get("html") if "stPageLink" in e.proto.body]
    assert styles and guide.WRAP_LINKS in styles[0] and "white-space: normal" in guide.WRAP_LINKS
