"""Page 5 · cuDNN, on the CPU backend (GPU-only checks marked `gpu`)."""

import re

import jax
import pytest

from tests.apptest_util import CUSTOM, HEAVY, button, codes, frame_with, metric, open_page, record_runs, texts

PAGE = "pages/p5_cudnn.py"
on_gpu = jax.default_backend() == "gpu"


def test_valid_but_heavy_link_opens_and_runs_nothing_heavy_without_a_click(monkeypatch):
    calls = record_runs(monkeypatch)
    at = open_page(PAGE, HEAVY)
    assert all(not kw.get("accuracy", True) and not kw.get("timed") for kw in calls), calls  # compiles only
    assert button(at, "btn_p5_compare")  # the bfloat16 check waits for a click


@pytest.mark.parametrize("params", [{}, CUSTOM])
def test_requirements_checklist_from_the_backend_and_the_real_error_on_cpu(params):
    at = open_page(PAGE, params)
    checklist = frame_with(at, "requirement").set_index("requirement")
    assert checklist.loc["dtype", "here"] == "bfloat16" and "a CUDA GPU" in checklist.index
    assert any("implementation=implementation" in c for c in codes(at))
    if on_gpu:
        pytest.skip("cuDNN runs here: see test_matches_xla_on_gpu")
    assert any("cuDNN cannot run" in w.value for w in at.warning)
    assert any("Error" in c and "cuDNN" in c for c in codes(at))  # the library's own words
    assert "JAX says" not in texts(at)
    snippet = next(c for c in codes(at) if "implementation=implementation" in c)
    assert "HAS_CUDNN_SDPA = True" in snippet and "except Exception as e:" in snippet  # the codelab's form
    printed = next(c for c in codes(at) if c.startswith("cuDNN SDPA not available on this GPU:"))
    assert "Continuing with XLA backend only." in printed and len(printed.splitlines()[0]) > 40  # the reason, not a stub
    assert "there is no GPU" in texts(at)  # the codelab's "on this GPU", printed on a CPU, is said to be its words
    xla = frame_with(at, "allclose").set_index("implementation")
    assert xla.loc["sdpa_xla", "allclose"]


def test_why_name_cudnn_none_compiles_to_xla_here():
    at = open_page(PAGE)
    assert "`implementation=None` compiled to **XLA's own code" in " ".join(s.value for s in at.success) or on_gpu
    assert "read once per query block" in texts(at, "markdown")
    assert "reads Q, K and V once" not in texts(at, "markdown")


def test_no_timing_button_on_cpu_and_it_says_what_would_run():
    at = open_page(PAGE, CUSTOM)
    keys = [b.key for b in at.button]
    if on_gpu:
        assert "btn_p5_time" in keys
    else:
        assert "btn_p5_time" not in keys
        assert "On an NVIDIA GPU this section times cuDNN and XLA" in texts(at, "info")


def test_code_lines_are_wrapped_short():
    at = open_page(PAGE)
    code = next(c for c in codes(at) if "implementation=implementation" in c)
    assert max(map(len, code.splitlines())) <= 88 and "atol=1e-2" in code.replace("atol=0.01", "atol=1e-2")


def test_shipped_cudnn_and_xla_rows_are_labelled(with_shipped):
    at = open_page(PAGE, CUSTOM)
    assert "Shipped from the H200" in texts(at) and "Shipped with the lab" in texts(at, "caption")
    shipped = [t.value for t in at.table if "shape" in t.value.columns and "wall (ms)" in t.value.columns]
    assert shipped and {"sdpa_cudnn", "sdpa_xla"} <= set(shipped[0].index)


@pytest.mark.gpu
def test_matches_xla_on_gpu():
    at = open_page(PAGE, {**CUSTOM, "dtype": "bfloat16"})
    assert metric(at, "allclose") == "True"
    assert float(metric(at, "max |cuDNN − XLA|")) < 1e-2
    button(at, "btn_p5_time").click().run()
    timed = frame_with(at, "wall_ms").set_index("implementation")  # the rows that ran
    assert {"sdpa_cudnn", "sdpa_xla"} <= set(timed.index) and (timed["wall_ms"] > 0).all()
    assert timed.loc["sdpa_cudnn", "kernel_count"] >= 1


def test_the_shipped_row_explains_why_cudnn_wins_in_device_time_but_not_in_wall_time():
    # at the codelab's shape the H200 gave cuDNN 0.107 ms wall against XLA's 0.091 ms: dispatch, not the kernel
    at = open_page(PAGE)
    said = texts(at, "info")
    assert "the GPU works for microseconds" in said and "Long context on an H200" in said
    # one kernel in words, not "1 kernel(s)"; each wall time named by its implementation
    assert "cuDNN's one kernel took" in said and "kernel(s)" not in said
    assert re.search(r"wall time \(cuDNN 0\.\d{3} ms, XLA 0\.\d{3} ms\)", said)
    assert "device TFLOP/s is the same FLOPs over device time" in texts(at, "caption")
    # at another shape in the URL the sentence still names the table's shape, not the learner's (issue 42)
    other = texts(open_page(PAGE, {"q_len": "512", "kv_len": "512", "dtype": "bfloat16", "causal": "true"}), "info")
    assert "At the codelab's shape (B4 T128" in other and "not necessarily yours" in other


def test_the_wall_time_explanation_is_not_given_when_cudnn_wins_in_wall_time_too(monkeypatch):
    from attnlab import shipped

    real = shipped.frame

    def faster_cudnn(table, name="h200"):
        df = real(table, name)
        if table == "default":
            df.loc[df["implementation"] == "sdpa_cudnn", "wall_ms"] = 0.01
        return df

    monkeypatch.setattr(shipped, "frame", faster_cudnn)
    assert "the GPU works for microseconds" not in texts(open_page(PAGE), "info")
