"""Kernel names in words, on names CUPTI reported on the H200 (attnlab/shipped/h200.json)."""

import pytest

from attnlab import kernels


@pytest.mark.parametrize("name, words", [
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1",
     "cuDNN flash attention, forward"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3", "cuDNN flash attention, backward"),
    ("nvjet_sm90_qqtst_192x192_128x4_2x1_v_bz_coopB_TNN", "cuBLAS matmul, FP8 inputs"),
    ("nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB_NNN", "cuBLAS matmul"),
    ("gemm_fusion_dot_1", "matmul (XLA fusion)"),
    ("triton_softmax", "softmax (XLA fusion)"),
    ("loop_multiply_fusion", "elementwise (XLA loop fusion)"),
    ("loop_convert_fusion", "type conversion (XLA fusion)"),
    ("wrapped_slice_2", "slice (XLA)"),
    ("_ZN18transformer_engine10fused_attn25populate_rng_state_kernelEPlPKll", "random-number state"),
])
def test_what_reads_the_kernel_names_seen_on_the_h200(name, words):
    assert kernels.what(name) == words


def test_demangle_gives_the_qualified_name_and_leaves_other_names_alone():
    assert (kernels.demangle("_ZN18transformer_engine10fused_attn25populate_rng_state_kernelEPlPKll")
            == "transformer_engine::fused_attn::populate_rng_state_kernel")
    assert kernels.demangle("_Z6kernelPf") == "kernel"
    assert kernels.demangle("triton_softmax") == "triton_softmax"
    assert kernels.demangle("_Zbroken") == "_Zbroken"


def test_describe_keeps_the_raw_name_beside_the_words_and_unknown_names_alone():
    assert kernels.describe("gemm_fusion_dot") == "matmul (XLA fusion) (gemm_fusion_dot)"
    assert kernels.describe("mystery_kernel") == "mystery_kernel"
    assert len(kernels.short("x" * 100, 20)) == 20
