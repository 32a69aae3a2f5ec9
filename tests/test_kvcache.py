"""KV-cache size math and the MHA / GQA / MQA variants (attnlab.studies.kvcache), on CPU."""

from __future__ import annotations

import json

import pytest

from attnlab import device
from attnlab.math import checks
from attnlab.measure import runs
from attnlab.shapes import AttentionShape
from attnlab.studies import kvcache


@pytest.mark.parametrize(("heads", "preferred", "expected"), [
    (8, None, 2),  # the codelab: 8 query heads, 2 KV heads
    (16, None, 4),
    (12, None, 3),
    (6, None, 2),
    (4, None, 2),
    (8, 4, 4),  # the learner's own kv_heads is kept when it is a GQA
    (8, 8, 2),  # ... but not when it is MHA
    (8, 3, 2),  # ... nor when it does not divide heads
    (7, None, None),  # prime: no GQA
    (2, None, None),
    (1, None, None),
])
def test_gqa_kv_heads_divides_heads_strictly_between_one_and_heads(heads, preferred, expected):
    assert kvcache.gqa_kv_heads(heads, preferred) == expected


def test_variants_of_the_codelab_shape_are_mha_gqa_mqa():
    vs = kvcache.variants(AttentionShape())
    assert [(v.variant, v.kv_heads) for v in vs] == [("MHA", 8), ("GQA", 2), ("MQA", 1)]
    assert all(v.q_shape() == AttentionShape().q_shape() for v in vs)


def test_variants_that_coincide_are_listed_once():
    assert [v.variant for v in kvcache.variants(AttentionShape(heads=1, kv_heads=1))] == ["MHA"]
    assert [v.variant for v in kvcache.variants(AttentionShape(heads=2, kv_heads=2))] == ["MHA", "MQA"]


def test_bytes_per_token_is_two_times_kv_heads_head_dim_itemsize_layers():
    assert kvcache.bytes_per_token(kv_heads=8, head_dim=128, itemsize=2, layers=32) == 2 * 8 * 128 * 2 * 32
    assert kvcache.bytes_per_token(1, 64, 4) == 512


def test_cache_bytes_scales_with_context_layers_and_sequences():
    shape = AttentionShape(kv_heads=2, dtype="bfloat16")
    one = kvcache.cache_bytes(shape, context_len=1, layers=1)
    assert one == 2 * 2 * 64 * 2
    assert kvcache.cache_bytes(shape, context_len=4096, layers=32, sequences=4) == one * 4096 * 32 * 4


def test_cache_table_gqa_and_mqa_are_fractions_of_mha():
    df = kvcache.cache_table(AttentionShape(dtype="bfloat16"), context_len=8192, layers=32).set_index("variant")
    assert df.loc["MHA", "fraction_of_mha"] == 1.0
    assert df.loc["GQA", "fraction_of_mha"] == pytest.approx(2 / 8)
    assert df.loc["MQA", "fraction_of_mha"] == pytest.approx(1 / 8)
    assert df.loc["MHA", "bytes_per_token"] == 2 * 8 * 64 * 2 * 32
    assert df.loc["MQA", "cache_bytes_for_batch"] == df.loc["MQA", "cache_bytes_per_sequence"] * 4


def test_output_checks_of_a_large_shape_check_a_slice_of_the_real_output_and_say_so(monkeypatch):
    shape = AttentionShape(batch=2, q_len=32, kv_len=32, heads=4, kv_heads=2, head_dim=8)
    monkeypatch.setattr(checks, "REFERENCE_MAX_BYTES", checks.Slice(1, 1, 1, (0,)).host_bytes(shape) * 40)
    df = kvcache.output_checks(shape, ["naive"])
    assert list(df["variant"]) == ["MHA", "GQA", "MQA"]
    assert (df["output_shape"] == "(2, 32, 4, 8)").all() and df["allclose"].all(), df
    assert df["reference_note"].str.contains("checked on 1 of 2 sequences").all()


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_gqa_output_has_the_mha_shape_and_matches_reference(kv_heads):
    shape = AttentionShape(batch=1, q_len=16, kv_len=24, heads=4, kv_heads=kv_heads, head_dim=8)
    for r in runs.run(shape, ["naive", "sdpa_xla"]):
        assert r.ok, r
        assert r.output_shape == (1, 16, 4, 8) and r.accuracy.allclose
    df = kvcache.output_checks(shape, ["naive"])
    assert f"(1, 24, {kv_heads}, 8)" in set(df["k, v shape"])


def test_output_checks_of_an_unsupported_implementation_say_why():
    import jax

    if jax.default_backend() == "gpu":
        pytest.skip("cuDNN is available here")
    df = kvcache.output_checks(AttentionShape(batch=1, q_len=8, kv_len=8, heads=2, kv_heads=1, head_dim=8),
                               ["sdpa_cudnn"])
    assert (df["status"] == runs.UNSUPPORTED).all() and df["reason"].str.contains("CUDA GPU").all()


def test_decode_shape_is_one_query_over_the_whole_cache_without_a_causal_mask():
    d = kvcache.decode_shape(AttentionShape(causal=True), kv_len=4096)
    assert (d.q_len, d.kv_len, d.causal) == (1, 4096, False)


def test_decode_table_adds_kv_bytes_read_and_bandwidth():
    shape = kvcache.decode_shape(AttentionShape(kv_heads=2), kv_len=1000)
    results = runs.run(shape, ["naive", "sdpa_cudnn"], accuracy=False, timed=True)
    df = kvcache.decode_table(results).set_index("implementation")
    assert df.loc["naive", "variant"] == "GQA"
    assert df.loc["naive", "kv_read_bytes"] == 2 * 4 * 1000 * 2 * 64 * 4
    ms = df.loc["naive", "device_ms"] or df.loc["naive", "throughput_ms"]
    assert df.loc["naive", "kv_read_gb_per_s"] == pytest.approx(df.loc["naive", "kv_read_bytes"] / (ms * 1e-3) / 1e9)
    if df.loc["sdpa_cudnn", "status"] != runs.OK:
        assert df.loc["sdpa_cudnn", "kv_read_gb_per_s"] is None or df.loc["sdpa_cudnn", "kv_read_gb_per_s"] != df.loc[
            "sdpa_cudnn", "kv_read_gb_per_s"]


def test_the_decode_study_times_every_variant_and_says_why_a_cell_cannot_run():
    base = AttentionShape(batch=1, heads=4, kv_heads=4, head_dim=16)
    rows = kvcache.decode_study((64, 128), ("naive", "sdpa_cudnn"), bases={"tiny": base}, log=lambda s: None)
    assert len(rows) == 2 * 3 * 2  # lengths x (MHA, GQA, MQA) x implementations
    naive = [r for r in rows if r["implementation"] == "naive"]
    assert all(r["status"] == runs.OK and r["kv_read_gb_per_s"] > 0 and r["q_len"] == 1 for r in naive)
    assert [r["kv_read_bytes"] for r in naive[:3]] == [2 * 64 * k * 16 * 4 for k in (4, 2, 1)]
    if not device.info().is_cuda:
        assert all(r["status"] == runs.UNSUPPORTED and r["reason"] for r in rows if r["implementation"] == "sdpa_cudnn")
    json.dumps(rows)  # plain JSON: what the GPU ships


def test_savings_compare_each_variant_with_mha_and_find_layout_copies():
    from attnlab import shipped

    steps = shipped.frame("decode", kvcache.SHIPPED)
    llama = steps[(steps["base"] == "Llama 3 8B heads, batch 8") & (steps["kv_len"] == 16384)]
    s = kvcache.savings(llama).set_index(["implementation", "variant"])
    assert s.loc[("sdpa_cudnn", "MHA"), "faster"] == 1 and s.loc[("sdpa_cudnn", "GQA"), "bytes_fewer"] == 4
    assert s.loc[("sdpa_cudnn", "MQA"), "bytes_fewer"] == 32
    # as measured on the H200: cuDNN's time falls with the bytes, XLA's GQA program copies K and V first
    assert s.loc[("sdpa_cudnn", "GQA"), "faster"] > 3 and s.loc[("sdpa_cudnn", "GQA"), "layout_copy_ms"] == 0
    assert s.loc[("sdpa_xla", "GQA"), "faster"] < 2 and s.loc[("sdpa_xla", "GQA"), "layout_copy_ms"] > 0.2
    assert kvcache.layout_copy_ms("transpose (layout change) (a) 3.5µs; matmul (b) 9.0µs; transpose (layout "
                                  "change) (c) 1.5µs") == pytest.approx(0.005)


def test_jumps_name_a_step_that_grows_faster_than_the_cache_and_only_that_one():
    import pandas as pd

    rows = pd.DataFrame({"implementation": ["naive"] * 4, "variant": ["MHA"] * 4, "kv_len": [1024, 2048, 4096, 8192],
                         "device_ms": [0.010, 0.020, 0.120, 0.240], "kernel_count": [3, 3, 5, 5],
                         "kernels": [None] * 4})
    found = kvcache.jumps(rows)
    assert [(j["from"], j["to"]) for j in found] == [(2048, 4096)]
    assert found[0]["grew"] == pytest.approx(6.0) and found[0]["longer"] == 2 and found[0]["kernels_after"] == 5


def test_output_checks_run_every_variant_in_one_turn(device_turns):
    df = kvcache.output_checks(AttentionShape(batch=1, q_len=12, kv_len=12, heads=4, kv_heads=2, head_dim=8),
                               ["naive", "sdpa_xla"])
    assert set(df["variant"]) == {"MHA", "GQA", "MQA"} and (df["status"] == "ok").all() and len(device_turns) == 1
