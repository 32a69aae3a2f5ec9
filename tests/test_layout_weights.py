"""CPU specifications for attnlab.layout and the weights helpers the learning pages use."""

import dataclasses

import numpy as np
import pytest

from attnlab import device, layout, weights
from attnlab import implementations as impls
from attnlab.shapes import AttentionShape

SMALL = AttentionShape(batch=2, q_len=16, kv_len=24, heads=4, kv_heads=2, head_dim=8)


# --------------------------------------------------------------------------------------------
# layout table
# --------------------------------------------------------------------------------------------
def test_layout_table_bytes_add_up_to_the_shapes_input_and_output_bytes():
    for shape in (AttentionShape(), SMALL, SMALL.replace(dtype="bfloat16")):
        t = layout.layout_table(shape).set_index("layout")
        inputs = layout.layout_table(shape).iloc[:3]["bytes"].sum()
        assert inputs == shape.input_bytes()
        assert t.loc["BTNH", "bytes"].iloc[-1] == shape.output_bytes()
        assert t.loc["BNTS", "elements"] == shape.score_elements()
        assert t.loc["BNTS", "bytes"] == shape.score_elements() * 4  # float32 whatever the inputs


def test_codelab_default_is_one_mebibyte_per_tensor():
    t = layout.layout_table(AttentionShape()).set_index("array")
    for name in ("Q (query)", "K (key)", "V (value)", "output"):
        assert t.loc[name, "bytes"] == 1024**2
        assert t.loc[name, "size"] == "1.00 MiB"


def test_layout_letters_follow_jax_nn_dot_product_attention():
    t = layout.layout_table(SMALL).set_index("array")
    assert t.loc["Q (query)", "layout"] == "BTNH" and t.loc["Q (query)", "shape"] == str(SMALL.q_shape())
    assert t.loc["K (key)", "layout"] == "BSKH" and t.loc["K (key)", "shape"] == str(SMALL.kv_shape())
    letters = layout.letters(SMALL).set_index("letter")["value"]
    assert dict(letters) == {"B": 2, "T": 16, "S": 24, "N": 4, "K": 2, "H": 8}


def test_placement_reports_the_default_device_and_live_nbytes():
    df = layout.placement(SMALL)
    assert list(df["array"]) == ["Q", "K", "V"]
    assert set(df["platform"]) == {"cpu"} or set(df["platform"]) == {"gpu"} or "cuda" in df["platform"].iloc[0]
    table = layout.layout_table(SMALL)
    assert list(df["nbytes"]) == list(table["bytes"].iloc[:3])


# --------------------------------------------------------------------------------------------
# outputs side by side
# --------------------------------------------------------------------------------------------
def test_naive_and_sdpa_agree_and_match_the_float64_reference():
    pair = layout.compare_pair(SMALL, "naive", "sdpa_auto")
    assert pair.a_shape == pair.b_shape == SMALL.q_shape()
    assert pair.a_dtype == pair.b_dtype == "float32"
    assert pair.allclose and pair.max_abs_difference < pair.atol
    assert pair.vs_reference["allclose"].all()
    assert pair.reference_note == ""


def test_compare_pair_says_why_an_implementation_cannot_run():
    if device.info().is_cuda:
        pytest.skip("cuDNN may run here")
    with pytest.raises(ValueError, match="sdpa_cudnn cannot run"):
        layout.compare_pair(SMALL.replace(dtype="bfloat16"), "sdpa_cudnn", "sdpa_xla")


def test_accuracy_table_lists_every_registry_entry_with_a_status():
    df, note = layout.accuracy_table(SMALL)
    assert list(df["implementation"]) == list(impls.REGISTRY)
    ok = df[df.status == "ok"]
    assert {"naive", "sdpa_auto", "sdpa_xla"} <= set(ok["implementation"])
    assert ok[ok.implementation.isin(["naive", "sdpa_auto", "sdpa_xla", "sdpa_cudnn"])]["allclose"].all()
    assert (df[df.status != "ok"]["reason"].str.len() > 0).all()


def test_reference_is_sliced_when_the_float64_scores_would_be_too_big():
    big = AttentionShape(batch=4, q_len=4096, kv_len=4096, heads=8, kv_heads=2)
    assert impls.reference_slice(AttentionShape()) == (4, 8)
    b, kv = impls.reference_slice(big, max_scores=2**26)
    assert b == 1 and kv * big.group_size * big.q_len * big.kv_len <= 2**26
    assert impls.reference_slice(big, max_scores=2**20) is None


def test_sliced_reference_check_still_passes(monkeypatch):
    monkeypatch.setattr(impls, "REFERENCE_MAX_SCORES", SMALL.q_len * SMALL.kv_len * SMALL.group_size)
    pair = layout.compare_pair(SMALL, "naive", "sdpa_xla")
    assert "checked on batch 0..0" in pair.reference_note
    assert pair.vs_reference["allclose"].all()


def test_a_sliced_reference_still_catches_a_wrong_head():
    # the slice is exact, not a sample of convenience: a wrong value in a kept head fails the check
    q, k, v = impls.make_inputs(SMALL)
    ref = impls.float64_reference(SMALL, q, k, v, max_scores=SMALL.q_len * SMALL.kv_len * SMALL.group_size)
    assert ref.batch == 1 and ref.kv_heads == 1
    out = np.asarray(impls.get("naive").jit(SMALL)(q, k, v), np.float64)
    assert ref.check("naive", out).allclose
    out[0, 3, 0, 0] += 1.0  # batch 0, query head 0: inside the slice
    assert not ref.check("naive", out).allclose


def test_no_reference_when_even_one_head_is_too_big_says_why():
    q, k, v = impls.make_inputs(SMALL)
    ref = impls.float64_reference(SMALL, q, k, v, max_scores=8)
    assert ref.out is None and ref.check("naive", q) is None and "shorter sequence" in ref.note


# --------------------------------------------------------------------------------------------
# compiled programs
# --------------------------------------------------------------------------------------------
def test_compiled_memory_grows_quadratically_for_naive_attention():
    shape = AttentionShape(batch=1, heads=2, kv_heads=2, head_dim=16)
    df = layout.compiled_memory(shape, ["naive", "sdpa_xla", "sdpa_cudnn"], [128, 256, 512])
    naive = df[(df.implementation == "naive") & (df.status == "ok")].set_index("q_len")["temp_bytes"]
    assert list(naive.index) == [128, 256, 512]
    # doubling T quadruples the materialised scores: the ratio is close to 4
    assert 3.0 < naive[512] / naive[256] < 5.0
    assert (naive >= df.drop_duplicates("q_len").set_index("q_len")["score_bytes_float32"]).all()
    if not device.info().is_cuda:
        cudnn = df[df.implementation == "sdpa_cudnn"]
        assert (cudnn.status == "unsupported").all() and cudnn["reason"].str.contains("CUDA").all()


def test_compiled_summary_names_the_backend_that_ran():
    df = layout.compiled_summary(SMALL, ["naive", "sdpa_auto"]).set_index("implementation")
    assert df.loc["naive", "runs"] == "yes"
    assert df.loc["naive", "what ran"].startswith("XLA") or "cuDNN" not in df.loc["naive", "what ran"]
    assert df.loc["sdpa_auto", "temp_bytes"] is not None


def test_which_kernel_recognises_cudnn_custom_calls():
    from attnlab.bench import CompiledInfo

    cudnn = CompiledInfo(0, 0, 0, ("__cudnn$fmhaSoftmax",), 1)
    assert "cuDNN" in layout.which_kernel(cudnn) and "__cudnn$fmhaSoftmax" in layout.which_kernel(cudnn)
    assert layout.which_kernel(CompiledInfo(0, 0, 0, (), 3)) == "XLA's own code: 3 fusions"


def _fake_device(**changes) -> device.DeviceInfo:
    base = device.DeviceInfo(backend="gpu", platform="cuda 12080", device_kind="NVIDIA H200", device_count=1,
                             compute_capability=(9, 0), memory_total_bytes=None, memory_free_bytes=None,
                             jax_version="x", jaxlib_version="x", cudnn_version="9.8.0", te_version=None, peak=None)
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize("dev,shape", [
    (_fake_device(), SMALL.replace(dtype="bfloat16")),
    (_fake_device(), SMALL),
    (_fake_device(), SMALL.replace(dtype="float16", head_dim=12)),
    (_fake_device(compute_capability=(8, 0)), SMALL.replace(dtype="bfloat16", head_dim=192)),
    (_fake_device(compute_capability=(9, 0)), SMALL.replace(dtype="bfloat16", head_dim=192)),
    (_fake_device(compute_capability=(7, 5)), SMALL.replace(dtype="bfloat16")),
    (_fake_device(cudnn_version=None), SMALL.replace(dtype="bfloat16")),
    (_fake_device(backend="cpu", platform="cpu", compute_capability=None), SMALL.replace(dtype="bfloat16")),
])
def test_cudnn_checklist_agrees_with_the_registry(dev, shape):
    checklist = layout.cudnn_checklist(shape, dev)
    registry_ok = impls._cudnn_requirements(shape, dev) is None
    assert checklist["met"].all() == registry_ok


# --------------------------------------------------------------------------------------------
# weights helpers
# --------------------------------------------------------------------------------------------
TINY = AttentionShape(batch=1, q_len=6, kv_len=6, heads=1, kv_heads=1, head_dim=4)


def test_four_stages_rows_sum_to_one_with_and_without_scaling():
    scaled = weights.four_stages(TINY)
    raw = weights.four_stages(TINY, scaled=False)
    np.testing.assert_allclose(scaled["weights"].sum(-1), 1, rtol=1e-5)
    np.testing.assert_allclose(raw["weights"].sum(-1), 1, rtol=1e-5)
    np.testing.assert_allclose(raw["scaled"], raw["scores"])  # no scale: stage 2 is stage 1
    np.testing.assert_allclose(scaled["scaled"], scaled["scores"] / 2, rtol=1e-6)  # sqrt(4) = 2
    np.testing.assert_allclose(raw["out"], raw["weights"] @ raw["v"], rtol=1e-5, atol=1e-6)


def test_score_spread_grows_as_sqrt_head_dim_unscaled_and_stays_near_one_scaled():
    df = weights.score_spread(head_dims=(4, 64), seq_len=32)
    assert (abs(df["std_unscaled"] / df["sqrt_head_dim"] - 1) < 0.25).all()
    assert (abs(df["std_scaled"] - 1) < 0.25).all()


def test_view_shape_caps_batch_and_lengths_only():
    big = AttentionShape(batch=8, q_len=1024, kv_len=512, heads=8, kv_heads=2, head_dim=32, causal=True)
    v = weights.view_shape(big)
    assert (v.batch, v.q_len, v.kv_len) == (2, 64, 64)
    assert (v.heads, v.kv_heads, v.head_dim, v.causal) == (8, 2, 32, True)
    assert weights.view_shape(SMALL) == SMALL


def test_long_frame_turns_masked_entries_into_nan():
    m = np.array([[0.0, -np.inf], [1.0, 2.0]])
    df = weights.long_frame(m, "logit")
    assert list(df.columns) == ["query", "key", "logit"] and len(df) == 4
    assert np.isnan(df.loc[(df["query"] == 0) & (df["key"] == 1), "logit"]).all()


def test_first_vs_last_handles_a_single_query_position():
    from attnlab.shapes import AttentionShape
    from attnlab.weights import first_vs_last

    one = AttentionShape(batch=1, q_len=1, kv_len=1, heads=1, kv_heads=1, head_dim=1)
    table = first_vs_last(one)
    assert list(table["position"]) == [0] and table["max |full − causal|"].iloc[0] == 0.0
