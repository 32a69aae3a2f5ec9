"""GPU tests: run on the GPU machine (`python -m attnlab gpucheck`), skipped cleanly elsewhere."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab import bench, device, fp8, te
from attnlab import implementations as impls
from attnlab.shapes import AttentionShape

pytestmark = pytest.mark.gpu

BF16 = AttentionShape(batch=2, q_len=256, kv_len=384, heads=8, kv_heads=2, head_dim=64, dtype="bfloat16")


def test_cudnn_is_available_on_this_gpu():
    info = device.info()
    assert info.is_cuda and info.compute_capability >= (8, 0) and info.cudnn_version
    assert impls.get("sdpa_cudnn").supports(AttentionShape(dtype="bfloat16"), info).ok


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [8, 2, 1])
def test_cudnn_matches_xla_and_the_float64_reference(causal, kv_heads):
    shape = BF16.replace(causal=causal, kv_heads=kv_heads)
    q, k, v = impls.make_inputs(shape, seed=kv_heads)
    ref = impls.reference_attention(q, k, v, causal=causal)
    cudnn = impls.get("sdpa_cudnn").jit(shape)(q, k, v)
    xla = impls.get("sdpa_xla").jit(shape)(q, k, v)
    naive = impls.get("naive").jit(shape)(q, k, v)
    for name, out in (("sdpa_cudnn", cudnn), ("sdpa_xla", xla), ("naive", naive)):
        check = impls.check_against_reference(name, out, ref, "bfloat16")
        assert check.allclose and check.relative_error < 1e-2, check
    np.testing.assert_allclose(np.asarray(cudnn, np.float32), np.asarray(xla, np.float32), rtol=1e-2, atol=1e-2)


def test_float32_on_gpu_matches_the_reference_within_tf32():
    shape = BF16.replace(dtype="float32")
    q, k, v = impls.make_inputs(shape)
    ref = impls.reference_attention(q, k, v)
    for name in ("naive", "sdpa_xla", "sdpa_auto"):
        check = impls.check_against_reference(name, impls.get(name).jit(shape)(q, k, v), ref, "float32")
        assert check.allclose and check.relative_error < 1e-3, check


def test_compiled_program_names_the_kernel_that_runs():
    shape = BF16
    cudnn = bench.describe_compiled(bench.compile_implementation("sdpa_cudnn", shape)[0])
    auto = bench.describe_compiled(bench.compile_implementation("sdpa_auto", shape)[0])
    assert cudnn.uses_cudnn_attention, cudnn.custom_calls
    assert not auto.uses_cudnn_attention  # implementation=None takes XLA in JAX 0.4.35..0.11
    assert cudnn.temp_bytes is not None


def test_cupti_names_each_kernel_and_its_time():
    row = bench.run_cell(AttentionShape(dtype="bfloat16"), "sdpa_cudnn")
    assert row["status"] == "ok", row
    assert row["device_ms"] and 0 < row["device_ms"] < row["wall_ms"]
    assert row["kernel_count"] >= 1 and ("sdpa" in row["kernels"].lower() or "fmha" in row["kernels"].lower()
                                         or "flash" in row["kernels"].lower()), row["kernels"]
    naive = bench.run_cell(AttentionShape(dtype="bfloat16"), "naive")
    assert naive["kernel_count"] > row["kernel_count"]  # several XLA kernels against one fused one


def test_sweep_on_gpu_reports_tflops_and_peak():
    rows = list(bench.sweep(AttentionShape(dtype="bfloat16"), "q_len", [512, 1024], ["sdpa_xla", "sdpa_cudnn"]))
    assert all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    info = device.info()
    for r in rows:
        assert r["tflops"] > 0 and r["device_tflops"] > 0
        if info.peak:
            assert 0 < r["pct_of_peak"] < 100


def test_naive_out_of_the_cap_is_left_out_with_its_reason():
    shape = AttentionShape(batch=8, q_len=32768, kv_len=32768, heads=16, kv_heads=16, head_dim=128, dtype="bfloat16")
    assert shape.validate() == []  # a fused kernel could run it...
    row = bench.run_cell(shape, "naive")  # ...but the naive T×S scores would need a terabyte
    assert row["status"] == "unsupported" and "over the cap" in row["reason"]


def test_a_real_out_of_memory_is_a_row():
    # 2**36 bf16 elements (128 GiB) per input: the GPU cannot hold three of them, whatever the cap says
    shape = AttentionShape(batch=64, q_len=65536, kv_len=65536, heads=128, kv_heads=128, head_dim=128, dtype="bfloat16")
    import os

    os.environ["ATTNLAB_MEMORY_LIMIT_GIB"] = "100000"
    try:
        row = bench.run_cell(shape, "sdpa_cudnn")
    finally:
        del os.environ["ATTNLAB_MEMORY_LIMIT_GIB"]
    assert row["status"] in ("out of memory", "error"), row
    # and the device still works afterwards
    assert bench.run_cell(AttentionShape(dtype="bfloat16"), "sdpa_cudnn")["status"] == "ok"


# --- FP8 (Hopper) ----------------------------------------------------------------------------
needs_hopper = pytest.mark.skipif(
    not device.info().at_least(device.FP8_ATTENTION_MIN_CC), reason="cuDNN FP8 attention needs compute capability 9.0")


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_cudnn_fp8_attention_is_close_to_bf16(causal):
    shape = AttentionShape(batch=2, q_len=1024, kv_len=1024, heads=8, kv_heads=8, head_dim=128,
                           dtype="bfloat16", causal=causal)
    q, k, v = impls.make_inputs(shape, seed=5)
    ref = np.asarray(impls.get("sdpa_cudnn").jit(shape)(q, k, v), np.float64)
    out = np.asarray(impls.get("cudnn_fp8").jit(shape)(q, k, v), np.float64)
    assert np.isfinite(out).all()
    rel = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert rel < 0.15, rel
    s_o = fp8.calibrated_output_scale(q, k, v, causal=causal)
    assert s_o > 1  # |O| << 448: a data scale stretches it over FP8's range
    scaled = fp8.cudnn_fp8_attention(q, k, v, causal=causal, scale_s=fp8.P_SCALE, scale_o=s_o)[0]
    rel_scaled = np.linalg.norm(np.asarray(scaled, np.float64) - ref) / np.linalg.norm(ref)
    assert rel_scaled < 0.15, rel_scaled


@needs_hopper
def test_fp8_small_outputs_need_their_own_scale():
    # Measured on the H200 (2026-11-29): with x/64 inputs, unit scales and Q/K/V/P scales alone both
    # gave ~0.75 relative error: the output (~7e-4) is below FP8's smallest value (2^-9).
    shape = AttentionShape(batch=1, q_len=512, kv_len=512, heads=4, kv_heads=4, head_dim=128, dtype="bfloat16")
    q, k, v = (x / 64 for x in impls.make_inputs(shape, seed=6))
    ref = np.asarray(impls.get("sdpa_cudnn").jit(shape)(q, k, v), np.float64)
    rel = lambda out: np.linalg.norm(np.asarray(out, np.float64) - ref) / np.linalg.norm(ref)  # noqa: E731
    unit = rel(fp8.cudnn_fp8_attention(q, k, v, causal=False, data_scales=False)[0])
    qkvp = rel(fp8.cudnn_fp8_attention(q, k, v, causal=False, scale_s=fp8.P_SCALE)[0])
    s_o = fp8.calibrated_output_scale(q, k, v, causal=False)
    scaled = rel(fp8.cudnn_fp8_attention(q, k, v, causal=False, scale_s=fp8.P_SCALE, scale_o=s_o)[0])
    assert unit > 0.5 and qkvp > 0.5, (unit, qkvp)
    assert scaled < 0.15, scaled


def test_jax_public_api_rejects_fp8_inputs_for_cudnn():
    q = jnp.ones((1, 128, 4, 64), jnp.float8_e4m3fn)
    with pytest.raises(Exception):  # noqa: B017  (KeyError in JAX 0.11; the page shows the text)
        jax.jit(lambda q: jax.nn.dot_product_attention(q, q, q, implementation="cudnn"))(q)


# --- TransformerEngine (when installed) -----------------------------------------------------
needs_te = pytest.mark.skipif(te.import_error() is not None, reason=str(te.import_error()))


@needs_te
@pytest.mark.parametrize("causal", [False, True])
def test_te_dot_product_attention_matches_cudnn(causal):
    shape = BF16.replace(kv_len=256, causal=causal)
    q, k, v = impls.make_inputs(shape)
    out = np.asarray(impls.get("te_dpa").jit(shape)(q, k, v), np.float32)
    ref = np.asarray(impls.get("sdpa_cudnn").jit(shape)(q, k, v), np.float32)
    np.testing.assert_allclose(out, ref, rtol=1e-2, atol=1e-2)
    compiled = bench.describe_compiled(bench.compile_implementation("te_dpa", shape)[0])
    assert any("fused_attn" in c for c in compiled.custom_calls), compiled.custom_calls


@needs_te
def test_te_autocast_leaves_attention_unchanged_and_fp8_acts_on_dense_layers():
    from attnlab import suite

    a = suite.te_autocast_study(AttentionShape(batch=2, q_len=512, kv_len=512, dtype="bfloat16", causal=True))
    assert a["status"] == "ok", a
    assert a["max_abs_diff_autocast_vs_not"] == 0.0
    rows = suite.te_block_study(AttentionShape(batch=2, q_len=1024, kv_len=1024, heads=8, kv_heads=8,
                                               head_dim=128, dtype="bfloat16", causal=True))
    ok = {r["recipe"]: r for r in rows if r["status"] == "ok"}
    assert "bf16" in ok and ("fp8_current" in ok or "fp8_delayed" in ok), rows
    for name, r in ok.items():
        if name != "bf16":
            assert 0 < r["rel_err_vs_bf16"] < 0.2


def test_clock_states_reads_kernel_time_and_the_sm_clock_in_both_states():
    shape = AttentionShape(batch=2, q_len=2048, kv_len=2048, heads=8, kv_heads=8, head_dim=128, dtype="bfloat16")
    compiled, _ = bench.compile_implementation("sdpa_cudnn", shape)
    t = bench.clock_states(compiled, impls.make_inputs(shape), idle_s=0.5, sustain_s=0.5)
    assert t.burst_ms > 0 and t.sustained_ms > 0, t
    assert 0 < t.burst_clock_mhz <= t.max_clock_mhz and 0 < t.sustained_clock_mhz <= t.max_clock_mhz, t


def test_fp8_kernel_returns_the_output_in_fp8_times_its_scale():
    shape = AttentionShape(batch=1, q_len=512, kv_len=512, heads=4, kv_heads=4, head_dim=128, dtype="bfloat16")
    if not device.info().at_least(device.FP8_ATTENTION_MIN_CC):
        pytest.skip("cuDNN FP8 attention needs compute capability 9.0")
    q, k, v = impls.make_inputs(shape, seed=7)
    qkv8, scales = fp8.quantize_inputs(q, k, v)
    out8, _, _ = fp8.fp8_kernel(*qkv8, scales, causal=False, scale_s=fp8.P_SCALE, scale_o=64.0)
    assert out8.dtype == jnp.float8_e4m3fn
    ref = np.asarray(impls.get("sdpa_cudnn").jit(shape)(q, k, v), np.float64)
    out = np.asarray(out8, np.float64) / 64.0
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 0.15
