"""tokamax_backend.py: an optional GPU dependency whose absence is explained, not an error."""

import importlib.util
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.backends import tokamax as tk
from attnlab.math import attention

CPU = SimpleNamespace(is_cuda=False, compute_capability=None, backend="cpu")
A100 = SimpleNamespace(is_cuda=True, compute_capability=(8, 0), backend="gpu")
H200 = SimpleNamespace(is_cuda=True, compute_capability=(9, 0), backend="gpu")
TOKAMAX_INSTALLED = importlib.util.find_spec("tokamax") is not None


def reference(q, k, v, *, causal=False, window=None, kv_lengths=None):
    """The lab's float64 reference: attnlab.math.attention in NumPy (0 for a query with no key)."""
    q, k, v = (np.asarray(jnp.asarray(x, jnp.float32), np.float64) for x in (q, k, v))
    return attention.attention(q, k, v, causal=causal, window=window, kv_lengths=kv_lengths, xp=np)


@pytest.mark.skipif(TOKAMAX_INSTALLED, reason="tokamax is installed here")
def test_absence_is_explained_in_a_sentence():
    error = tk.import_error()
    assert error is not None and "tokamax is not installed" in error and "jax >= 0.11.1" in error
    assert tk.inner_loop_source("mosaic") is None and tk.inner_loop_source("triton") is None
    q = jnp.zeros((1, 8, 2, 16))
    with pytest.raises(RuntimeError, match="tokamax is not installed"):
        tk.tokamax_attention(q, q, q, causal=True, implementation="triton")


def test_unknown_implementation_is_refused_with_the_choices():
    q = jnp.zeros((1, 8, 2, 16))
    with pytest.raises(ValueError, match="mosaic, triton, xla_chunked"):
        tk.tokamax_attention(q, q, q, causal=False, implementation="cuda")


@pytest.mark.parametrize("implementation", ["mosaic", "triton"])
def test_requirements_say_why_not_on_a_cpu(implementation):
    rows = tk.requirements(implementation, CPU)
    unmet = {what: here for what, _, here, met in rows if not met}
    assert unmet["CUDA GPU"] == "cpu" and unmet["compute capability"] == "n/a"
    assert all(len(row) == 4 for row in rows)


def test_requirements_on_gpus_follow_the_source():
    def met(implementation, device, **kw):
        return {what: ok for what, _, _, ok in tk.requirements(implementation, device, **kw)}

    assert met("mosaic", H200)["compute capability"] and met("mosaic", H200, dtype="float32")["dtype"]
    assert met("mosaic", A100)["compute capability"]  # sm80: experimental in 0.0.17
    assert not met("mosaic", A100, dtype="float32")["dtype"]  # the sm80 kernel: float16, bfloat16 only
    assert not met("mosaic", H200, head_dim=512)["head_dim"]
    assert met("triton", A100)["compute capability"]
    old = SimpleNamespace(is_cuda=True, compute_capability=(7, 5), backend="gpu")
    assert not met("triton", old)["compute capability"] and not met("mosaic", old)["compute capability"]
    assert met("xla_chunked", CPU)["device"]


@pytest.mark.parametrize("implementation", ["mosaic", "triton"])
def test_shipped_excerpt_marks_the_online_softmax_lines(implementation):
    excerpt = tk.EXCERPTS[implementation]
    assert excerpt["path"].startswith("tokamax/_src/ops/attention/") and "Apache" in tk.LICENCE_NOTE
    marked = {mark: text for _, text, mark in tk.excerpt_lines(implementation) if mark}
    assert set(marked) == {"max", "exp", "rescale", "sum", "accumulate"}
    assert "maximum" in marked["max"] and "exp" in marked["exp"] and "sum" in marked["sum"]
    assert "alpha" in marked["rescale"]
    assert "dot" in marked["accumulate"] or "wgmma" in marked["accumulate"]
    for line in excerpt["marks"]:
        assert excerpt["first_line"] <= line < excerpt["first_line"] + len(excerpt["text"].splitlines())


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", tk.IMPLEMENTATIONS)
@pytest.mark.parametrize("mask", [{}, {"causal": True}, {"window": (64, 0)}, {"kv_lengths": [256, 100]}])
def test_tokamax_matches_float64_reference(implementation, mask):
    from attnlab import device

    if tk.import_error():
        pytest.skip(tk.import_error())
    unmet = [f"{what}: needs {needed}, here {here}" for what, needed, here, ok
             in tk.requirements(implementation, device.info(), dtype="bfloat16", head_dim=64) if not ok]
    if unmet:
        pytest.skip("; ".join(unmet))
    kq, kk, kv = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.random.normal(kq, (2, 256, 8, 64)).astype(jnp.bfloat16)  # (B, T, N, H)
    k = jax.random.normal(kk, (2, 256, 2, 64)).astype(jnp.bfloat16)  # (B, S, K, H): GQA, 4 heads a group
    v = jax.random.normal(kv, (2, 256, 2, 64)).astype(jnp.bfloat16)
    kwargs = {"causal": False, **mask}
    if "kv_lengths" in kwargs:
        kwargs["kv_lengths"] = jnp.array(kwargs["kv_lengths"])
    out = tk.tokamax_attention(q, k, v, implementation=implementation, **kwargs)
    want = reference(q, k, v, **kwargs)
    np.testing.assert_allclose(np.asarray(out, np.float64), want, rtol=1e-2, atol=1e-2)
