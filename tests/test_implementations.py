import numpy as np
import pytest

from attnlab import device
from attnlab import implementations as impls
from attnlab.shapes import AttentionShape

RANDOM_SHAPES = [
    AttentionShape(batch=2, q_len=48, kv_len=80, heads=4, kv_heads=4, head_dim=32),  # T != S
    AttentionShape(batch=1, q_len=64, kv_len=64, heads=8, kv_heads=2, head_dim=16, causal=True),  # GQA causal
    AttentionShape(batch=3, q_len=33, kv_len=17, heads=6, kv_heads=1, head_dim=8),  # MQA, odd lengths
    AttentionShape(batch=2, q_len=40, kv_len=72, heads=4, kv_heads=2, head_dim=64, causal=True),  # T < S causal
]
DTYPES = ["float32", "bfloat16", "float16"]


def _supported(shape):
    info = device.info()
    return [n for n, impl in impls.REGISTRY.items() if impl.supports(shape, info).ok]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", RANDOM_SHAPES, ids=lambda s: s.describe())
def test_every_supported_implementation_matches_the_float64_reference(shape, dtype):
    shape = shape.replace(dtype=dtype)
    names = _supported(shape)
    assert "naive" in names  # the from-scratch version runs every shape, to check the others
    if not (dtype == "float16" and device.info().backend == "cpu"):
        assert "sdpa_xla" in names
    for seed in (0, 1):  # fresh inputs: the same function on any valid input
        q, k, v = impls.make_inputs(shape, seed=seed)
        ref = impls.reference_attention(q, k, v, causal=shape.causal)
        for name in names:
            if name == "cudnn_fp8":
                continue  # FP8 has its own, looser check (tests/test_gpu.py)
            out = impls.get(name).jit(shape)(q, k, v)
            assert out.shape == shape.q_shape() and str(out.dtype) == dtype
            check = impls.check_against_reference(name, out, ref, dtype)
            assert check.allclose, check
            assert check.relative_error < {"float32": 1e-3, "bfloat16": 1e-2, "float16": 3e-3}[dtype], check


def test_the_checks_can_fail():
    shape = RANDOM_SHAPES[1]
    q, k, v = impls.make_inputs(shape)
    ref = impls.reference_attention(q, k, v, causal=True)
    wrong = impls.get("naive").jit(shape.replace(causal=False))(q, k, v)  # the mask forgotten
    assert not impls.check_against_reference("naive", wrong, ref, "float32").allclose
    nan = np.full(shape.q_shape(), np.nan, np.float32)
    assert not impls.check_against_reference("naive", nan, ref, "float32").allclose


def test_gqa_matches_reference_when_kv_heads_divide_heads():
    shape = AttentionShape(batch=2, q_len=16, kv_len=16, heads=8, kv_heads=4, head_dim=8)
    q, k, v = impls.make_inputs(shape)
    out = impls.naive_attention(q, k, v)
    # the same as MHA with each KV head repeated for its group of query heads
    mha = impls.naive_attention(q, np.repeat(k, 2, axis=2), np.repeat(v, 2, axis=2))
    np.testing.assert_allclose(out, mha, rtol=1e-6)


def test_causal_first_query_sees_only_the_first_key():
    shape = AttentionShape(batch=1, q_len=8, kv_len=8, heads=1, kv_heads=1, head_dim=4, causal=True)
    q, k, v = impls.make_inputs(shape)
    out = impls.naive_attention(q, k, v, causal=True)
    np.testing.assert_allclose(out[0, 0, 0], v[0, 0, 0], rtol=1e-6)


def test_registry_has_one_entry_per_implementation_with_labels():
    assert list(impls.REGISTRY)[:4] == ["naive", "sdpa_auto", "sdpa_xla", "sdpa_cudnn"]
    assert {"te_dpa", "cudnn_fp8"} <= set(impls.REGISTRY)
    for impl in impls.REGISTRY.values():
        assert impl.label and impl.description


@pytest.mark.skipif(device.info().backend != "cpu", reason="the CPU's reasons")
def test_on_cpu_the_registry_says_why_cudnn_cannot_run():
    info = device.info()
    shape = AttentionShape(dtype="bfloat16")
    s = impls.get("sdpa_cudnn").supports(shape, info)
    assert not s.ok and "CUDA GPU" in s.reason and "compute capability" in s.reason
    assert "JAX says" in s.reason  # the backend's own words travel with the reason
    fp8 = impls.get("cudnn_fp8").supports(shape, info)
    assert not fp8.ok and "9.0" in fp8.reason
    te = impls.get("te_dpa").supports(shape, info)
    assert not te.ok and "CUDA GPU" in te.reason
    assert impls.get("naive").supports(shape, info).ok


def test_cudnn_requirements_by_capability_dtype_and_head_dim():
    gpu = lambda cc: device.DeviceInfo("gpu", "cuda 12080", "NVIDIA Test", 1, cc, None, None, "x", "x", "9.1.0", None, None)  # noqa: E731
    req = impls.get("sdpa_cudnn").requirements
    ok = AttentionShape(dtype="bfloat16")
    assert req(ok, gpu((9, 0))) is None
    assert "compute capability ≥ 8.0" in req(ok, gpu((7, 5)))
    assert "bfloat16 or float16" in req(ok.replace(dtype="float32"), gpu((9, 0)))
    assert "head_dim" in req(ok.replace(head_dim=160), gpu((8, 0)))  # 128 max before Hopper
    assert req(ok.replace(head_dim=160), gpu((9, 0))) is None  # 256 on Hopper
    assert "9.0" in impls.get("cudnn_fp8").requirements(ok, gpu((8, 9)))


def test_over_the_memory_cap_is_a_reason_not_an_error(small_memory_cap):
    shape = AttentionShape(batch=4, q_len=1024, kv_len=1024, heads=8, kv_heads=8, head_dim=64)
    s = impls.get("naive").supports(shape, device.info())
    assert not s.ok and "over the cap" in s.reason


def test_unknown_implementation_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown implementation 'flash9'"):
        impls.get("flash9")


@pytest.mark.skipif(device.info().backend != "cpu", reason="a CPU backend limitation")
def test_xla_sdpa_in_float16_on_cpu_is_refused_with_the_backends_own_words():
    shape = AttentionShape(dtype="float16")
    s = impls.get("sdpa_xla").supports(shape, device.info())
    if s.ok:
        pytest.skip("this jaxlib's CPU backend takes float16 SDPA")
    assert "refuses this shape" in s.reason and "not supported" in s.reason
