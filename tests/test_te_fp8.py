"""Availability logic for TransformerEngine and FP8 on any machine (the GPU paths: tests/test_gpu.py)."""

import pytest

from attnlab import device
from attnlab.backends import fp8, get, te
from attnlab.shapes import AttentionShape


def _why(name, shape, dev):
    """The first unmet declared requirement, as a sentence, or None."""
    return next((r.sentence() for r in get(name).requirements(shape, dev) if not r.met), None)


def _gpu(cc):
    return device.DeviceInfo("gpu", "cuda 12080", "NVIDIA Test", 1, cc, None, None, "", "", "9.1.0", None, None)


@pytest.fixture
def te_importable(monkeypatch):
    monkeypatch.setattr(te, "import_error", lambda: None)


def test_te_absent_is_a_normal_explained_state(monkeypatch):
    monkeypatch.setattr(te, "import_error", lambda: "TransformerEngine is not installed (pip install ...)")
    reason = _why("te_dpa", AttentionShape(dtype="bfloat16"), _gpu((9, 0)))
    assert "TransformerEngine is not installed" in reason


def test_te_needs_a_cuda_gpu_of_capability_8(te_importable):
    shape = AttentionShape(dtype="bfloat16")
    assert _why("te_dpa", shape, _gpu((9, 0))) is None
    assert "compute capability: 8.0 or newer" in _why("te_dpa", shape, _gpu((7, 5)))
    cpu = device.DeviceInfo("cpu", "cpu", "cpu", 1, None, None, None, "", "", None, None, None)
    assert "CUDA GPU" in _why("te_dpa", shape, cpu)


def test_te_shape_limits(te_importable):
    assert "bfloat16 or float16" in _why("te_dpa", AttentionShape(), _gpu((9, 0)))
    assert "head_dim" in _why("te_dpa", AttentionShape(dtype="bfloat16", head_dim=260), _gpu((9, 0)))
    assert _why("te_dpa", AttentionShape(dtype="float16", heads=8, kv_heads=2), _gpu((8, 0))) is None  # GQA


def test_fp8_attention_is_gated_at_hopper_not_ada():
    shape = AttentionShape(dtype="bfloat16", head_dim=128)
    assert _why("cudnn_fp8", shape, _gpu((9, 0))) is None
    assert "9.0" in _why("cudnn_fp8", shape, _gpu((8, 9)))  # Ada has FP8 matmuls but not cuDNN's FP8 attention
    assert _gpu((8, 9)).at_least(device.FP8_MATMUL_MIN_CC)
    assert "multiple of 16" in _why("cudnn_fp8", shape.replace(head_dim=72), _gpu((9, 0)))
    assert "MHA only" in _why("cudnn_fp8", shape.replace(kv_heads=2), _gpu((9, 0)))


def test_fp8_quantisation_uses_the_whole_e4m3_range():
    import jax.numpy as jnp
    import numpy as np

    x = jnp.asarray(np.linspace(-0.01, 0.02, 101), jnp.float32)
    scale = fp8.amax_scale(x)
    assert float(scale) == pytest.approx(448 / 0.02)
    q = fp8.quantize(x, scale)
    assert q.dtype == jnp.float8_e4m3fn and float(jnp.max(q.astype(jnp.float32))) == 448.0
    back = q.astype(jnp.float32) / scale
    assert float(jnp.max(jnp.abs(back - x))) < 0.02 * 2**-3  # 3 mantissa bits
    unscaled = x.astype(jnp.float8_e4m3fn).astype(jnp.float32)  # tiny values lose most of their bits
    assert float(jnp.max(jnp.abs(unscaled - x))) > float(jnp.max(jnp.abs(back - x)))


def test_snippets_for_hopper_users_compile_as_python():
    compile(fp8.HOPPER_SNIPPET, "fp8", "exec")
    compile(te.TE_SNIPPET, "te", "exec")


def test_the_autocast_study_is_typed_and_reads_back_as_the_suite_writes_it(monkeypatch):
    import dataclasses

    from attnlab.studies import fp8_study

    monkeypatch.setattr(te, "import_error", lambda: "TransformerEngine is not installed")
    absent = fp8_study.te_autocast_study(AttentionShape(dtype="bfloat16"))
    assert isinstance(absent, fp8_study.AutocastStudy) and not absent.ok
    assert absent.to_json() == {"status": "unsupported", "reason": "TransformerEngine is not installed"}
    row = {"status": "ok", "shape": "B4 T2048", "max_abs_diff_autocast_vs_not": 0.0, "bf16_ms": 0.2,
           "autocast_ms": 0.25, "bf16_kernels": ["a", "b"], "autocast_kernels": ["a", "b"]}
    a = fp8_study.AutocastStudy.from_json(row)
    assert a.ok and a.same_kernels and a.bf16_ms == 0.2 and a.bf16_kernels == ("a", "b")
    assert a.to_json() == row  # 0.0 is kept: it is the measured difference
    assert list(fp8_study.kernels_side_by_side(a).columns) == ["kernels without autocast", "kernels with autocast"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.bf16_ms = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="not an autocast study"):
        fp8_study.AutocastStudy.from_json({"bf16_ms": 0.2})


def test_the_fp8_and_te_block_studies_are_tables_that_say_why_they_cannot_run(monkeypatch):
    import pandas as pd

    from attnlab.measure import runs
    from attnlab.studies import fp8_study

    monkeypatch.setattr(te, "import_error", lambda: "TransformerEngine is not installed")
    block = fp8_study.te_block_study(AttentionShape(dtype="bfloat16"))
    assert isinstance(block, pd.DataFrame)
    assert runs.records(block) == [{"status": "unsupported", "reason": "TransformerEngine is not installed"}]
    cpu = device.DeviceInfo("cpu", "cpu", "cpu", 1, None, None, None, "", "", None, None, None)
    monkeypatch.setattr(device, "info", lambda: cpu)
    shapes = [AttentionShape(dtype="bfloat16"), AttentionShape(dtype="bfloat16", causal=True)]
    study = fp8_study.fp8_attention_study(shapes)
    assert isinstance(study, pd.DataFrame) and list(study["status"]) == ["unsupported"] * 2
    assert list(study["shape"]) == [s.describe() for s in shapes] and study["reason"].str.len().gt(0).all()
