"""Page 9 · TransformerEngine and FP8: the FP8 formats, what can run here (from the backends'
declared requirements), the TE sweep and the three FP8 studies measured here on a GPU or shipped
from an H200, and the clean-up steps (AppTest; the live studies are GPU tests)."""

import jax
import pytest

from attnlab.backends import te as te_mod
from tests.apptest_util import SMALL, charts, codes, frame_with, frames, metric, open_page, texts

AUTOCAST, DENSE, FP8_ATTENTION = (("p9_tab", t) for t in ("(a) autocast around attention", "(b) FP8 in TE's dense layers",
                                                            "(c) cuDNN's FP8 attention"))
PAGE = "pages/p9_te_fp8.py"
ON_CPU = jax.default_backend() != "gpu"
HEAVY_MQA = {"batch": "2", "q_len": "1", "kv_len": "2048", "heads": "512", "kv_heads": "1", "head_dim": "512"}


def study_buttons(at) -> list[str]:
    return [b.key for b in at.button if (b.key or "").startswith("btn_p9_")]



@pytest.mark.parametrize("params", [{"q_len": "12abc", "heads": "<script>"}, {"kv_heads": "3"},
                                    {"dtype": "float8", "causal": "maybe"}])
def test_bad_urls_give_messages_not_exceptions(params):
    at = open_page(PAGE, params)
    assert at.error and "computes nothing" in texts(at, "warning")
    assert not frames(at, "wall_ms")


def test_fp8_formats_are_named_with_their_bits_range_and_use():
    at = open_page(PAGE)
    fmt = frame_with(at, "mantissa bits").set_index("format")
    assert (fmt.loc["E4M3", "exponent bits"], fmt.loc["E4M3", "mantissa bits"], fmt.loc["E4M3", "largest value"]) == ("4", "3", "448")
    assert (fmt.loc["E5M2", "exponent bits"], fmt.loc["E5M2", "mantissa bits"], fmt.loc["E5M2", "largest value"]) == ("5", "2", "57,344")
    assert fmt.loc["E5M2", "smallest value (subnormal)"] == "1.5e-05"
    assert "cuDNN FP8 attention" in fmt.loc["E4M3", "in this lab"] and "HYBRID" in fmt.loc["E5M2", "in this lab"]
    assert "HYBRID, TransformerEngine's recipe format, uses both: E4M3 forward, E5M2 backward" in texts(at, "caption")
    text = texts(at, "markdown")
    assert "HYBRID: E4M3 forward, E5M2 for gradients" in text and "Q, K and V in E4M3" in text


def test_tables_of_long_text_wrap_instead_of_scrolling_sideways():
    # the requirement checklist's "here" (a pip command) and the formats' "in this lab" were cut off
    at = open_page(PAGE)
    static = [t.value.reset_index() for t in at.table]
    assert any("mantissa bits" in t for t in static) and any("requirement" in t for t in static)


def test_requirements_come_from_the_backends_declarations():
    at = open_page(PAGE, {"dtype": "bfloat16"})
    req = frame_with(at, "requirement")
    assert set(req["implementation"]) == {"te_dpa", "cudnn_fp8"}
    fp8_cc = req[(req["implementation"] == "cudnn_fp8") & (req["requirement"] == "compute capability")]
    assert fp8_cc["needed"].iloc[0] == "9.0 or newer"
    te_row = req[(req["implementation"] == "te_dpa") & (req["requirement"] == "TransformerEngine")].iloc[0]
    assert te_row["here"] == (te_mod.import_error() or "imports")
    assert "JAX says" not in texts(at)


@pytest.mark.skipif(not ON_CPU, reason="describes the CPU backend")
def test_te_fp8_page_on_cpu_says_what_is_missing_and_shows_the_code_to_run(without_shipped):
    at = open_page(PAGE, tab=FP8_ATTENTION)
    req = frame_with(at, "requirement")
    assert (req[req["requirement"] == "a CUDA GPU"]["met"] == "no").all()
    blocks = codes(at)
    assert any("use_fp8=True" in c for c in blocks) and any("DotProductAttention" in c for c in blocks)
    assert "No H200 results ship" in texts(at, "info")
    assert not study_buttons(at), "no live study is offered on a CPU"


@pytest.mark.skipif(not ON_CPU, reason="on a GPU the live studies take the shipped results' place")
def test_te_fp8_page_shows_the_shipped_studies_labelled_where_nothing_runs_live(with_shipped):
    at = open_page(PAGE, SMALL)
    captions = texts(at, "caption")
    assert captions.count("📦 Measured on NVIDIA H200") == 2  # TE sweep, (a): each labelled
    assert "not measured on this machine" in captions
    assert "identical" in texts(at, "success")  # (a) autocast changed no kernel
    assert metric(at, "max |output with autocast − without|") == "0"
    assert any("by q_len" in s for s in charts(at))  # the TE sweep from the shipped results
    # it opens on device time, where the lesson (TE's line a few µs above cuDNN's, the same kernel) is visible
    assert at.selectbox(key="p9_te_y").value == "device_ms"
    assert "ran at its own shapes, whatever the sidebar says" in texts(at, "caption")
    assert len(at.tabs) == 3  # the three FP8 studies, one tab each
    at = open_page(PAGE, SMALL, tab=DENSE)
    assert texts(at, "caption").count("📦 Measured on NVIDIA H200") == 2  # TE sweep, (b)
    assert any("TFLOP/s by recipe" in s for s in charts(at))
    block = frame_with(at, "rel_err_vs_bf16")
    assert list(block["recipe"]) == ["bf16", "fp8_delayed", "fp8_current"]
    assert "top_kernels" not in block  # the long kernel lists wrap in a table of their own
    worst = block["rel_err_vs_bf16"].max()  # the error is read for the learner, with the largest measured
    assert f"The largest here, {worst:.1%}, is of the size FP8's own rounding gives" in texts(at, "caption")
    longest = frame_with(at, "longest kernels").set_index("recipe")
    assert "matmul (XLA fusion) (gemm_test) 12.5 µs" in longest.loc["bf16", "longest kernels"]
    at = open_page(PAGE, SMALL, tab=FP8_ATTENTION)
    assert texts(at, "caption").count("📦 Measured on NVIDIA H200") == 2  # TE sweep, (c)
    errors = frame_with(at, "err_unit_scales")
    assert errors["err_amax_all"].iloc[0] == pytest.approx(0.02)
    assert len(errors.columns) <= 5  # the seven scaling choices in two tables that fit the page
    speed = frame_with(at, "fp8_e2e_tflops")
    assert list(speed["status"]) == ["ok", "error"]
    assert "fp8_burst_clock_mhz" in speed  # each speed comes with the clock it ran at
    assert metric(at, "FP8 at boost clock") == "1,010 TFLOP/s" and metric(at, "FP8 sustained") == "600 TFLOP/s"
    assert metric(at, "SM clock, boost → sustained") == "1980 → 1700 MHz"
    assert any("by shape at boost clock" in s for s in charts(at))
    at.radio(key="p9_fp8_state").set_value("sustained (after 1.5 s of calls)").run()
    assert not at.exception and any("by shape sustained" in s for s in charts(at))


def test_last_step_says_how_to_clean_up_the_gpu():
    at = open_page(PAGE)
    assert "Clean up" in [h.value for h in at.header]
    text = texts(at, "markdown")
    for step in ("Stop the Streamlit server", "nvidia-smi", "deploy/README.md", "deploy/teardown.sh"):
        assert step in text


def test_heavy_mqa_link_opens_with_nothing_computed(without_shipped):
    at = open_page(PAGE, HEAVY_MQA)
    assert not frame_with(at, "requirement").empty
    assert not frames(at, "wall_ms") and not frames(at, "rel_err_vs_bf16"), "nothing measured without a click"


@pytest.mark.gpu
def test_te_and_fp8_studies_run_live_on_a_gpu():
    at = open_page(PAGE, {"dtype": "bfloat16", "causal": "true"})
    for key, tab in (("p9_te", AUTOCAST), ("p9_autocast", AUTOCAST), ("p9_block", DENSE), ("p9_fp8", FP8_ATTENTION)):
        at.session_state[tab[0]] = tab[1]
        at.run()
        if f"btn_{key}" not in study_buttons(at):
            continue  # the page said why this study cannot run here (no TE, or compute capability)
        if key == "p9_te":
            at.multiselect(key="p9_te_lengths").set_value([128, 256]).run()
        if key == "p9_fp8":
            at.multiselect(key="p9_fp8_t").set_value([1024]).run()
            at.multiselect(key="p9_fp8_h").set_value([64]).run()
        at.button(key=f"btn_{key}").click().run()
        assert not at.exception, (key, [e.value for e in at.exception])
        assert "Measured here" in texts(at, "caption") or key == "p9_te"


def test_whether_te_and_fp8_can_run_is_asked_of_the_device_worker_not_checked_in_the_page(monkeypatch):
    """Checking te_dpa in the page's process imported TransformerEngine and traced it there: on the H200 with TE
    installed page 9 took 4.7 s (median) for every learner of a class, with nothing asked of the GPU."""
    from attnlab import service
    from attnlab.backends import base

    asked, real_send = [], service.send
    monkeypatch.setattr(service, "send", lambda r: asked.append((r.fn, r.args)) or real_send(r))
    in_page, real_unmet = [], base.Backend.unmet

    def unmet(self, shape, info):  # the in-process worker of the tests calls it too: count only the page's calls
        import traceback

        if not any("attnlab/service/" in f.filename for f in traceback.extract_stack()):
            in_page.append(self.name)
        return real_unmet(self, shape, info)

    monkeypatch.setattr(base.Backend, "unmet", unmet)
    open_page(PAGE, {**SMALL, "dtype": "bfloat16", "q_len": "40", "kv_len": "40"})
    assert not in_page, in_page
    asked_unmet = [args[1] for fn, args in asked if fn.endswith(":unmet")]
    assert ("te_dpa",) in asked_unmet, asked
