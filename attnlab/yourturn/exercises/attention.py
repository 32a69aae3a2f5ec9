"""Exercises 1 and 2 (page 4): attention from scratch, then with grouped K/V heads (GQA) without copying them.
The usual mistakes are one function, `_mha`, with one knob turned wrong."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.math import attention as att
from attnlab.yourturn.exercises.base import Case, Exercise, Mistake, _f64

ATTENTION_SKELETON = '''def attention(q, k, v):
    """q (B, T, N, H); k, v (B, S, N, H) -> (B, T, N, H)."""
    scores = ...   # (B, N, T, S): every query against every key, per head
    ...            # scale, softmax over the keys
    return ...     # (B, T, N, H)
'''
ATTENTION_SOLUTION = '''def attention(q, k, v):
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    weights = jax.nn.softmax(scores.astype(jnp.float32), axis=-1)
    return jnp.einsum("bnts,bsnh->btnh", weights.astype(v.dtype), v)
'''
GQA_SKELETON = '''def attention(q, k, v):
    """q (B, T, N, H); k, v (B, S, K, H) with N = K * G -> (B, T, N, H). Do not copy K or V."""
    ...
'''
GQA_SOLUTION = '''def attention(q, k, v):
    B, T, N, H = q.shape
    K = k.shape[2]
    qg = q.reshape(B, T, K, N // K, H)            # query heads grouped by the K/V head they share
    scores = jnp.einsum("btkgh,bskh->bkgts", qg, k) / jnp.sqrt(H)
    weights = jax.nn.softmax(scores.astype(jnp.float32), axis=-1)
    out = jnp.einsum("bkgts,bskh->btkgh", weights.astype(v.dtype), v)
    return out.reshape(B, T, N, H)
'''


def _ref_attention(q, k, v):
    return att.attention(_f64(q), _f64(k), _f64(v), xp=np)


def _softmax(s, axis=-1):
    return jax.nn.softmax(s.astype(jnp.float32), axis=axis)


def _mha(q, k, v, *, scale=None, axis=-1, out="btnh", kv_map="group", safe=True):
    """Attention with one knob turned wrong (the mistakes below); the right answer with no knob turned."""
    B, T, N, H = q.shape
    K = k.shape[2]
    G = N // K
    heads = jnp.arange(N) // G if kv_map == "group" else jnp.arange(N) % K
    kk, vv = k[:, :, heads], v[:, :, heads]  # (B, S, N, H)
    s = jnp.einsum("btnh,bsnh->bnts", q.astype(jnp.float32), kk.astype(jnp.float32))
    s = s / math.sqrt(H) if scale is None else s * scale
    if safe:
        w = _softmax(s, axis)
    else:
        e = jnp.exp(s.astype(q.dtype))
        w = (e / e.sum(axis=axis, keepdims=True)).astype(jnp.float32)
    o = jnp.einsum("bnts,bsnh->bnth", w, vv.astype(jnp.float32))
    return (o if out == "bnth" else o.transpose(0, 2, 1, 3)).astype(q.dtype)


def _common_mistakes(grouped: bool) -> tuple[Mistake, ...]:
    found: tuple[Mistake, ...] = (
        Mistake("no scale", "The scores are not divided by √d (d = head_dim): softmax sees logits whose spread grows "
                "with √d and saturates (page 1 shows it). Hint: what did the formula do between QKᵀ and the softmax?",
                lambda q, k, v: _mha(q, k, v, scale=1.0)),
        Mistake("scale 1/d", "The scores are divided by d instead of √d (d = head_dim). Hint: the scale keeps the "
                "logits' spread near 1; a dot product of d unit-variance terms has spread √d.",
                lambda q, k, v: _mha(q, k, v, scale=1.0 / q.shape[-1])),
        Mistake("softmax over queries", "The softmax runs over the queries, not the keys: each column sums to 1 "
                "instead of each row. Hint: which axis of the (B, N, T, S) scores holds the keys?",
                lambda q, k, v: _mha(q, k, v, axis=-2)),
        Mistake("output (B, N, T, H)", "The output comes back as (B, N, T, H), heads before positions. Hint: the "
                "function returns q's layout, (B, T, N, H); look at the output letters of your last einsum.",
                lambda q, k, v: _mha(q, k, v, out="bnth")),
        Mistake("no max subtracted", "With large scores the softmax overflows: exp of a score past 88.7 is infinite "
                "in float32 (in bfloat16 too; past 11 in float16), and the weights turn into NaN. Hint: softmax(x) = "
                "softmax(x − c) for any c; which c keeps every exp ≤ 1? (jax.nn.softmax does it for you)",
                lambda q, k, v: _mha(q, k, v, safe=False)),
    )
    if grouped:
        found += (Mistake("K/V heads mapped wrongly", "Query heads are paired with the wrong K/V heads: your query "
                          "head n reads K/V head n % K, but the heads that share a K/V head are G = N // K "
                          "consecutive ones. Hint: which K/V head serves query heads 0..G − 1?",
                          lambda q, k, v: _mha(q, k, v, kv_map="modulo")),)
    return found


def _qkv(B, T, S, N, K, H, dtype="float32"):
    return (("q", (B, T, N, H), dtype), ("k", (B, S, K, H), dtype), ("v", (B, S, K, H), dtype))


ATTENTION = Exercise(
    name="attention", page="pages/p4_naive_vs_fused.py", title="attention from scratch",
    task="Write scaled dot-product attention with `jnp` and `jax.nn` only (not `jax.nn.dot_product_attention`: "
         "the point is to write what it computes): `q` is (B, T, N, H), `k` and `v` are "
         "(B, S, N, H); return (B, T, N, H). The lab checks it against float64 at a few shapes (T ≠ S among "
         "them), names a usual mistake when it sees one, and times a passing function at your shape.",
    entry="attention", skeleton=ATTENTION_SKELETON, solution=ATTENTION_SOLUTION,
    cases=(Case("B2 T8 S8 N2 H16 float32", _qkv(2, 8, 8, 2, 2, 16), seed=1),
           Case("B1 T5 S12 N3 H8 float32 (T ≠ S)", _qkv(1, 5, 12, 3, 3, 8), seed=2),
           Case("B1 T16 S16 N2 H32 float32, large logits (exp overflows past 88.7)", _qkv(1, 16, 16, 2, 2, 32),
                seed=3, spread=6.0)),
    reference=_ref_attention, mistakes=_common_mistakes(False),
)
GQA = Exercise(
    name="gqa", page="pages/p4_naive_vs_fused.py", title="the same with grouped K/V heads (GQA), without copying",
    task="Now `k` and `v` have K ≤ N heads, (B, S, K, H), with N = K·G: each K/V head serves G consecutive query "
         "heads. Return (B, T, N, H) without copying K or V: `jnp.repeat` (or a broadcast to N heads) would make G "
         "copies, and the lab names that a mistake even when the numbers are right.",
    entry="attention", skeleton=GQA_SKELETON, solution=GQA_SOLUTION,
    cases=(Case("B1 T8 S8 N4 K2 H16 float32 (GQA)", _qkv(1, 8, 8, 4, 2, 16), seed=4),
           Case("B2 T6 S10 N6 K3 H8 float32 (GQA, T ≠ S)", _qkv(2, 6, 10, 6, 3, 8), seed=5),
           Case("B1 T4 S9 N4 K1 H8 float32 (MQA)", _qkv(1, 4, 9, 4, 1, 8), seed=6)),
    reference=_ref_attention, mistakes=_common_mistakes(True),
)


KV_COPIED = Mistake(
    "K/V copied", "Your program builds K or V at all N query heads (G copies of each K/V head, as jnp.repeat, "
    "jnp.tile or a broadcast do): the numbers are right, but GQA exists to not hold those copies. Hint: give the "
    "query heads a group axis instead, so that each K/V head meets its G query heads inside one einsum.",
    _ref_attention)


def copies_kv(case: Case, shapes) -> bool:
    """Whether a traced program (the shapes of what it built) holds K or V at N heads: an array with the
    case's S and H axes and exactly B·S·N·H elements (a repeat, a tile, a gather or a broadcast to the N heads;
    not a larger outer product, which is wasteful but no copy of K/V). Decided only at cases where T ≠ S
    (otherwise the output, (B, T, N, H), has that size too) and a K/V head serves more than one query head."""
    (_, (B, T, N, H), _), (_, (_, S, K, _), _) = case.arrays[0], case.arrays[1]
    if T == S or N == K or S == H:
        return False
    return any(S in shape and H in shape and math.prod(shape) == B * S * N * H for shape in shapes)

