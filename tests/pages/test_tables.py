"""Every table a page draws says '—' for a missing value: Streamlit's own "None" in a column of numbers reads like a
result (a device time of None, a TFLOP/s of None), where the page means "not measured here"."""

import re
from pathlib import Path

import pytest

from tests.apptest_util import open_page

APP = Path(__file__).resolve().parents[2] / "app.py"
PAGES = [p for p in re.findall(r'st\.Page\("(pages/p\d+_\w+\.py)"', APP.read_text()) if "instructor" not in p]


def test_the_pages_are_found():
    assert len(PAGES) >= 10, PAGES


@pytest.mark.parametrize("page", PAGES)
def test_no_table_shows_none_for_a_missing_value(page):
    at = open_page(page)
    assert [d.proto.placeholder for d in at.dataframe] == ["—"] * len(at.dataframe), page


def test_a_long_requirement_shared_by_implementations_is_said_once_on_page_2():
    """tokamax's install hint was written out once per tokamax backend (issue 42): the later rows say "as for"."""
    from tests.apptest_util import frame_with, open_page

    reqs = frame_with(open_page("pages/p2_gpu_check.py"), "requirement")
    long = reqs[reqs["needed"].str.len() + reqs["here"].str.len() > 80]
    assert not long.empty and not long.duplicated(["requirement", "needed", "here"]).any(), long
    if (reqs["here"].str.contains("tokamax is not installed")).any():  # as in CI: one hint, the others point to it
        assert reqs["here"].str.contains("tokamax is not installed").sum() == 1
        assert (reqs["needed"] == "as for tokamax_xla_chunked").sum() == 2
