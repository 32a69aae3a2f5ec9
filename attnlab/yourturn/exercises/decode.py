"""Exercise 6 (page 8): a decode step with a KV cache: one new query over every cached key, MHA and GQA."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from attnlab.yourturn.exercises.attention import _common_mistakes, _ref_attention
from attnlab.yourturn.exercises.base import Case, Exercise, Mistake

DECODE_SKELETON = '''def decode(q, k_cache, v_cache):
    """One decode step: q (B, 1, N, H), the cache k_cache, v_cache (B, S, K, H) with N = K * G.
    Return (B, 1, N, H): the new token's output over every cached key."""
    ...
'''
DECODE_SOLUTION = '''def decode(q, k_cache, v_cache):
    B, _, N, H = q.shape
    K = k_cache.shape[2]
    qg = q.reshape(B, K, N // K, H)
    scores = jnp.einsum("bkgh,bskh->bkgs", qg, k_cache) / jnp.sqrt(H)
    weights = jax.nn.softmax(scores.astype(jnp.float32), axis=-1)
    out = jnp.einsum("bkgs,bskh->bkgh", weights.astype(v_cache.dtype), v_cache)
    return out.reshape(B, 1, N, H)
'''

def _first_key_only(q, k_cache, v_cache):
    """What a causal mask aligned top-left makes of a decode step: its one query sees key 0 only."""
    N, K = q.shape[2], k_cache.shape[2]
    return v_cache[:, :1, jnp.arange(N) // (N // K)].astype(q.dtype)


DECODE_CAUSAL = Mistake(
    "causal mask from the top left", "Each output is the first cached value: a causal mask aligned top-left (as "
    "is_causal=True in jax.nn.dot_product_attention) lets query 0 see key 0 only, but the one query of a decode "
    "step is the newest token, the last position. Hint: which cached keys may the newest token see?",
    _first_key_only)

DECODE = Exercise(
    name="decode", page="pages/p8_mha_gqa_mqa.py", title="a decode step with a KV cache",
    task="Generating a token attends one new query to every cached key: `q` is (B, 1, N, H), the caches "
         "`k_cache`, `v_cache` are (B, S, K, H). Return (B, 1, N, H), for MHA (K = N) and GQA (K < N). Write it "
         "with einsum, or call `jax.nn.dot_product_attention` (accepted here: the point is what a decode step "
         "attends to, and which mask it needs).",
    entry="decode", skeleton=DECODE_SKELETON, solution=DECODE_SOLUTION,
    cases=(Case("B2 S16 N4 K4 H16 (MHA)", (("q", (2, 1, 4, 16), "float32"), ("k_cache", (2, 16, 4, 16), "float32"),
                                          ("v_cache", (2, 16, 4, 16), "float32")), seed=13),
           Case("B1 S24 N8 K2 H8 (GQA)", (("q", (1, 1, 8, 8), "float32"), ("k_cache", (1, 24, 2, 8), "float32"),
                                         ("v_cache", (1, 24, 2, 8), "float32")), seed=14)),
    reference=lambda q, k_cache, v_cache: _ref_attention(q, k_cache, v_cache),
    mistakes=tuple(dataclasses.replace(m, fn=(lambda f: lambda q, k_cache, v_cache: f(q, k_cache, v_cache))(m.fn))
                   for m in _common_mistakes(True) if m.name != "no max subtracted") + (DECODE_CAUSAL,),
)

