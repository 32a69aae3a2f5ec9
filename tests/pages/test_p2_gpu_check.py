"""The GPU check page on a real GPU: the device named, cuDNN available for a bf16 shape."""

from pathlib import Path

import pytest

from tests.apptest_util import frame_with  # noqa: E402

pytestmark = pytest.mark.gpu
APP = str(Path(__file__).resolve().parents[2] / "app.py")


def test_gpu_check_page_shows_the_gpu_and_cudnn_available():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params["dtype"] = "bfloat16"
    at.run()
    at.switch_page("pages/p2_gpu_check.py")
    at.run()
    assert not at.exception
    device = at.table[0].value
    assert device.loc["backend", "value"] == "gpu" and device.loc["cuDNN", "value"] != "not present"
    # implementations refused (or run) for the same reason share a row: "naive, sdpa_auto, ..."
    support = {name: row["runs here"] for _, row in frame_with(at, "runs here").iterrows()
               for name in row["implementation"].split(", ")}
    assert support["sdpa_cudnn"] == "yes" and support["naive"] == "yes"
