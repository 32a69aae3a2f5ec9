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
    support = frame_with(at, "runs here").set_index("implementation")
    assert support.loc["sdpa_cudnn", "runs here"] == "yes"
    assert support.loc["naive", "runs here"] == "yes"
