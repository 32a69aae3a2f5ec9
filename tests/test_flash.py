"""flash.py: FlashAttention-2 in plain JAX against a float64 NumPy reference, on the CPU."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.math import attention
from attnlab.math.flash import BACKWARD_PLAN, flash_attention, step_through, tile_map
from attnlab.studies.flash_traffic import traffic_flash, traffic_naive
from tests import mask_arrays as masks

TOLERANCE = {"float32": 2e-3, "bfloat16": 1e-2, "float16": 5e-3}


def reference(q, k, v, *, causal=False, window=None, kv_lengths=None):
    """The lab's float64 reference (attnlab.math.attention in NumPy; 0 for a query with no key) and the
    log-sum-exp (B, N, T) of the scaled, masked scores, -inf for a query with no key."""
    q, k, v = (np.asarray(jnp.asarray(x, jnp.float32), np.float64) for x in (q, k, v))
    out = attention.attention(q, k, v, causal=causal, window=window, kv_lengths=kv_lengths, xp=np)
    s = attention.scale(attention.scores(q, k, np), q.shape[-1])
    allowed = masks.allowed(q.shape[1], k.shape[1], causal=causal, window=window, kv_lengths=kv_lengths, xp=np)
    s = s if allowed is None else np.where(allowed, s, -np.inf)
    m = s.max(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = np.log(np.exp(s - np.where(np.isneginf(m), 0, m)).sum(-1)) + np.where(np.isneginf(m), 0, m)[..., 0]
    return out, lse


def random_qkv(B, T, S, N, K, H, dtype="float32", seed=0):
    kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 3)
    return (jax.random.normal(kq, (B, T, N, H)).astype(dtype),  # (B, T, N, H)
            jax.random.normal(kk, (B, S, K, H)).astype(dtype),  # (B, S, K, H)
            jax.random.normal(kv, (B, S, K, H)).astype(dtype))


MASKS = {
    "none": {},
    "causal": {"causal": True},
    "window": {"window": (5, 3)},
    "padding": {"kv_lengths": [33, 7]},
    "causal+window": {"causal": True, "window": (6, 0)},
    "causal+padding": {"causal": True, "kv_lengths": [20, 33]},
    "all three": {"causal": True, "window": (9, 0), "kv_lengths": [12, 33]},
}
HEADS = {"MHA": (4, 4), "GQA": (4, 2), "MQA": (4, 1)}


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("heads", list(HEADS))
def test_matches_float64_reference_for_every_dtype_mask_and_head_grouping(dtype, mask, heads):
    N, K = HEADS[heads]
    q, k, v = random_qkv(2, 27, 33, N, K, 16, dtype)  # T, S not multiples of the blocks
    kwargs = dict(MASKS[mask])
    if "kv_lengths" in kwargs:
        kwargs["kv_lengths"] = jnp.array(kwargs["kv_lengths"])
    out, lse = flash_attention(q, k, v, block_q=8, block_k=16, return_lse=True, **kwargs)
    want, want_lse = reference(q, k, v, **kwargs)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert lse.dtype == jnp.float32 and lse.shape == (2, N, 27)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(np.asarray(out, np.float64), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(lse), want_lse, rtol=tol, atol=tol)


def test_matches_jax_nn_when_every_query_sees_a_key():
    q, k, v = random_qkv(2, 40, 40, 8, 2, 32)
    lengths = jnp.array([40, 17])
    want = jax.nn.dot_product_attention(q, k, v, is_causal=True, key_value_seq_lengths=lengths)
    out = flash_attention(q, k, v, causal=True, kv_lengths=lengths, block_q=16, block_k=16)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_a_query_with_no_key_outputs_zero():
    q, k, v = random_qkv(2, 20, 12, 2, 2, 8)
    out, lse = flash_attention(q, k, v, window=(2, 0), kv_lengths=jnp.array([12, 0]),
                               block_q=8, block_k=8, return_lse=True)
    assert np.all(np.asarray(out[1]) == 0)  # batch 1 has no real key at all
    assert np.all(np.asarray(out[0, 14:]) == 0)  # queries 14.. see keys 12.. only: none exist
    assert np.all(np.isneginf(np.asarray(lse[1])))
    assert np.all(np.isfinite(np.asarray(out)))


def test_block_sizes_do_not_change_the_result():
    q, k, v = random_qkv(1, 50, 45, 2, 1, 16)
    outs = [flash_attention(q, k, v, causal=True, block_q=bq, block_k=bk)
            for bq, bk in [(1, 1), (7, 5), (16, 64), (64, 64)]]
    for out in outs[1:]:
        np.testing.assert_allclose(out, outs[0], rtol=1e-5, atol=1e-5)


def test_heads_must_be_a_multiple_of_kv_heads():
    q, k, v = random_qkv(1, 8, 8, 4, 3, 8)
    with pytest.raises(ValueError, match=r"heads \(4\) must be a multiple of kv_heads \(3\)"):
        flash_attention(q, k, v)


def test_memory_grows_with_t_not_t_times_s():
    """Compiled temp bytes at T = S = 4096 stay below 10% of the float32 T×S scores."""
    B, T, N, H = 1, 4096, 4, 64
    q = jax.ShapeDtypeStruct((B, T, N, H), jnp.float32)
    kv = jax.ShapeDtypeStruct((B, T, N, H), jnp.float32)
    compiled = jax.jit(lambda q, k, v: flash_attention(q, k, v, causal=True)).lower(q, kv, kv).compile()
    score_bytes = B * N * T * T * 4
    assert compiled.memory_analysis().temp_size_in_bytes < 0.1 * score_bytes


def test_gradients_match_naive_float32():
    q, k, v = random_qkv(1, 19, 23, 4, 2, 8)
    lengths = jnp.array([21])

    def naive(q, k, v):
        G = q.shape[2] // k.shape[2]
        kr, vr = jnp.repeat(k, G, axis=2), jnp.repeat(v, G, axis=2)
        s = jnp.einsum("btnh,bsnh->bnts", q, kr) / math.sqrt(q.shape[-1])
        allowed = masks.combine(masks.causal(19, 23), masks.padding(lengths, 19, 23))
        p = jax.nn.softmax(jnp.where(allowed, s, -jnp.inf), axis=-1)
        return jnp.einsum("bnts,bsnh->btnh", p, vr)

    def loss(f):
        return lambda q, k, v: jnp.sum(jnp.sin(f(q, k, v)))

    def flash(q, k, v):
        return flash_attention(q, k, v, causal=True, kv_lengths=lengths, block_q=8, block_k=8)

    got = jax.grad(loss(flash), argnums=(0, 1, 2))(q, k, v)
    want = jax.grad(loss(naive), argnums=(0, 1, 2))(q, k, v)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mask", [{}, {"causal": True}, {"window": (5, 2)}, {"causal": True, "kv_lengths": 10}])
def test_step_through_reaches_the_exact_output_at_each_query_blocks_last_tile(mask):
    q, k, v = (x[0, :, 0] for x in random_qkv(1, 16, 16, 1, 1, 8))  # (16, 8): one batch, one head
    steps = step_through(q, k, v, block_q=4, block_k=4, **mask)
    assert len(steps) == 16 and [(s.q_block, s.k_block) for s in steps][:5] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    for last in (s for s in steps if s.k_block == 3):
        assert last.max_error < 1e-5
    np.testing.assert_allclose(steps[-1].partial_output, reference(
        q[None, :, None], k[None, :, None], v[None, :, None],
        kv_lengths=None if "kv_lengths" not in mask else [mask["kv_lengths"]],
        **{key: val for key, val in mask.items() if key != "kv_lengths"})[0][0, 12:, 0], atol=1e-5)


def test_step_through_records_the_online_softmax_bookkeeping():
    q, k, v = (x[0, :, 0] for x in random_qkv(1, 16, 16, 1, 1, 8))
    for s in step_through(q, k, v, block_q=4, block_k=4, causal=True):
        if s.kind == "skipped":
            assert s.scores is None and np.all(s.rescale == 1) and np.array_equal(s.row_sum_after, s.row_sum_before)
            continue
        assert np.all(s.row_max_after >= s.row_max_before)
        np.testing.assert_allclose(s.rescale, np.exp(s.row_max_before - s.row_max_after), rtol=1e-6)
        np.testing.assert_allclose(s.row_sum_after, s.rescale * s.row_sum_before + s.probabilities.sum(1), rtol=1e-6)


@pytest.mark.parametrize("T, S, bq, bk, causal, window, length", [
    (16, 16, 4, 4, True, None, None),
    (30, 37, 8, 16, False, (5, 3), None),
    (30, 37, 8, 8, True, (9, 0), 20),
    (24, 24, 8, 8, False, None, 13),
])
def test_tile_map_agrees_with_the_mask(T, S, bq, bk, causal, window, length):
    allowed = np.asarray(masks.combine(
        masks.causal(T, S) if causal else None,
        masks.sliding_window(T, S, *window) if window else None,
        masks.padding(jnp.array([length if length is not None else S]), T, S)[0, 0]))
    tiles = tile_map(T, S, bq, bk, causal, window, length)
    assert len(tiles) == math.ceil(T / bq) and all(len(row) == math.ceil(S / bk) for row in tiles)
    for i, row in enumerate(tiles):
        for j, kind in enumerate(row):
            tile = allowed[i * bq:(i + 1) * bq, j * bk:(j + 1) * bk]
            full = tile.all() and tile.shape[1] == bk  # a block past S needs masking
            assert kind == ("skipped" if not tile.any() else "full" if full else "partial")


def test_causal_tile_map_skips_the_upper_triangle():
    tiles = tile_map(16, 16, 4, 4, causal=True)
    kinds = [kind for row in tiles for kind in row]
    assert (kinds.count("full"), kinds.count("partial"), kinds.count("skipped")) == (6, 4, 6)


def test_traffic_flash_reads_k_and_v_once_per_query_block():
    naive = traffic_naive(1, 4096, 4096, 8, 8, 64, 2)
    flash = traffic_flash(1, 4096, 4096, 8, 8, 64, 2, block_q=128)
    assert naive["scores written (float32)"] == 8 * 4096 * 4096 * 4
    assert flash["K read"] == 32 * naive["K read"]  # 4096 / 128 query blocks
    assert flash["total"] == sum(v for key, v in flash.items() if key != "total")
    assert flash["total"] < naive["total"] / 5


def test_backward_plan_saves_o_and_the_log_sum_exp():
    saved = {name for name, _, what in BACKWARD_PLAN if what.startswith("saved")}
    recomputed = {name for name, _, what in BACKWARD_PLAN if what.startswith("recomputed")}
    assert "O" in saved and any(name.startswith("L") for name in saved)
    assert any(name.startswith("S_ij") for name in recomputed) and "P_ij" in recomputed
