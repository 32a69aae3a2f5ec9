"""NVIDIA's H200 table (attnlab/studies/vendor.py): its rows are NVIDIA's published shape, the FP8 rows say they
run MHA, the shipped H200 measurement reads back as a table, and on a machine without a Hopper GPU the live
measurement gives each row the lab's reason instead of a number."""

from __future__ import annotations

import jax
import pytest

from attnlab.studies import vendor


def test_the_rows_are_nvidias_llama_shape_and_fp8_runs_mha_with_the_same_flops():
    for r in vendor.VENDOR:
        s = r.shape()
        assert (s.batch, s.q_len, s.kv_len, s.heads, s.head_dim, s.dtype) == (1, r.seq, r.seq, 64, 128, "bfloat16")
        assert s.causal == r.causal
        assert s.kv_heads == (8 if r.precision == "bf16" else 64)
        assert s.flops() == vendor.VendorRow(r.seq, r.causal, "bf16", 0).shape().flops()  # K/V repeats add no FLOPs
    assert len({r.key for r in vendor.VENDOR}) == len(vendor.VENDOR)


def test_the_shipped_measurement_is_a_table_of_every_row_with_its_ratio_and_clock():
    t = vendor.shipped()
    assert len(t) == len(vendor.VENDOR) and "H200" in t["where"].iloc[0]
    done = t.dropna(subset=["lab_tflops"])
    assert len(done) == 4 and done["clock_mhz"].between(800, 1980).all()
    assert (done["lab_over_nvidia"] - done["lab_tflops"] / done["nvidia_tflops"]).abs().max() < 1e-12
    assert (t[t["lab_tflops"].isna()]["note"] == "not measured").all()
    assert done[done["precision"] == "fp8"]["how"].str.contains("repeated to 64 heads").all()


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="on a GPU this measures (tests/test_gpu.py)")
def test_measured_where_cudnn_cannot_run_each_row_says_why():
    t = vendor.measure(("bf16 T8192", "fp8 T8192"))
    assert len(t) == 2 and t["lab_tflops"].isna().all()
    assert all(len(n) > 10 and n != "not measured" for n in t["note"]), list(t["note"])
