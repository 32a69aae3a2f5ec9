"""GPU tests: run on the GPU machine (`python -m attnlab gpucheck`), skipped cleanly elsewhere."""

import os
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab import device
from attnlab.admission import DEVICE
from attnlab.backends import fp8, get, te
from attnlab.math import checks
from attnlab.measure import compiled, runs, timing
from attnlab.shapes import AttentionShape
from attnlab.studies import fp8_study

pytestmark = pytest.mark.gpu

BF16 = AttentionShape(batch=2, q_len=256, kv_len=384, heads=8, kv_heads=2, head_dim=64, dtype="bfloat16")


def test_cudnn_is_available_on_this_gpu():
    info = device.info()
    assert info.is_cuda and info.compute_capability >= (8, 0) and info.cudnn_version
    assert get("sdpa_cudnn").unmet(AttentionShape(dtype="bfloat16"), info) is None


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [8, 2, 1])
def test_cudnn_matches_xla_and_the_float64_reference(causal, kv_heads):
    shape = BF16.replace(causal=causal, kv_heads=kv_heads)
    q, k, v = runs.make_inputs(shape, seed=kv_heads)
    ref = checks.float64_reference(shape, q, k, v)
    cudnn = get("sdpa_cudnn").jit(shape)(q, k, v)
    xla = get("sdpa_xla").jit(shape)(q, k, v)
    naive = get("naive").jit(shape)(q, k, v)
    flash = get("flash_jax").jit(shape)(q, k, v)
    for name, out in (("sdpa_cudnn", cudnn), ("sdpa_xla", xla), ("naive", naive), ("flash_jax", flash)):
        check = ref.check(out)
        assert check.allclose and check.relative_error < 1e-2, (name, check)
    np.testing.assert_allclose(np.asarray(cudnn, np.float32), np.asarray(xla, np.float32), rtol=1e-2, atol=1e-2)


def test_float32_on_gpu_matches_the_reference_within_tf32():
    shape = BF16.replace(dtype="float32")
    q, k, v = runs.make_inputs(shape)
    ref = checks.float64_reference(shape, q, k, v)
    for name in ("naive", "sdpa_xla", "sdpa_auto", "flash_jax"):
        check = ref.check(get(name).jit(shape)(q, k, v))
        assert check.allclose and check.relative_error < 1e-3, (name, check)


@pytest.mark.parametrize("masks", [dict(window=(64, 0), causal=True), dict(kv_lengths=(300, 17)),
                                   dict(causal=True, window=(32, 0), kv_lengths=(384, 200))])
def test_masks_in_the_shape_run_on_cudnn_and_match_float64(masks):
    shape = BF16.replace(**masks)
    for r in runs.run(shape, ["naive", "sdpa_xla", "flash_jax", "sdpa_cudnn"]):
        assert r.ok and r.accuracy.allclose, (r.implementation, r.reason, r.accuracy)


def test_a_mask_cudnn_refuses_is_a_reason_in_cudnns_own_words():
    # seen on the H200 (JAX 0.11.2, cuDNN 9.19): a right window is refused unless the mask is causal-only
    shape = BF16.replace(causal=True, window=(32, 8))
    cudnn, xla = runs.run(shape, ["sdpa_cudnn", "sdpa_xla"])
    assert xla.ok and xla.accuracy.allclose
    assert cudnn.ok or (cudnn.status == runs.UNSUPPORTED and "refuses this shape" in cudnn.reason), cudnn


def test_compiled_program_names_the_kernel_that_runs():
    shape = BF16
    cudnn = compiled.describe_compiled(compiled.compile_backend("sdpa_cudnn", shape)[0])
    auto = compiled.describe_compiled(compiled.compile_backend("sdpa_auto", shape)[0])
    assert cudnn.uses_cudnn_attention, cudnn.custom_calls
    assert not auto.uses_cudnn_attention  # implementation=None takes XLA in JAX 0.4.35..0.11
    assert cudnn.temp_bytes is not None


def test_cupti_names_each_kernel_and_its_time():
    row = runs.run(AttentionShape(dtype="bfloat16"), ["sdpa_cudnn"], timed=True)[0].row()
    assert row["status"] == "ok", row
    assert row["device_ms"] and 0 < row["device_ms"] < row["wall_ms"]
    assert row["kernel_count"] >= 1 and ("sdpa" in row["kernels"].lower() or "fmha" in row["kernels"].lower()
                                         or "flash" in row["kernels"].lower()), row["kernels"]
    naive = runs.run(AttentionShape(dtype="bfloat16"), ["naive"], timed=True)[0].row()
    assert naive["kernel_count"] > row["kernel_count"]  # several XLA kernels against one fused one


def test_sweep_on_gpu_reports_tflops_and_peak():
    rows = [r.row() for r in runs.sweep(AttentionShape(dtype="bfloat16"), "q_len", [512, 1024],
                                        ["sdpa_xla", "sdpa_cudnn"], accuracy=False, timed=True)]
    assert all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    info = device.info()
    for r in rows:
        assert r["tflops"] > 0 and r["device_tflops"] > 0
        if info.peak:
            assert 0 < r["pct_of_peak"] < 100


def test_naive_over_the_budget_is_left_out_with_its_reason():
    shape = AttentionShape(batch=8, q_len=32768, kv_len=32768, heads=16, kv_heads=16, head_dim=128, dtype="bfloat16")
    naive, cudnn = runs.run(shape, ["naive", "sdpa_cudnn"], accuracy=False, program=True)
    assert cudnn.ok  # a fused kernel compiles it...
    r = runs.run(shape, ["naive"], accuracy=False, timed=True)[0]  # ...but naive's T×S scores need a terabyte
    assert r.status == runs.OVER_BUDGET and "over this lab's budget" in r.reason


def test_a_real_out_of_memory_is_a_row():
    # 2**36 bf16 elements (128 GiB) per input: the GPU cannot hold three of them, whatever the cap says
    shape = AttentionShape(batch=64, q_len=65536, kv_len=65536, heads=128, kv_heads=128, head_dim=128, dtype="bfloat16")
    from attnlab.admission import Device
    from attnlab.budget import Budget
    from attnlab.settings import override

    big = Device(Budget(2**50, 2**50, False))  # a budget that admits anything: only the GPU can refuse
    orig = runs.DEVICE
    runs.DEVICE = big
    try:  # and no bound on time (its lower bound is hours): only the GPU's memory stops it, at the first allocation
        with override(run_seconds=1e12):
            r = runs.run(shape, ["sdpa_cudnn"], accuracy=False, timed=True)[0]
    finally:
        runs.DEVICE = orig
    assert r.status in (runs.OOM, runs.ERROR), r
    # and the device still works afterwards
    assert runs.run(AttentionShape(dtype="bfloat16"), ["sdpa_cudnn"])[0].ok


# --- FP8 (Hopper) ----------------------------------------------------------------------------
needs_hopper = pytest.mark.skipif(
    not device.info().at_least(device.FP8_ATTENTION_MIN_CC), reason="cuDNN FP8 attention needs compute capability 9.0")


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_cudnn_fp8_attention_is_close_to_bf16(causal):
    shape = AttentionShape(batch=2, q_len=1024, kv_len=1024, heads=8, kv_heads=8, head_dim=128,
                           dtype="bfloat16", causal=causal)
    q, k, v = runs.make_inputs(shape, seed=5)
    ref = np.asarray(get("sdpa_cudnn").jit(shape)(q, k, v), np.float64)
    out = np.asarray(get("cudnn_fp8").jit(shape)(q, k, v), np.float64)
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
    q, k, v = (x / 64 for x in runs.make_inputs(shape, seed=6))
    ref = np.asarray(get("sdpa_cudnn").jit(shape)(q, k, v), np.float64)
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
    q, k, v = runs.make_inputs(shape)
    out = np.asarray(get("te_dpa").jit(shape)(q, k, v), np.float32)
    ref = np.asarray(get("sdpa_cudnn").jit(shape)(q, k, v), np.float32)
    np.testing.assert_allclose(out, ref, rtol=1e-2, atol=1e-2)
    info = compiled.describe_compiled(compiled.compile_backend("te_dpa", shape)[0])
    assert any("fused_attn" in c for c in info.custom_calls), info.custom_calls


@needs_te
def test_te_autocast_leaves_attention_unchanged_and_fp8_acts_on_dense_layers():
    a = fp8_study.te_autocast_study(AttentionShape(batch=2, q_len=512, kv_len=512, dtype="bfloat16", causal=True))
    assert a.ok, a
    assert a.max_abs_diff_autocast_vs_not == 0.0
    rows = fp8_study.te_block_study(AttentionShape(batch=2, q_len=1024, kv_len=1024, heads=8, kv_heads=8,
                                               head_dim=128, dtype="bfloat16", causal=True))
    ok = {r["recipe"]: r for r in rows.to_dict("records") if r["status"] == "ok"}
    assert "bf16" in ok and ("fp8_current" in ok or "fp8_delayed" in ok), rows
    for name, r in ok.items():
        if name != "bf16":
            assert 0 < r["rel_err_vs_bf16"] < 0.2


def test_clock_states_reads_kernel_time_and_the_sm_clock_in_both_states():
    shape = AttentionShape(batch=2, q_len=2048, kv_len=2048, heads=8, kv_heads=8, head_dim=128, dtype="bfloat16")
    exe, _, _ = compiled.compile_backend("sdpa_cudnn", shape)
    t = timing.clock_states(exe, runs.make_inputs(shape), idle_s=0.5, sustain_s=0.5)
    assert t.burst_ms > 0 and t.sustained_ms > 0, t
    assert 0 < t.burst_clock_mhz <= t.max_clock_mhz and 0 < t.sustained_clock_mhz <= t.max_clock_mhz, t


def test_nvml_reads_the_sm_clock_and_a_timing_records_it_after_either_warm_up():
    """NVML through ctypes (device._nvml) agrees with nvidia-smi on the maximum; a timing warmed by the clock rule
    (ATTNLAB_WARM_BY_CLOCK) says the clock its warm-up ended at, and the time rule reads no clock."""
    from attnlab.settings import override

    now, top = device.nvml_sm_clock()
    assert 0 < now <= top
    smi = subprocess.run(["nvidia-smi", "-i", (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0],
                          "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"], capture_output=True, text=True)
    assert int(smi.stdout.strip().splitlines()[0]) == top
    shape = AttentionShape(batch=1, q_len=128, kv_len=128, heads=8, kv_heads=8, head_dim=64, dtype="bfloat16")
    exe, _, _ = compiled.compile_backend("sdpa_cudnn", shape)
    args = runs.make_inputs(shape)
    by_time = timing.time_compiled(exe, args, budget_s=0.1)
    assert by_time.warmup_ms >= 1e3 * timing.WARM_S and by_time.clock_mhz is None, by_time
    with override(warm_by_clock=True):
        by_clock = timing.time_compiled(exe, args, budget_s=0.1)
    assert by_clock.warmup_ms <= 1e3 * timing.WARM_S + 50 and 0 < by_clock.clock_mhz <= top, by_clock


def test_fp8_kernel_returns_the_output_in_fp8_times_its_scale():
    shape = AttentionShape(batch=1, q_len=512, kv_len=512, heads=4, kv_heads=4, head_dim=128, dtype="bfloat16")
    if not device.info().at_least(device.FP8_ATTENTION_MIN_CC):
        pytest.skip("cuDNN FP8 attention needs compute capability 9.0")
    q, k, v = runs.make_inputs(shape, seed=7)
    qkv8, scales = fp8.quantize_inputs(q, k, v)
    out8, _, _ = fp8.fp8_kernel(*qkv8, scales, causal=False, scale_s=fp8.P_SCALE, scale_o=64.0)
    assert out8.dtype == jnp.float8_e4m3fn
    ref = np.asarray(get("sdpa_cudnn").jit(shape)(q, k, v), np.float64)
    out = np.asarray(out8, np.float64) / 64.0
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 0.15


def test_the_budget_on_a_gpu_is_most_of_its_free_memory():
    b = DEVICE.budget
    info = device.info()
    assert not b.shared and 0 < b.device_bytes <= info.memory_free_bytes


def test_flash_jax_keeps_memory_linear_in_t_on_the_gpu():
    shape = AttentionShape(batch=4, q_len=4096, kv_len=4096, heads=16, kv_heads=16, head_dim=128, dtype="bfloat16")
    flash, xla = runs.run(shape, ["flash_jax", "sdpa_xla"], accuracy=False, program=True)
    assert flash.ok and xla.ok
    assert flash.program.temp_bytes < xla.program.temp_bytes / 3, (flash.program.temp_bytes, xla.program.temp_bytes)


def test_a_long_decode_step_on_cudnn_follows_the_kv_bytes():
    """GQA reads 4x fewer K and V bytes than MHA at Llama 3 8B's heads: cuDNN's bandwidth-bound step is over 3x
    faster. (XLA's is not: its GQA program first copies K and V into another layout; page 8 shows it.)"""
    from attnlab import presets
    from attnlab.studies import kvcache

    base = presets.apply("Llama 3 8B", AttentionShape(batch=8, dtype="bfloat16"))
    rows = kvcache.decode_study((32768,), ("sdpa_cudnn",), bases={"llama": base}, log=lambda s: None)
    ms = {r["variant"]: r["device_ms"] for r in rows if r["status"] == runs.OK}
    assert set(ms) == {"MHA", "GQA", "MQA"}, rows
    assert ms["MHA"] > 3 * ms["GQA"] and ms["GQA"] > ms["MQA"], ms


def test_nvidias_8k_rows_measured_live_come_within_reach_of_nvidias_figures():
    """The vendor table's live measurement on a Hopper GPU: every 8k row gets a number, its clock, and a ratio to
    NVIDIA's figure that is plausible for the same kernel family (0.7-1.15x: a wrong FLOP count or a wrong kernel
    lands outside)."""
    from attnlab.studies import vendor

    t = vendor.measure(("bf16 T8192", "bf16 T8192 causal", "fp8 T8192"))
    assert t["lab_tflops"].notna().all(), list(t["note"])
    assert t["lab_over_nvidia"].between(0.7, 1.15).all(), t[["precision", "mask", "lab_tflops", "nvidia_tflops"]]
    assert t["clock_mhz"].notna().all()
