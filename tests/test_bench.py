import shutil
import threading
import time

import jax
import pytest

from attnlab import bench, device
from attnlab import implementations as impls
from attnlab.shapes import AttentionShape

TINY = AttentionShape(batch=1, q_len=32, kv_len=32, heads=2, kv_heads=2, head_dim=16)


def test_run_cell_reports_every_timing_named_for_what_it_measures():
    row = bench.run_cell(TINY, "naive")
    assert row["status"] == "ok", row
    for key in ("compile_ms", "wall_ms", "throughput_ms", "wall_ms_iqr", "tflops", "gflop", "temp_bytes"):
        assert row[key] is not None and row[key] >= 0, key
    assert row["compile_ms"] > 0 and row["wall_ms"] > 0 and row["throughput_ms"] > 0
    assert row["gflop"] == pytest.approx(TINY.flops() / 1e9)
    assert row["tflops"] == pytest.approx(TINY.flops() / (row["throughput_ms"] * 1e-3) / 1e12)
    if jax.default_backend() != "gpu":
        assert row["device_ms"] is None and "CUPTI" in row["device_note"]


def test_forward_backward_counts_three_and_a_half_forwards():
    row = bench.run_cell(TINY, "sdpa_xla", backward=True)
    assert row["status"] == "ok" and row["pass"] == "forward+backward"
    assert row["gflop"] == pytest.approx(3.5 * TINY.flops() / 1e9)


def test_compiled_memory_of_naive_grows_with_the_square_of_the_length():
    small = bench.describe_compiled(bench.compile_implementation("naive", TINY.replace(q_len=256, kv_len=256))[0])
    large = bench.describe_compiled(bench.compile_implementation("naive", TINY.replace(q_len=512, kv_len=512))[0])
    assert small.temp_bytes and large.temp_bytes
    assert large.temp_bytes / small.temp_bytes > 3


def test_sweep_yields_one_row_per_value_and_implementation_with_failures_as_rows():
    rows = list(bench.sweep(TINY, "q_len", [16, 32], ["naive", "sdpa_xla", "sdpa_cudnn"]))
    assert [(r["value"], r["implementation"]) for r in rows] == [
        (16, "naive"), (16, "sdpa_xla"), (16, "sdpa_cudnn"), (32, "naive"), (32, "sdpa_xla"), (32, "sdpa_cudnn")]
    assert all(r["q_len"] == r["kv_len"] == r["value"] for r in rows)  # a sequence sweep moves both
    if jax.default_backend() != "gpu":
        cudnn = [r for r in rows if r["implementation"] == "sdpa_cudnn"]
        assert all(r["status"] == "unsupported" and "CUDA GPU" in r["reason"] for r in cudnn)
    df = bench.to_frame(rows)
    assert len(df) == 6 and {"status", "reason", "wall_ms", "tflops"} <= set(df.columns)


def test_sweep_over_the_cap_is_a_row_with_the_estimate(small_memory_cap):
    rows = list(bench.sweep(TINY, "q_len", [2048], ["naive", "sdpa_xla"]))
    assert all(r["status"] == "unsupported" and "over the cap" in r["reason"] for r in rows)


def test_out_of_memory_becomes_a_row_not_an_exception(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 99.00GiB.")

    monkeypatch.setattr(bench, "compile_implementation", boom)
    row = bench.run_cell(TINY.replace(q_len=64), "naive")
    assert row["status"] == "out of memory" and "RESOURCE_EXHAUSTED" in row["reason"]


def test_a_backend_error_becomes_a_row(monkeypatch):
    monkeypatch.setattr(bench, "compile_implementation", lambda *a, **k: (_ for _ in ()).throw(ValueError("bad")))
    row = bench.run_cell(TINY.replace(q_len=48), "naive")
    assert row["status"] == "error" and "ValueError: bad" in row["reason"]


def test_sweep_refuses_an_unknown_field():
    with pytest.raises(ValueError, match="cannot sweep over 'colour'"):
        list(bench.sweep(TINY, "colour", [1], ["naive"]))


def test_device_queue_runs_one_job_at_a_time_and_says_when_one_waits():
    q = bench.DeviceQueue(slots=1)
    inside, peak, waits = [0], [0], []
    lock = threading.Lock()

    def job():
        with q.slot(on_wait=waits.append):
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.02)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=job) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert peak[0] == 1 and len(waits) >= 1


def test_device_queue_is_reentrant_and_bounded():
    q = bench.DeviceQueue(slots=1, max_waiting=0)
    with q.slot():
        with q.slot():  # a sweep calling measure on the same thread
            pass
        errors = []
        t = threading.Thread(target=lambda: errors.append(_try(q)))
        t.start()
        t.join()
        assert isinstance(errors[0], bench.DeviceBusy)


def _try(q):
    try:
        with q.slot(timeout=0.1):
            return None
    except bench.DeviceBusy as e:
        return e


def test_peak_for_float32_is_tf32_and_for_bf16_is_bf16():
    info = device.DeviceInfo("gpu", "cuda", "NVIDIA H200", 1, (9, 0), None, None, "", "", "9", None,
                             device.peak_for("NVIDIA H200"))
    assert bench.peak_tflops("float32", info) == info.peak.tf32_tflops
    assert bench.peak_tflops("bfloat16", info) == info.peak.bf16_tflops


def test_check_outputs_of_timed_implementation_match():
    # the harness times the registry's own callable: the compiled program computes attention
    compiled, _ = bench.compile_implementation("naive", TINY)
    q, k, v = impls.make_inputs(TINY)
    ref = impls.reference_attention(q, k, v)
    assert impls.check_against_reference("naive", compiled(q, k, v), ref, "float32").allclose


def test_clock_states_on_cpu_says_there_is_no_device_time_and_reads_no_clock():
    if jax.default_backend() == "gpu":
        pytest.skip("the GPU version is in test_gpu.py")
    shape = AttentionShape(batch=1, q_len=16, kv_len=16, heads=2, kv_heads=2, head_dim=8)
    compiled, _ = bench.compile_implementation("naive", shape)
    t = bench.clock_states(compiled, impls.make_inputs(shape))
    assert t.burst_ms is None and t.sustained_ms is None and t.burst_clock_mhz is None
    assert "CUPTI" in t.note
    if shutil.which("nvidia-smi") is None:
        assert device.sm_clock_mhz() is None
