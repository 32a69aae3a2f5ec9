"""The math, written once: the same functions on jax.numpy and NumPy, GQA without copies, one mask rule."""

import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.math import attention
from attnlab.measure import runs
from attnlab.shapes import AttentionShape
from tests import mask_arrays as masks

SHAPE = AttentionShape(batch=2, q_len=12, kv_len=20, heads=6, kv_heads=2, head_dim=8)


def _inputs(shape=SHAPE, seed=0):
    return runs.make_inputs(shape, seed)


def test_jax_and_numpy_compute_the_same_attention():
    q, k, v = _inputs()
    out = attention.attention(q, k, v, causal=True, window=(3, 1), kv_lengths=[20, 9])
    ref = attention.attention(*(np.asarray(x, np.float64) for x in (q, k, v)), causal=True, window=(3, 1),
                              kv_lengths=[20, 9], xp=np)
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-6)


def test_gqa_equals_mha_with_each_kv_head_repeated_for_its_group():
    q, k, v = _inputs()
    g = SHAPE.group_size
    grouped = attention.attention(q, k, v)
    repeated = attention.attention(q, jnp.repeat(k, g, axis=2), jnp.repeat(v, g, axis=2))
    np.testing.assert_allclose(grouped, repeated, rtol=1e-5, atol=1e-6)  # float32 summation order


def test_weights_rows_sum_to_one_and_masked_keys_get_zero():
    q, k, _ = _inputs()
    w = np.asarray(attention.weights(q, k, causal=True))
    np.testing.assert_allclose(w.sum(-1), 1, rtol=1e-5)
    assert (w[..., 0, 1:] == 0).all()  # query 0 sees key 0 only


def test_a_query_that_sees_no_key_gets_zero_weights_not_nan():
    q, k, v = _inputs()
    out = np.asarray(attention.attention(q, k, v, kv_lengths=[0, 20]))
    assert np.isfinite(out).all() and (out[0] == 0).all() and np.abs(out[1]).sum() > 0


def test_causal_first_query_sees_only_the_first_key():
    shape = AttentionShape(batch=1, q_len=8, kv_len=8, heads=1, kv_heads=1, head_dim=4)
    q, k, v = _inputs(shape)
    out = attention.attention(q, k, v, causal=True)
    np.testing.assert_allclose(out[0, 0, 0], v[0, 0, 0], rtol=1e-6)


def test_stages_compose_into_attention():
    q, k, v = _inputs()
    s = attention.scale(attention.scores(q, k), SHAPE.head_dim)
    out = attention.attend(attention.softmax(s), v).astype(q.dtype)
    np.testing.assert_allclose(out, attention.attention(q, k, v), rtol=1e-6)


def test_every_mask_type_has_a_plain_construction_the_tests_check_it_against():
    """The float64 reference builds its mask from Mask.matrix itself: a new mask type with no plain twin here would be
    checked against its own rule (a newcomer's walk added one and every test passed before it had one)."""
    from attnlab.masks import BY_KEY

    assert set(masks.PLAIN) == set(BY_KEY)


@pytest.mark.parametrize("kw", [dict(causal=True), dict(window=(2, 1)), dict(kv_lengths=[5, 7]),
                                dict(causal=True, window=(3, 0), kv_lengths=[4, 9])])
def test_masks_allowed_matches_the_separate_masks(kw):
    T, S = 6, 9
    got = masks.allowed(T, S, **kw)
    want = masks.combine(*(masks.PLAIN[key](T, S, value) for key, value in kw.items()))
    np.testing.assert_array_equal(np.broadcast_to(got, want.shape), want)
    rows = [0, 4]
    np.testing.assert_array_equal(np.broadcast_to(masks.allowed(T, S, rows=rows, **kw), (*want.shape[:-2], 2, S)),
                                  np.asarray(want)[..., rows, :])
