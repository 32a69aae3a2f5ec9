"""AppTest specifications for the learning pages (1, 3, 4, 5, 6), on the CPU backend.

Each page is opened through app.py (st.navigation), at the codelab's shape and at a small custom
shape given in the URL, and must show its key numbers without an exception. Shapes are small so
the whole file runs in about a minute; heavy results are cached across tests (st.cache_data).
"""


import re

import jax
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from attnlab import layout
from attnlab.implementations import TOLERANCES
from attnlab.shapes import AttentionShape
from tests.apptest_util import APP, open_page  # noqa: E402,F401

CUSTOM = {"batch": "2", "q_len": "32", "kv_len": "48", "heads": "4", "kv_heads": "2", "head_dim": "16", "causal": "true"}
CUSTOM_SHAPE = AttentionShape(batch=2, q_len=32, kv_len=48, heads=4, kv_heads=2, head_dim=16, causal=True)
HOSTILE = {"batch": "__import__('os')", "dtype": "<script>"}
PAGES = ["pages/p1_attention.py", "pages/p3_qkv.py", "pages/p4_naive_vs_fused.py", "pages/p5_cudnn.py",
         "pages/p6_causal.py"]
on_gpu = jax.default_backend() == "gpu"
FLOAT_PATHS = ["naive", "sdpa_auto", "sdpa_xla", "sdpa_cudnn", "te_dpa"]




def frames(at: AppTest) -> list[pd.DataFrame]:
    return [d.value for d in at.dataframe]


def frame_with(at: AppTest, column: str) -> pd.DataFrame:
    found = [df for df in frames(at) if column in df.columns]
    assert found, f"no table with a {column!r} column"
    return found[0]


def chart_data(at: AppTest) -> list[pd.DataFrame]:
    """The data behind each Altair chart on the page (Streamlit ships it as Arrow)."""
    out = []
    for chart in at.get("vega_lite_chart"):
        for d in chart.proto.datasets:
            out.append(pa.ipc.open_stream(d.data.data).read_all().to_pandas())
    return out


def metric(at: AppTest, label_start: str) -> str:
    found = [m.value for m in at.metric if m.label.startswith(label_start)]
    assert found, f"no metric starting {label_start!r}: {[m.label for m in at.metric]}"
    return found[0]


def texts(at: AppTest) -> str:
    return "\n".join(e.value for kind in ("markdown", "caption", "info", "success", "error", "warning")
                     for e in getattr(at, kind))


# --------------------------------------------------------------------------------------------
# every page: bad input is a message, never an exception
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES)
def test_hostile_query_string_gives_messages_not_exceptions(page):
    at = open_page(page, HOSTILE)
    errors = " ".join(e.value for e in at.error)
    assert "batch must be a positive whole number" in errors
    assert "dtype must be one of" in errors
    if page != "pages/p1_attention.py":  # page 1 uses its own tiny example, not the sidebar's shape
        assert any("computes nothing" in w.value for w in at.warning)


# --------------------------------------------------------------------------------------------
# 1 · How attention works
# --------------------------------------------------------------------------------------------
def test_attention_page_shows_the_formula_and_four_stages():
    at = open_page("pages/p1_attention.py")
    assert "softmax" in at.latex[0].value and r"\sqrt{d}" in at.latex[0].value
    stages = [df for df in frames(at) if df.shape == (6, 6)]
    scores, scaled = stages[0], stages[1]
    np.testing.assert_allclose(scaled.to_numpy(), scores.to_numpy() / 2, rtol=1e-5)  # d = 4: divided by √4
    weights = next(c for c in chart_data(at) if "weight" in c.columns)
    assert len(weights) == 36
    np.testing.assert_allclose(weights.groupby("query")["weight"].sum(), 1.0, rtol=1e-5)


def test_attention_page_scale_effect_saturates_without_the_scale():
    at = open_page("pages/p1_attention.py")
    effect = frame_with(at, "scaling")
    unscaled = effect[effect.scaling == "none"].sort_values("head_dim")
    scaled = effect[effect.scaling == "1/sqrt(d)"].sort_values("head_dim")
    assert unscaled["max_weight"].is_monotonic_increasing and unscaled["max_weight"].iloc[-1] > 0.8
    assert unscaled["entropy"].is_monotonic_decreasing
    assert (scaled["max_weight"] < 0.2).all()
    spread = frame_with(at, "spread of q·k")
    np.testing.assert_allclose(spread["spread of q·k"], spread["√d"], rtol=0.25)
    assert len(chart_data(at)) >= 3  # weights heatmap, max weight, entropy


def test_attention_page_scale_toggle_leaves_scores_unscaled():
    at = open_page("pages/p1_attention.py")
    at.toggle(key="p1_scaled").set_value(False).run()
    assert not at.exception
    scores, scaled = [df for df in frames(at) if df.shape == (6, 6)][:2]
    np.testing.assert_allclose(scaled.to_numpy(), scores.to_numpy())
    at.toggle(key="p1_causal").set_value(True).run()
    weights = next(c for c in chart_data(at) if "weight" in c.columns)
    upper = weights[weights["key"] > weights["query"]]
    assert upper["weight"].isna().all() or (upper["weight"].fillna(0) == 0).all()


# --------------------------------------------------------------------------------------------
# 3 · Q, K, V
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("params,shape", [({}, AttentionShape()), (CUSTOM, CUSTOM_SHAPE)])
def test_qkv_page_layout_table_bytes_match_the_shape(params, shape):
    at = open_page("pages/p3_qkv.py", params)
    table = frame_with(at, "layout").set_index("array")
    assert table.iloc[:3]["bytes"].sum() == shape.input_bytes()
    assert table.loc["output", "bytes"] == shape.output_bytes()
    assert list(table["layout"]) == ["BTNH", "BSKH", "BSKH", "BTNH", "BNTS"]
    assert table.loc["Q (query)", "shape"] == str(shape.q_shape())
    placed = frame_with(at, "devices()")
    assert placed["nbytes"].sum() == shape.input_bytes()
    assert "equal to the table's sum" in texts(at)


def test_qkv_page_explains_the_codelab_default_from_computed_numbers():
    at = open_page("pages/p3_qkv.py", CUSTOM)
    q = layout.layout_table(AttentionShape()).set_index("array").loc["Q (query)"]
    info = " ".join(i.value for i in at.info)
    assert f"{q['elements']:,} elements" in info and q["size"] in info


# --------------------------------------------------------------------------------------------
# 4 · Naive vs fused
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("params,shape", [({}, AttentionShape()), (CUSTOM, CUSTOM_SHAPE)])
def test_naive_vs_fused_page_shows_same_shape_and_allclose(params, shape):
    at = open_page("pages/p4_naive_vs_fused.py", params)
    assert metric(at, "naive output") == str(shape.q_shape())
    assert metric(at, "jax.nn.dot_product_attention output") == str(shape.q_shape())
    assert metric(at, "allclose") == "True"
    assert float(metric(at, "max |naive − SDPA|")) < TOLERANCES[shape.dtype]["atol"]
    acc = frame_with(at, "relative_error")
    assert {"naive", "sdpa_auto", "sdpa_xla"} <= set(acc["implementation"])
    assert acc[acc.implementation.isin(FLOAT_PATHS)]["allclose"].all()  # FP8 paths miss float tolerances by design
    assert "implementation=None" in " ".join(s.value for s in at.success)
    assert "def naive_attention" in at.code[0].value


def test_naive_vs_fused_page_timing_button_reports_wall_time():
    at = open_page("pages/p4_naive_vs_fused.py", CUSTOM)
    at.button(key="p4_time").click().run()
    assert not at.exception
    timed = frame_with(at, "wall_ms")
    assert (timed[timed.status == "ok"]["wall_ms"] > 0).all()
    if not on_gpu:
        assert "CUPTI device time and kernel names need an NVIDIA GPU" in texts(at)


def test_naive_vs_fused_page_compiled_memory_grows_as_t_squared_for_naive():
    at = open_page("pages/p4_naive_vs_fused.py", CUSTOM)
    at.select_slider(key="p4_mem_max").set_value(1024).run()
    at.button(key="p4_memory").click().run()
    assert not at.exception
    mem = frame_with(at, "scratch")
    naive = mem[mem.implementation == "naive"]
    assert list(naive["q_len"]) == ([256, 512, 1024] if on_gpu else [128, 256, 512, 1024])
    chart = next(c for c in chart_data(at) if "temp_bytes" in c.columns)
    n = chart[chart.implementation == "naive"].set_index("q_len")["temp_bytes"]
    assert n[1024] / n[256] > 6  # T four times longer: O(T²) scratch grows ~16x (XLA reuses some buffers), O(T) 4x
    assert n[1024] >= CUSTOM_SHAPE.replace(q_len=1024, kv_len=1024).score_elements() * 4  # holds the float32 scores
    growth = next(m.value for m in at.markdown if m.value.startswith("Measured here:"))
    slope = float(re.search(r"\*\*naive\*\* ×[\d,]+ from T = [\d,]+ to 1,024 \(slope ([\d.]+)\)", growth)[1])
    first = n.index.min()
    assert slope == pytest.approx(np.log(n[1024] / n[first]) / np.log(1024 / first), abs=0.05), growth
    at.radio(key="p4_mem_measure").set_value(at.radio(key="p4_mem_measure").options[1]).run()
    assert not at.exception
    chart = next(c for c in chart_data(at) if "total_bytes" in c.columns)
    assert (chart["total_bytes"] > chart["temp_bytes"]).all()  # inputs and output on top of the scratch


def test_naive_vs_fused_page_says_when_a_library_fusion_hides_naives_scratch():
    # XLA on CPU hands naive's dot-softmax-dot at the codelab shape to one library fusion (ynn_fusion),
    # whose scratch memory_analysis() does not count: the page must not claim O(T²) from that curve.
    at = open_page("pages/p4_naive_vs_fused.py", {})
    at.select_slider(key="p4_mem_max").set_value(1024).run()
    at.button(key="p4_memory").click().run()
    assert not at.exception
    chart = next(c for c in chart_data(at) if "temp_bytes" in c.columns)
    n = chart[chart.implementation == "naive"].set_index("q_len")["temp_bytes"]
    what = " ".join(chart[chart.implementation == "naive"]["what ran"])
    infos = " ".join(i.value for i in at.info)
    first = n.index.min()  # 128 on a CPU, 256 on a GPU
    if n[1024] / n[first] < (1024 / first) ** 1.5 and "handed to a library" in what:  # slope below 1.5
        assert "ynn_fusion" in infos and "slope 2" in infos
    else:
        assert "ynn_fusion" not in infos


def test_naive_vs_fused_page_shows_shipped_reference_memory(monkeypatch):
    from attnlab import reference

    rows = [{"implementation": impl, "q_len": t, "kv_len": t, "batch": 1, "heads": 16, "head_dim": 128,
             "causal": False, "pass": "forward", "status": "ok", "temp_bytes": t * t * k, "shape": f"T{t}"}
            for impl, k in (("naive", 64), ("sdpa_cudnn", 1)) for t in (2048, 4096)]
    monkeypatch.setattr(reference, "frame", lambda table, name="h200": pd.DataFrame(rows) if table == "long_context" else pd.DataFrame())
    monkeypatch.setattr(reference, "label", lambda name="h200": "Measured on a test GPU")
    at = open_page("pages/p4_naive_vs_fused.py", CUSTOM)
    assert "Shipped reference" in texts(at)
    assert any(len(c) == 4 and "temp_bytes" in c.columns for c in chart_data(at))


@pytest.mark.gpu
def test_naive_vs_fused_page_names_the_cudnn_kernel_and_its_device_time_on_gpu():
    at = open_page("pages/p4_naive_vs_fused.py", {**CUSTOM, "dtype": "bfloat16"})
    prog = frame_with(at, "what ran").set_index("implementation")
    assert "cuDNN" in prog.loc["sdpa_cudnn", "what ran"] and "cudnn" in prog.loc["sdpa_cudnn", "custom calls"]
    at.button(key="p4_time").click().run()
    assert not at.exception
    timed = frame_with(at, "wall_ms").set_index("implementation")
    assert timed.loc["sdpa_cudnn", "status"] == "ok" and timed.loc["sdpa_cudnn", "device_ms"] > 0
    assert "sdpa_cudnn: " in " ".join(s.value for s in at.success)  # "sdpa_cudnn: N kernel(s), X µs"
    at.select_slider(key="p4_mem_max").set_value(1024).run()
    at.button(key="p4_memory").click().run()
    mem = frame_with(at, "scratch")
    assert "sdpa_cudnn" in set(mem["implementation"])


# --------------------------------------------------------------------------------------------
# 5 · cuDNN
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("params", [{}, CUSTOM])
def test_cudnn_page_lists_requirements_and_shows_the_real_error_on_cpu(params):
    at = open_page("pages/p5_cudnn.py", params)
    checklist = frame_with(at, "requirement")
    assert "dtype" in set(checklist["requirement"]) and (checklist.set_index("requirement").loc["dtype", "here"] == "bfloat16")
    assert any('implementation="cudnn"' in c.value or "implementation=implementation" in c.value for c in at.code)
    if on_gpu:
        pytest.skip("cuDNN runs here: see test_cudnn_page_matches_xla_on_gpu")
    assert any("cuDNN cannot run" in e.value for e in at.warning)
    assert any("cuDNN" in c.value and "Error" in c.value for c in at.code)  # JAX's own words
    xla = frame_with(at, "allclose")
    assert xla.set_index("implementation").loc["sdpa_xla", "allclose"]


def test_cudnn_page_timing_button_reports_both_rows():
    at = open_page("pages/p5_cudnn.py", CUSTOM)
    at.button(key="p5_time").click().run()
    assert not at.exception
    timed = frame_with(at, "wall_ms").set_index("implementation")
    assert timed.loc["sdpa_xla", "status"] == "ok"
    assert timed.loc["sdpa_cudnn", "status"] == ("ok" if on_gpu else "unsupported")


@pytest.mark.gpu
def test_cudnn_page_matches_xla_on_gpu():
    at = open_page("pages/p5_cudnn.py", {**CUSTOM, "dtype": "bfloat16"})
    assert metric(at, "allclose") == "True"
    assert float(metric(at, "max |cuDNN − XLA|")) < 1e-2


# --------------------------------------------------------------------------------------------
# 6 · Causal masking
# --------------------------------------------------------------------------------------------
def test_causal_page_shows_first_vs_last_table_with_zero_last_row_when_t_equals_s():
    at = open_page("pages/p6_causal.py")
    fvl = frame_with(at, "max |full − causal|")
    assert fvl["position"].iloc[-1] == 127
    assert fvl["max |full − causal|"].iloc[-1] <= (TOLERANCES["float32"]["atol"] if on_gpu else 0.0)
    assert fvl["max |full − causal|"].iloc[0] > 0
    assert any("sees all keys" in s.value for s in at.success)


def test_causal_page_heatmaps_are_capped_at_64_and_causal_is_lower_triangular():
    at = open_page("pages/p6_causal.py")  # T = S = 128: the view is 64 × 64
    maps = [c for c in chart_data(at) if "weight" in c.columns]
    full, causal = maps[0], maps[1]
    assert full["query"].max() == 63 and full["key"].max() == 63
    assert "64 positions" in texts(at)
    assert causal[causal["key"] > causal["query"]]["weight"].fillna(0).eq(0).all()
    np.testing.assert_allclose(causal.groupby("query")["weight"].sum(), 1.0, rtol=1e-5)


def test_causal_page_custom_shape_head_choice_and_unequal_lengths():
    at = open_page("pages/p6_causal.py", CUSTOM)
    assert at.selectbox(key="p6_head").options == [str(h) for h in range(4)]
    assert at.selectbox(key="p6_batch").options == ["0", "1"]
    at.selectbox(key="p6_head").set_value(3).run()
    assert not at.exception
    assert "reads key/value head 1" in texts(at)
    assert any("T (32) ≠ S (48)" in i.value for i in at.info)


@pytest.mark.gpu
def test_causal_page_runs_the_masks_through_cudnn_on_gpu():
    at = open_page("pages/p6_causal.py", {**CUSTOM, "dtype": "bfloat16", "head_dim": "64"})
    assert "cudnn" in at.selectbox(key="p6_impl").options
    at.selectbox(key="p6_impl").set_value("cudnn").run()
    assert not at.exception
    refused = [e.value for e in at.error if "refused these masks" in e.value]
    assert refused or float(metric(at, "max |fused − weights·V|")) < TOLERANCES["bfloat16"]["atol"] * 5


def test_causal_page_fused_masks_match_weights_times_v():
    at = open_page("pages/p6_causal.py", CUSTOM)
    atol = TOLERANCES["float32"]["atol"] if on_gpu else 1e-5  # TF32 matmuls on a GPU
    assert float(metric(at, "max |fused − weights·V|")) < atol
    at.toggle(key="p6_use_padding").set_value(True).run()
    at.number_input(key="p6_len_1").set_value(5).run()
    assert not at.exception
    assert float(metric(at, "max |fused − weights·V|")) < atol
    masked = [c for c in chart_data(at) if "weight" in c.columns][-1]
    assert masked[masked["key"] > masked["query"]]["weight"].fillna(0).eq(0).all()  # causal is on in CUSTOM
    assert any("key_value_seq_lengths" in c.value for c in at.code)
