"""The one timing harness."""

import shutil

import jax
import pytest

from attnlab import device
from attnlab.measure import compiled, runs, timing
from attnlab.shapes import AttentionShape


def test_peak_for_float32_is_tf32_and_for_bf16_is_bf16():
    info = device.DeviceInfo("gpu", "cuda", "NVIDIA H200", 1, (9, 0), None, None, "", "", "9", None,
                             device.peak_for("NVIDIA H200"))
    assert timing.peak_tflops("float32", info) == info.peak.tf32_tflops
    assert timing.peak_tflops("bfloat16", info) == info.peak.bf16_tflops
    assert timing.peak_tflops("bfloat16", info, fp8=True) == info.peak.fp8_tflops == 1979.0  # cuDNN's FP8 kernel


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


class _Calls:
    """A compiled call that counts its calls and takes `ms` each."""

    def __init__(self, ms: float):
        self.n, self.ms = 0, ms

    def __call__(self):
        import time

        self.n += 1
        time.sleep(self.ms / 1e3)
        return jax.numpy.zeros(())


def test_the_warm_up_by_time_holds_its_seconds_whatever_the_clock(monkeypatch):
    monkeypatch.setattr(device, "nvml_sm_clock", lambda: (1980, 1980))  # already at its most
    f = _Calls(ms=1)
    ms, clock = timing.warm_up(f, (), calls=3, seconds=0.1)
    assert ms >= 100 and f.n > 3 and clock is None  # NVML is read only by the clock rule


def test_the_warm_up_by_clock_ends_once_the_clock_is_up_and_its_calls_are_done(monkeypatch):
    reads = iter([345, 600, 1200, 1900])  # an idle GPU's clock rising, one read per call past the third
    monkeypatch.setattr(device, "nvml_sm_clock", lambda: (next(reads, 1900), 1980))
    f = _Calls(ms=1)
    ms, clock = timing.warm_up(f, (), calls=3, seconds=5.0, by_clock=True)
    assert f.n == 6 and clock == 1900 and ms < 1000  # 3 calls, then one per read under 90 % of 1980 MHz


def test_the_warm_up_by_clock_is_the_time_rule_where_no_clock_can_be_read(monkeypatch):
    monkeypatch.setattr(device, "nvml_sm_clock", lambda: None)  # a CPU, or no NVML
    f = _Calls(ms=1)
    ms, clock = timing.warm_up(f, (), calls=3, seconds=0.1, by_clock=True)
    assert ms >= 100 and clock is None
    throttled = _Calls(ms=1)  # a hot GPU whose clock never reaches 90 %: the seconds bound it
    monkeypatch.setattr(device, "nvml_sm_clock", lambda: (1600, 1980))
    ms, clock = timing.warm_up(throttled, (), calls=3, seconds=0.1, by_clock=True)
    assert 100 <= ms < 1000 and clock == 1600


def test_the_warm_up_rule_is_a_setting_and_the_time_rule_its_default():
    from attnlab.settings import Settings

    assert Settings.from_env({}).warm_by_clock is False
    assert Settings.from_env({"ATTNLAB_WARM_BY_CLOCK": "1"}).warm_by_clock is True


def test_on_this_cpu_nvml_reads_no_clock_and_a_timing_says_so():
    if jax.default_backend() == "gpu":
        pytest.skip("a GPU's clock is read in test_gpu.py")
    assert device.nvml_sm_clock() is None
    shape = AttentionShape(batch=1, q_len=16, kv_len=16, heads=2, kv_heads=2, head_dim=8)
    exe, ms, _ = compiled.compile_backend("naive", shape)
    t = timing.time_compiled(exe, runs.make_inputs(shape), compile_ms=ms, budget_s=0.1)
    assert t.clock_mhz is None and t.warmup_ms >= 0


def test_overlapping_lines_are_those_within_the_tolerance_at_every_shared_x():
    import math

    import pandas as pd

    from attnlab.studies import memory, timing_demo

    rows = [("b", 1, 10.0), ("b", 2, 20.0), ("a", 1, 10.05), ("a", 2, 20.1), ("a", 4, 99.0),  # a, b agree where shared
            ("c", 1, 10.0), ("c", 2, 30.0),  # c departs at x = 2
            ("d", 8, 1.0),  # d shares no x with anyone
            ("e", 1, math.nan), ("e", 2, 20.0)]  # e's NaN is left out: it agrees with a and b at x = 2
    df = pd.DataFrame(rows, columns=["implementation", "q_len", "ms"]).assign(status="ok")
    assert timing_demo.overlapping(df, "q_len", "ms", within=0.01) == [("a", "b"), ("a", "e"), ("b", "e")]
    found = memory.overlaps(df, "ms", within=0.01)
    assert [(a, b) for a, b, _ in found] == [("b", "a"), ("b", "e"), ("a", "e")]  # in the frame's order
    assert math.isclose(found[0][2], 0.1 / 20.1)


def _demo(wall: float, throughput: float):
    import pandas as pd

    return pd.DataFrame({"measured": ["one call, no wait", "one call + block_until_ready (wall)",
                                      "20 calls queued, clock read before the wait", "20 calls queued, one wait (throughput)"],
                         "ms": [0.15, wall, 0.02, throughput]})


def test_the_dispatch_reading_claims_overlap_only_beyond_the_noise():
    from attnlab.studies.timing_demo import dispatch_reading

    # 33.05 against 33.51 ms (1.4 %) was read as "Python dispatched the next call while the device worked"
    close = dispatch_reading(_demo(33.51, 33.05), on_gpu=False)
    assert "about as much as one waited call" in close and "dispatched the next call" not in close
    assert "dispatched the next call while the device worked" in dispatch_reading(_demo(1.0, 0.4), on_gpu=True)
    assert "2.0× as much as" in dispatch_reading(_demo(1.0, 2.0), on_gpu=False)


def test_lines_that_meet_at_some_lengths_are_named_with_where():
    # naive and sdpa_xla lie on each other at T = 4,096 and 8,192 of the H200's long-context chart, apart elsewhere
    import pandas as pd

    from attnlab.studies.timing_demo import meeting, overlapping

    df = pd.DataFrame({"q_len": [2048, 4096, 8192] * 3, "implementation": ["naive"] * 3 + ["sdpa_xla"] * 3 + ["cudnn"] * 3,
                       "y": [100, 150, 160, 130, 151, 160.5, 500, 550, 560]})
    assert meeting(df, "q_len", "y", 0.03) == [("naive", "sdpa_xla", [4096, 8192])]
    assert overlapping(df, "q_len", "y", 0.03) == []
