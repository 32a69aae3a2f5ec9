"""AppTests for the measuring pages: 7 Benchmarks, 8 MHA/GQA/MQA, 9 TransformerEngine and FP8.

Each page is run through app.py (st.navigation) at the codelab's shape and at a small custom shape
from the URL; sweeps are clicked with tiny shapes. The shipped H200 reference is replaced by a
small dict built here (test data, never shown as a measurement) to check how pages show it.
"""

from __future__ import annotations

import json

import jax
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from attnlab import device, reference  # noqa: E402
from attnlab import implementations as impls  # noqa: E402
from attnlab import te as te_mod  # noqa: E402
from attnlab.shapes import AttentionShape  # noqa: E402
from tests.apptest_util import APP, open_page  # noqa: E402,F401

P7, P8, P9 = "pages/p7_benchmarks.py", "pages/p8_mha_gqa_mqa.py", "pages/p9_te_fp8.py"
SMALL = {"batch": "1", "q_len": "32", "kv_len": "32", "heads": "4", "kv_heads": "2", "head_dim": "16"}
ON_CPU = jax.default_backend() != "gpu"




def texts(at: AppTest, *kinds: str) -> str:
    return "\n".join(str(e.value) for kind in kinds for e in getattr(at, kind))


def frames(at: AppTest, column: str) -> list:
    return [d.value for d in at.dataframe if column in d.value.columns]


def charts(at: AppTest) -> list[str]:
    return [e.proto.spec for e in at.get("vega_lite_chart")]


def supported(shape: AttentionShape) -> list[str]:
    return [n for n, s in impls.available(shape, device.info()).items() if s.ok]


# --------------------------------------------------------------------------------------------
# a small stand-in for attnlab/reference/h200.json (structure of suite.run())
# --------------------------------------------------------------------------------------------
def _row(impl: str, q_len: int = 128, batch: int = 4, pass_: str = "forward", causal: bool = False,
         head_dim: int = 64, heads: int = 8, dtype: str = "bfloat16", ok: bool = True) -> dict:
    shape = AttentionShape(batch=batch, q_len=q_len, kv_len=q_len, heads=heads, kv_heads=heads, head_dim=head_dim,
                           dtype=dtype, causal=causal)
    row = {"implementation": impl, "label": impl, "pass": pass_, **shape.__dict__, "shape": shape.describe(),
           "status": "ok" if ok else "unsupported", "reason": "" if ok else "test reason: does not fit"}
    if ok:
        row.update(compile_ms=100.0, wall_ms=0.05, wall_ms_iqr=0.001, throughput_ms=0.02, device_ms=0.01,
                   kernel_count=1, kernels="test_kernel 10.0µs", device_note="test", gflop=1.0, tflops=50.0,
                   device_tflops=100.0, pct_of_peak=10.0, temp_bytes=1024, custom_calls="", repeats=30)
    return row


def fake_reference() -> dict:
    env = {"date": "2000-01-01", "device": "NVIDIA H200", "backend": "gpu", "compute_capability": "9.0",
           "driver": "test", "jax": "test", "cudnn": "test", "transformer_engine": "test",
           "peak": {"bf16_tflops": 989.5, "memory_tb_s": 4.8, "source": "test datasheet"}}
    impls_ = ["naive", "sdpa_xla", "sdpa_cudnn", "te_dpa"]
    fp8_row = {"shape": "B4 T2048 S2048 N16 K16 H128 bfloat16", "q_len": 2048, "head_dim": 128, "causal": False,
               "status": "ok", "scale_o": 1.0, "err_unit_scales": 0.1, "err_amax_qkv": 0.05, "err_amax_qkv_p": 0.03,
               "err_amax_all": 0.02, "err_small_inputs_unit_scales": 0.5, "err_small_inputs_amax_scales": 0.02,
               "bf16_ms": 1.0, "bf16_tflops": 400.0, "fp8_ms": 0.6, "fp8_tflops": 600.0, "speedup": 1.5,
               "fp8_e2e_ms": 0.8, "fp8_e2e_tflops": 500.0, "e2e_speedup": 1.25,
               "bf16_burst_tflops": 440.0, "fp8_burst_tflops": 1010.0, "burst_speedup": 2.3, "fp8_unit_tflops": 590.0,
               "bf16_burst_clock_mhz": 1980, "bf16_clock_mhz": 1755, "fp8_burst_clock_mhz": 1980, "fp8_clock_mhz": 1700,
               "max_clock_mhz": 1980}
    return {
        "environment": env,
        "ceilings": {"matmul_bf16_tflops": 700.0, "matmul_n": 8192, "copy_tb_s": 4.0, "copy_bytes": 2**31},
        "tables": {
            "default": [_row(n, dtype=d, ok=n != "te_dpa" or d == "bfloat16") for d in ("float32", "bfloat16")
                        for n in impls_],
            "seq_sweep": [_row(n, q_len=t) for t in (64, 128) for n in impls_],
            "batch_sweep": [_row(n, q_len=256, batch=b) for b in (1, 2) for n in impls_],
            "te_sweep": [_row(n, q_len=t, causal=True) for t in (128, 256) for n in ("sdpa_xla", "sdpa_cudnn", "te_dpa")],
            "long_context": [_row(n, q_len=t, pass_=p, causal=c, head_dim=128, heads=16, ok=not (n == "naive" and t > 2048))
                             for t in (2048, 4096) for c in (False, True) for p in ("forward", "forward+backward")
                             for n in impls_],
        },
        "fidelity": [{"shape": "B4 T8192", "implementation": "sdpa_cudnn", "harness_tflops": 500.0,
                      "bare_tflops": 500.0, "harness_over_bare": 1.0}],
        "fp8_attention": [fp8_row, {"shape": "B4 T128 S128 N8 K8 H64 bfloat16", "causal": False,
                                    "status": "error", "reason": "test reason"}],
        "te_autocast": {"status": "ok", "shape": "B4 T2048", "max_abs_diff_autocast_vs_not": 0.0, "bf16_ms": 0.2,
                        "autocast_ms": 0.2, "bf16_kernels": ["cudnn_fmha_test"], "autocast_kernels": ["cudnn_fmha_test"]},
        "te_block": [{"shape": "B4 T4096", "recipe": r, "status": "ok", "ms": 1.0, "tflops": 300.0,
                      "rel_err_vs_bf16": 0.0 if r == "bf16" else 0.03, "top_kernels": [["gemm_test", 12.5]]}
                     for r in ("bf16", "fp8_delayed", "fp8_current")],
    }


@pytest.fixture
def with_reference(monkeypatch):
    data = json.loads(json.dumps(fake_reference()))  # as it comes back from a JSON file
    monkeypatch.setattr(reference, "load", lambda name="h200": data)
    return data


@pytest.fixture
def without_reference(monkeypatch):
    monkeypatch.setattr(reference, "load", lambda name="h200": None)


# --------------------------------------------------------------------------------------------
# 7 · Benchmarks
# --------------------------------------------------------------------------------------------
def test_benchmarks_page_times_every_supported_implementation_at_the_codelab_shape(without_reference):
    at = open_page(P7)
    (table,) = [d for d in frames(at, "wall_ms") if "tflops" in d]  # on a GPU a kernels table has wall_ms too
    assert sorted(table["implementation"]) == sorted(supported(AttentionShape()))
    assert (table["wall_ms"] > 0).all() and (table["tflops"] > 0).all()
    assert len(charts(at)) >= 2  # timing bars and TFLOP/s bars


@pytest.mark.skipif(not ON_CPU, reason="on a GPU cuDNN runs")
def test_benchmarks_page_says_why_cudnn_and_cupti_need_a_gpu_on_cpu(without_reference):
    at = open_page(P7, SMALL)
    (why,) = frames(at, "why not")
    cudnn = why.set_index("implementation").loc["sdpa_cudnn", "why not"]
    assert "CUDA GPU" in cudnn
    assert "CUPTI" in texts(at, "info")


def test_benchmarks_page_at_a_custom_shape_from_the_url(without_reference):
    at = open_page(P7, SMALL)
    shape = AttentionShape(batch=1, q_len=32, kv_len=32, heads=4, kv_heads=2, head_dim=16)
    assert shape.describe() in texts(at, "header")
    (table,) = [d for d in frames(at, "wall_ms") if "tflops" in d]
    assert sorted(table["implementation"]) == sorted(supported(shape))


def test_sequence_and_batch_sweeps_run_on_their_buttons(without_reference):
    at = open_page(P7, SMALL)
    at.multiselect(key="p7_seq_impls").set_value(["naive", "sdpa_xla"])
    at.multiselect(key="p7_seq_values").set_value([64, 128])
    at.run()
    at.button(key="p7_seq_run").click()
    at.run()
    assert not at.exception
    (seq,) = [d for d in frames(at, "q_len") if "pass" in d]
    assert len(seq) == 4 and set(seq["status"]) == {"ok"}
    assert any('"q_len"' in spec for spec in charts(at))

    at.multiselect(key="p7_batch_impls").set_value(["sdpa_xla"])
    at.multiselect(key="p7_batch_values").set_value([1, 2])
    at.run()
    at.button(key="p7_batch_run").click()
    at.run()
    assert not at.exception
    (batch,) = frames(at, "batch")
    assert sorted(batch["batch"]) == [1, 2]
    assert len(at.download_button) >= 3  # timings, sequence sweep, batch sweep


def test_sweep_lists_cells_that_do_not_fit_with_their_reason(without_reference, small_memory_cap):
    # 64 MiB: naive's float32 scores at T = 1024 (B1 N16: 2 x 64 MiB) do not fit, at T = 64 they do
    at = open_page(P7, {"batch": "1", "heads": "16", "kv_heads": "16", "head_dim": "8"})
    at.multiselect(key="p7_seq_impls").set_value(["naive"])
    at.multiselect(key="p7_seq_values").set_value([64, 1024])
    at.run()
    at.button(key="p7_seq_run").click()
    at.run()
    assert not at.exception
    (seq,) = [d for d in frames(at, "q_len") if "pass" in d]
    assert seq.set_index("q_len").loc[1024, "status"] == "unsupported"
    assert "`naive` at q_len = 1024" in texts(at, "markdown") and "over the cap" in texts(at, "markdown")


def test_benchmarks_page_says_when_no_reference_ships(without_reference):
    at = open_page(P7, SMALL)
    assert "No H200 reference results ship" in texts(at, "info")
    assert "Measured on" not in texts(at, "caption")


def test_benchmarks_page_shows_the_reference_only_when_it_exists(with_reference):
    at = open_page(P7, SMALL)
    assert "No H200 reference results ship" not in texts(at, "info")
    assert "Measured on NVIDIA H200" in texts(at, "caption")
    assert "700 TFLOP/s" in [m.value for m in at.metric]  # the ceiling, from the reference
    assert frames(at, "harness_over_bare")  # fidelity table
    long = [s for s in charts(at) if "forward+backward" in s]
    assert long, "long-context chart"
    assert "`naive` at q_len = 4096" in texts(at, "markdown")  # left out, with its reason


# --------------------------------------------------------------------------------------------
# 8 · MHA, GQA, MQA
# --------------------------------------------------------------------------------------------
def _bytes_per_token(at: AppTest) -> dict[str, int]:
    return {m.label.split(":")[0]: int(m.value.replace(",", "").removesuffix(" B"))
            for m in at.metric if "bytes per token" in m.label}


def test_variants_page_at_the_codelab_shape_shows_identical_outputs_and_the_cache_formula():
    at = open_page(P8)
    (checks,) = frames(at, "output shape")
    assert set(checks["variant"]) == {"MHA", "GQA", "MQA"}
    assert set(checks["output shape"]) == {"(4, 128, 8, 64)"}
    assert checks["matches reference"].all()
    layers, itemsize, head_dim = 32, 4, 64  # the page's default layers; float32; the codelab's H
    assert _bytes_per_token(at) == {"MHA": 2 * 8 * head_dim * itemsize * layers, "GQA": 2 * 2 * head_dim * itemsize * layers,
                                    "MQA": 2 * 1 * head_dim * itemsize * layers}


def test_variants_page_at_a_custom_shape_follows_the_widgets_and_times_a_decode_step():
    at = open_page(P8, {**SMALL, "dtype": "bfloat16"})
    at.number_input(key="p8_layers").set_value(3)
    at.number_input(key="p8_context").set_value(100)
    at.number_input(key="p8_kv_len").set_value(64)
    at.multiselect(key="p8_decode_impls").set_value(["naive", "sdpa_xla"])
    at.run()
    assert _bytes_per_token(at) == {"MHA": 2 * 4 * 16 * 2 * 3, "GQA": 2 * 2 * 16 * 2 * 3,
                                    "MQA": 2 * 1 * 16 * 2 * 3}
    (cache,) = frames(at, "query heads per KV head")
    assert list(cache["kv_heads"]) == [4, 2, 1]
    at.button(key="p8_decode_run").click()
    at.run()
    assert not at.exception
    (decode,) = frames(at, "KV bytes read")
    assert len(decode) == 6 and set(decode["status"]) == {"ok"}
    assert any('"variant"' in spec and "Decode step" in spec for spec in charts(at))


def test_variants_page_without_a_gqa_says_so():
    at = open_page(P8, {"batch": "1", "q_len": "16", "kv_len": "16", "heads": "2", "kv_heads": "2", "head_dim": "8"})
    assert "No GQA" in texts(at, "caption")
    assert set(_bytes_per_token(at)) == {"MHA", "MQA"}


# --------------------------------------------------------------------------------------------
# 9 · TransformerEngine and FP8
# --------------------------------------------------------------------------------------------
@pytest.mark.skipif(not ON_CPU, reason="describes the CPU backend")
def test_te_fp8_page_on_cpu_says_what_is_missing_and_shows_the_code_to_run(without_reference):
    at = open_page(P9)
    (avail,) = frames(at, "needs")
    te_row = avail.set_index("what").loc["TransformerEngine for JAX imports"]
    assert te_row["here"].endswith("no") and te_row["detail"] == te_mod.import_error()
    assert (avail["here"] == "❌ no").all()
    assert "cudnn_fp8" in " ".join(avail["what"]) and "9.0" in " ".join(avail["needs"])
    codes = [c.value for c in at.code]
    assert any("use_fp8=True" in c for c in codes) and any("DotProductAttention" in c for c in codes)
    assert "No H200 reference results ship" in texts(at, "info")
    assert not [b for b in at.button if (b.key or "").startswith("p9_")], "no live study is offered on a CPU"


def test_te_fp8_page_shows_the_reference_studies_where_nothing_runs_live(with_reference):
    at = open_page(P9, SMALL)
    if not ON_CPU:
        pytest.skip("on a GPU the live studies take the reference's place")
    assert "Measured on NVIDIA H200" in texts(at, "caption")
    assert "identical" in texts(at, "success")  # (a) autocast changed no kernel
    assert "0" in [m.value for m in at.metric]
    (block,) = frames(at, "rel_err_vs_bf16")
    assert list(block["recipe"]) == ["bf16", "fp8_delayed", "fp8_current"]
    assert "matmul (XLA fusion) (gemm_test) 12.5 µs" in block["top_kernels"].iloc[0]
    (errors,) = frames(at, "err_unit_scales")
    assert errors["err_amax_all"].iloc[0] == pytest.approx(0.02)
    (speed,) = frames(at, "fp8_e2e_tflops")
    assert list(speed["status"]) == ["ok", "error"]
    assert "fp8_burst_clock_mhz" in speed  # each speed comes with the clock it ran at
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["FP8 at boost clock"] == "1,010 TFLOP/s" and metrics["FP8 sustained"] == "600 TFLOP/s"
    assert metrics["SM clock, boost → sustained"] == "1980 → 1700 MHz"
    assert any("by shape at boost clock" in s for s in charts(at))
    at.radio(key="p9_fp8_state").set_value("sustained (after 1.5 s of calls)").run()
    assert not at.exception and any("by shape sustained" in s for s in charts(at))
    assert any("bf16 vs FP8 by shape" in s for s in charts(at))
    assert any("by q_len (causal, bfloat16)" in s for s in charts(at))  # the TE sweep from the reference
    assert any("TFLOP/s by recipe" in s for s in charts(at))


@pytest.mark.parametrize("page", [P7, P8, P9])
@pytest.mark.parametrize("params", [
    {"q_len": "12abc", "heads": "<script>"},
    {"kv_heads": "3"},
    {"dtype": "float8", "causal": "maybe"},
])
def test_hostile_query_strings_give_messages_not_exceptions(page, params):
    at = open_page(page, params)
    assert at.error, "the URL's problem is stated"
    assert "computes nothing" in texts(at, "warning")
    assert not frames(at, "wall_ms") and not frames(at, "output shape")


# --------------------------------------------------------------------------------------------
# on a GPU (python -m attnlab gpucheck runs these there)
# --------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_benchmarks_page_on_a_gpu_shows_device_time_and_kernels():
    at = open_page(P7, {"dtype": "bfloat16"})
    (table,) = [d for d in frames(at, "wall_ms") if "kernels" in d]  # "What ran on the GPU"
    assert "sdpa_cudnn" in set(table["implementation"])
    assert table.set_index("implementation").loc["sdpa_cudnn", "device_ms"] > 0
    assert frames(at, "kernels")


@pytest.mark.gpu
def test_te_and_fp8_studies_run_live_on_a_gpu():
    at = open_page(P9, {"dtype": "bfloat16", "causal": "true"})
    for key in ("p9_te_run", "p9_autocast_run", "p9_block_run", "p9_fp8_run"):
        buttons = [b for b in at.button if b.key == key]
        if not buttons:
            continue  # the page said why this study cannot run here (no TE, or compute capability)
        if key == "p9_te_run":
            at.multiselect(key="p9_te_lengths").set_value([128, 256])
            at.run()
        if key == "p9_fp8_run":
            at.multiselect(key="p9_fp8_t").set_value([1024])
            at.multiselect(key="p9_fp8_h").set_value([64])
            at.run()
        at.button(key=key).click()
        at.run()
        assert not at.exception, (key, [e.value for e in at.exception])
