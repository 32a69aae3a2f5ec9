"""Section 3 of issue 41: a backward is timed only with its gradients checked, by FlashAttention's rule."""

import dataclasses

import jax
import numpy as np
import pytest

from attnlab import backends
from attnlab.backends import naive
from attnlab.math import gradients
from attnlab.measure import runs
from attnlab.shapes import AttentionShape

SMALL = dict(batch=1, q_len=24, kv_len=32, heads=4, kv_heads=2, head_dim=16)


def _scaled_dv(q, k, v, shape, factor: float = 1.5):
    """Naive attention whose forward is right and whose dV is `factor` times the true one (a custom_vjp)."""

    @jax.custom_vjp
    def broken(q, k, v):
        return naive.NAIVE.fn(q, k, v, shape)

    def fwd(q, k, v):
        return jax.vjp(lambda q, k, v: naive.NAIVE.fn(q, k, v, shape), q, k, v)

    def bwd(pull, dout):
        dq, dk, dv = pull(dout)
        return dq, dk, dv * factor

    broken.defvjp(fwd, bwd)
    return broken(q, k, v)


@pytest.fixture
def broken_backend(monkeypatch):
    b = dataclasses.replace(naive.NAIVE, name="broken_dv", label="naive with dV × 1.5", fn=_scaled_dv)
    monkeypatch.setitem(backends.REGISTRY, "broken_dv", b)
    return "broken_dv"


@pytest.mark.parametrize("mask", [{}, {"causal": True}, {"window": (8, 0)}, {"kv_lengths": (20, 9)}])
def test_the_float64_gradients_are_those_jax_takes_of_the_same_attention(mask):
    shape = AttentionShape(**{**SMALL, "batch": 2}, dtype="float32", **mask)
    q, k, v = (np.asarray(x) for x in runs.host_inputs(shape))
    dq, dk, dv = gradients.float64_gradients(shape, q, k, v)
    auto = jax.grad(lambda q, k, v: naive.NAIVE.fn(q, k, v, shape).sum(), argnums=(0, 1, 2))(q, k, v)
    for mine, theirs in zip((dq, dk, dv), auto, strict=True):
        np.testing.assert_allclose(mine, np.asarray(theirs), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["naive", "sdpa_xla", "flash_jax"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_lab_s_correct_backends_pass_at_mqa_and_causal(name, dtype):
    for shape in (AttentionShape(**{**SMALL, "kv_heads": 1}, dtype=dtype), AttentionShape(**SMALL, dtype=dtype, causal=True)):
        (r,) = runs.run(shape, [name], backward=True)
        assert r.status == runs.OK and not r.reason, (shape.describe(), r.reason)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_correct_backward_passes_and_is_timed(dtype):
    shape = AttentionShape(**SMALL, dtype=dtype, causal=True)
    (r,) = runs.run(shape, ["naive"], backward=True, timed=True, budget_s=0.05, repeats=3)
    assert r.status == runs.OK, r.reason
    assert r.timing is not None


def test_a_scaled_dv_fails_and_its_row_says_so(broken_backend):
    shape = AttentionShape(**SMALL, dtype="float32")
    (r,) = runs.run(shape, [broken_backend], backward=True, timed=True, budget_s=0.05, repeats=3)
    assert r.status == runs.BAD_GRADIENTS
    assert "dv error" in r.reason and "dq" not in r.reason and "dk" not in r.reason
    row = r.row()
    assert row["status"] == "gradients wrong" and "FlashAttention" in row["reason"]
    assert r.timing is not None  # the time is still shown, beside the status that says it is of a wrong program


def test_a_non_finite_gradient_fails():
    shape = AttentionShape(**SMALL, dtype="float16")
    q, k, v = runs.host_inputs(shape)
    dq, dk, dv = gradients.float64_gradients(shape, q, k, v)
    dv = dv.copy()
    dv[0, 0, 0, 0] = np.inf
    check = gradients.check(shape, (dq, dk, dv), q, k, v)
    assert check.failing() == ["dv"] and check.errors["dv"] == np.inf


def test_gradients_too_large_to_check_are_said_not_checked(monkeypatch, broken_backend):
    monkeypatch.setattr(gradients, "MAX_BYTES", 0)
    (r,) = runs.run(AttentionShape(**SMALL), [broken_backend], backward=True)
    assert r.status == runs.OK and r.reason.startswith("gradients not checked")
