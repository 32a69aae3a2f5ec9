"""The one timing harness."""

import shutil

import jax
import pytest

from attnlab import compiled, device, runs, timing
from attnlab.shapes import AttentionShape


def test_peak_for_float32_is_tf32_and_for_bf16_is_bf16():
    info = device.DeviceInfo("gpu", "cuda", "NVIDIA H200", 1, (9, 0), None, None, "", "", "9", None,
                             device.peak_for("NVIDIA H200"))
    assert timing.peak_tflops("float32", info) == info.peak.tf32_tflops
    assert timing.peak_tflops("bfloat16", info) == info.peak.bf16_tflops


def test_time_compiled_measures_the_compiled_call_with_a_spread():
    shape = AttentionShape(batch=1, q_len=16, kv_len=16, heads=2, kv_heads=2, head_dim=8)
    exe, ms, _ = compiled.compile_backend("naive", shape)
    t = timing.time_compiled(exe, runs.make_inputs(shape), compile_ms=ms, budget_s=0.1)
    assert t.wall_ms > 0 and t.throughput_ms > 0 and t.wall_ms_iqr >= 0 and t.repeats >= 3


def test_clock_states_on_cpu_says_there_is_no_device_time_and_reads_no_clock():
    if jax.default_backend() == "gpu":
        pytest.skip("the GPU version is in test_gpu.py")
    shape = AttentionShape(batch=1, q_len=16, kv_len=16, heads=2, kv_heads=2, head_dim=8)
    exe, _, _ = compiled.compile_backend("naive", shape)
    t = timing.clock_states(exe, runs.make_inputs(shape))
    assert t.burst_ms is None and t.sustained_ms is None and t.burst_clock_mhz is None
    assert "CUPTI" in t.note
    if shutil.which("nvidia-smi") is None:
        assert device.sm_clock_mhz() is None
