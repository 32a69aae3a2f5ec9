"""The exercises a learner writes: the codelab's tasks, each with a skeleton, the lab's solution, the cases
it is checked at, its float64 reference, and the usual mistakes, each written out so it can be recognised.

An exercise's function takes arrays (and, for some, Python numbers fixed per case) and returns an array or
a tuple of arrays. A case gives the inputs (drawn at a seed) and the numbers; the reference computes the
exact answer in float64 with the lab's own math (attnlab/math/attention.py). A mistake is a function in
jax.numpy that makes that mistake on purpose: when the learner's output matches one of them and not the
reference, the lab names the mistake and gives a hint, never the solution.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.math import attention as att


@dataclasses.dataclass(frozen=True)
class Case:
    """One check: input arrays (name -> shape, dtype), the numbers passed with them, and a seed."""

    what: str
    arrays: tuple[tuple[str, tuple[int, ...], str], ...]
    numbers: tuple[tuple[str, object], ...] = ()
    seed: int = 0
    spread: float = 1.0  # the inputs' standard deviation (large: logits that overflow without the max)

    def inputs(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        out = {}
        for name, shape, dtype in self.arrays:
            x = rng.standard_normal(shape) * self.spread
            out[name] = x.astype(jnp.dtype(dtype))
        return out


@dataclasses.dataclass(frozen=True)
class Mistake:
    name: str
    sentence: str  # what the lab says: the mistake and a hint, never the fix itself
    fn: Callable  # the same signature as the learner's function, making the mistake
    knobs: tuple[tuple[str, bool], ...] = ()  # the online-softmax step's: how `_step` makes it (mistakes combine)


@dataclasses.dataclass(frozen=True)
class Exercise:
    name: str
    page: str
    title: str
    task: str  # Markdown: what to write
    entry: str  # the function's name
    skeleton: str
    solution: str
    cases: tuple[Case, ...]
    reference: Callable  # (**inputs as float64, **numbers) -> ndarray or tuple of ndarrays
    mistakes: tuple[Mistake, ...]
    timed: bool = True  # whether a passing function is timed at the learner's shape


def _f64(x):
    return np.asarray(x, np.float64)


# ------------------------------------------------------------------------------------------------
# 1. attention from scratch (page 4), and with grouped K/V heads
# ------------------------------------------------------------------------------------------------
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
    found = (
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
    task="Write scaled dot-product attention with `jnp` and `jax.nn` only: `q` is (B, T, N, H), `k` and `v` are "
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


# ------------------------------------------------------------------------------------------------
# 2. the masks (page 6): weights under a causal mask, then a sliding window
# ------------------------------------------------------------------------------------------------
CAUSAL_SKELETON = '''def causal_weights(q, k):
    """q (B, T, N, H), k (B, S, N, H) -> the attention weights (B, N, T, S) under a causal mask:
    query i may see keys 0..i (aligned top-left, as jax.nn.dot_product_attention's is_causal)."""
    scores = ...
    mask = ...     # (T, S): True where query i may see key j
    ...
    return ...
'''
CAUSAL_SOLUTION = '''def causal_weights(q, k):
    T, S = q.shape[1], k.shape[1]
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    mask = jnp.arange(S)[None, :] <= jnp.arange(T)[:, None]
    scores = jnp.where(mask, scores, -jnp.inf)
    return jax.nn.softmax(scores, axis=-1)
'''
WINDOW_SKELETON = '''def window_weights(q, k, left, right):
    """The weights (B, N, T, S) when query i may see keys i-left .. i+right (a sliding window, as
    local_window_size=(left, right)). A query that may see no key at all gets all-zero weights."""
    ...
'''
WINDOW_SOLUTION = '''def window_weights(q, k, left, right):
    T, S = q.shape[1], k.shape[1]
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    i, j = jnp.arange(T)[:, None], jnp.arange(S)[None, :]
    mask = (j >= i - left) & (j <= i + right)
    m = jnp.where(mask, scores, -jnp.inf).max(axis=-1, keepdims=True)
    e = jnp.where(mask, jnp.exp(scores - jnp.where(jnp.isfinite(m), m, 0.0)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return e / jnp.where(total > 0, total, 1.0)
'''


def _scores(q, k):
    return jnp.einsum("btnh,bsnh->bnts", q.astype(jnp.float32), k.astype(jnp.float32)) / math.sqrt(q.shape[-1])


def _masked_softmax(s, mask):
    """The masked softmax of the lab (a row that sees nothing: all zeros; the recognition reads NaN alike)."""
    return att.softmax(s, mask)


def _ref_weights(q, k, *, causal=False, window=None):
    return att.weights(_f64(q), _f64(k), causal=causal, window=window, xp=np)


def _grid(q, k, shift=0):
    T, S = q.shape[1], k.shape[1]
    return jnp.arange(T)[:, None] + shift, jnp.arange(S)[None, :]


CAUSAL_MISTAKES = (
    Mistake("off by one", "The diagonal is masked too: query i may see key i itself (keys 0..i, i included). "
            "Hint: which keys may query 0 see?", lambda q, k: _masked_softmax(_scores(q, k),
                                                                                     _grid(q, k)[1] < _grid(q, k)[0])),
    Mistake("bottom-right aligned", "The mask is aligned to the bottom right (query i sees keys 0..i + S − T), as some "
            "libraries do for decoding; jax.nn's is_causal aligns it to the top left. Hint: with T ≠ S, query 0 "
            "sees key 0 only.", lambda q, k: _masked_softmax(_scores(q, k), _grid(q, k)[1] <= _grid(q, k)[0]
                                                             + (k.shape[1] - q.shape[1]))),
    Mistake("filled with 0", "Masked scores are set to 0 instead of −∞, so exp(0) = 1 still gives them weight. "
            "Hint: what value makes exp(x) exactly 0?",
            lambda q, k: jax.nn.softmax(jnp.where(_grid(q, k)[1] <= _grid(q, k)[0], _scores(q, k), 0.0), axis=-1)),
    Mistake("mask transposed", "The mask lets each query see the keys after it, not before: the lower and upper "
            "triangles are swapped. Hint: which index is the query's, i or j?",
            lambda q, k: _masked_softmax(_scores(q, k), _grid(q, k)[1] >= _grid(q, k)[0])),
    Mistake("no scale", "The scores are not divided by √d before the softmax.",
            lambda q, k: _masked_softmax(_scores(q, k) * math.sqrt(q.shape[-1]), _grid(q, k)[1] <= _grid(q, k)[0])),
)


def _window_mask(q, k, left, right):
    i, j = _grid(q, k)
    return (j >= i - left) & (j <= i + right)


WINDOW_MISTAKES = (
    Mistake("NaN in a row that sees nothing", "A query that may see no key gets NaN weights: all its scores are −∞, "
            "and softmax divides 0 by 0. Hint: give such a row zeros (jnp.where on the row's total).",
            lambda q, k, left, right: jax.nn.softmax(jnp.where(_window_mask(q, k, left, right), _scores(q, k),
                                                               -jnp.inf), axis=-1)),
    Mistake("window off by one", "The window is one key too narrow or too wide: query i should see keys i − left "
            "through i + right, both ends included.",
            lambda q, k, left, right: _masked_softmax(_scores(q, k), (_grid(q, k)[1] > _grid(q, k)[0] - left)
                                                      & (_grid(q, k)[1] <= _grid(q, k)[0] + right))),
    Mistake("left and right swapped", "left and right are swapped: `left` counts keys before the query.",
            lambda q, k, left, right: _masked_softmax(_scores(q, k), _window_mask(q, k, right, left))),
    Mistake("filled with 0", "Masked scores are set to 0 instead of −∞, so they keep some weight.",
            lambda q, k, left, right: jax.nn.softmax(jnp.where(_window_mask(q, k, left, right), _scores(q, k), 0.0),
                                                     axis=-1)),
    Mistake("no scale", "The scores are not divided by √d before the softmax.",
            lambda q, k, left, right: _masked_softmax(_scores(q, k) * math.sqrt(q.shape[-1]),
                                                      _window_mask(q, k, left, right))),
)

CAUSAL = Exercise(
    name="causal", page="pages/p6_causal.py", title="a causal mask by hand",
    task="Return the attention **weights** (B, N, T, S) under a causal mask, aligned top-left as "
         "`jax.nn.dot_product_attention(is_causal=True)`: query i sees keys 0..i. The lab draws your weights "
         "beside its own.", entry="causal_weights", skeleton=CAUSAL_SKELETON, solution=CAUSAL_SOLUTION,
    cases=(Case("B1 T8 S8 N2 H16", (("q", (1, 8, 8 // 4, 16), "float32"), ("k", (1, 8, 2, 16), "float32")), seed=7),
           Case("B1 T6 S10 N1 H8 (T ≠ S)", (("q", (1, 6, 1, 8), "float32"), ("k", (1, 10, 1, 8), "float32")), seed=8)),
    reference=lambda q, k: _ref_weights(q, k, causal=True), mistakes=CAUSAL_MISTAKES,
)
WINDOW = Exercise(
    name="window", page="pages/p6_causal.py", title="a sliding window",
    task="Now a sliding window: query i sees keys i − left .. i + right (`local_window_size=(left, right)`). With "
         "more queries than keys, some query sees no key at all: its weights are all zero, as the fused kernels "
         "return.", entry="window_weights", skeleton=WINDOW_SKELETON, solution=WINDOW_SOLUTION,
    cases=(Case("B1 T8 S8 N2 H16, window (2, 0)", (("q", (1, 8, 2, 16), "float32"), ("k", (1, 8, 2, 16), "float32")),
                (("left", 2), ("right", 0)), seed=9),
           Case("B1 T10 S5 N1 H8, window (2, 1): queries 7..9 see no key",
                (("q", (1, 10, 1, 8), "float32"), ("k", (1, 5, 1, 8), "float32")), (("left", 2), ("right", 1)),
                seed=10)),
    reference=lambda q, k, left, right: _ref_weights(q, k, window=(left, right)), mistakes=WINDOW_MISTAKES,
)


# ------------------------------------------------------------------------------------------------
# 3. one step of the online softmax (page 5b)
# ------------------------------------------------------------------------------------------------
STEP_SKELETON = '''def update(m, l, o, s, v):
    """One step of FlashAttention-2's inner loop for a block of Br queries and Bc keys.
    m (Br,): the running max of each query's scores so far (-inf before the first block)
    l (Br,): the running sum of exp(score - m)
    o (Br, H): the running, not yet normalised, output
    s (Br, Bc): this block's scaled scores (-inf where masked); v (Bc, H): this block's values
    Return (m_new, l_new, o_new). The lab divides o by l after the last block."""
    ...
'''
STEP_SOLUTION = '''def update(m, l, o, s, v):
    m_new = jnp.maximum(m, s.max(axis=-1))
    m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)   # a query with no key yet: no shift
    p = jnp.exp(s - m_safe[:, None])
    rescale = jnp.exp(m - m_safe)
    l_new = rescale * l + p.sum(axis=-1)
    o_new = rescale[:, None] * o + p @ v
    return m_new, l_new, o_new
'''


def _step(m, l, o, s, v, *, rescale_o=True, rescale_l=True, new_max=True, guard=True):
    m_new = jnp.maximum(m, s.max(axis=-1)) if new_max else s.max(axis=-1)
    m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new) if guard else m_new
    p = jnp.exp(s - m_safe[:, None])
    r = jnp.exp(m - m_safe)
    l_new = (r * l if rescale_l else l) + p.sum(axis=-1)
    o_new = (r[:, None] * o if rescale_o else o) + p @ v
    return m_new, l_new, o_new


def step_with(knobs):
    """The online-softmax step making several of STEP_MISTAKES at once (their knobs together)."""
    return lambda m, l, o, s, v: _step(m, l, o, s, v, **dict(knobs))


STEP_MISTAKES = (
    Mistake("o not rescaled", "The running output o is not rescaled when the max grows: its old terms were "
            "computed against the old max. Hint: those terms are exp(score − m) for the old m; what turns them into "
            "exp(score − m_new)?",
            lambda m, l, o, s, v: _step(m, l, o, s, v, rescale_o=False), (("rescale_o", False),)),
    Mistake("l not rescaled", "The running sum l is not rescaled when the max grows. Hint: l holds exp(score − m) "
            "for the old m.", lambda m, l, o, s, v: _step(m, l, o, s, v, rescale_l=False), (("rescale_l", False),)),
    Mistake("max of this block only", "m_new is the max of this block only; it must be the max of everything seen "
            "so far (the old m too), or earlier terms can overflow and the rescale is wrong.",
            lambda m, l, o, s, v: _step(m, l, o, s, v, new_max=False), (("new_max", False),)),
    Mistake("NaN before the first key", "A query whose keys so far were all masked has m = −∞, and exp(−∞ − (−∞)) is "
            "NaN. Hint: when m_new is −∞, shift by 0 instead.",
            lambda m, l, o, s, v: _step(m, l, o, s, v, guard=False), (("guard", False),)),
)

_QKV_TILES = (("q", (16, 8), "float32"), ("k", (16, 8), "float32"), ("v", (16, 8), "float32"))
STEP = Exercise(
    name="online_softmax", page="pages/p5b_fused_kernel.py", title="one step of the online softmax",
    task="Write the update of FlashAttention-2's inner loop (Algorithm 1, lines 8-10): given one block's scaled "
         "scores and the running max m, sum l and output o, return the new ones. The lab runs your step inside its "
         "tiled loop (T = S = 16, blocks of 4) and compares the output after every key block with the exact answer.",
    entry="update", skeleton=STEP_SKELETON, solution=STEP_SOLUTION,
    cases=(Case("T16 S16 H8, blocks of 4", _QKV_TILES, (("causal", False),), seed=11),
           Case("T16 S16 H8, blocks of 4, causal (blocks above the diagonal all masked)", _QKV_TILES,
                (("causal", True),), seed=12),
           Case("T16 S16 H8, blocks of 4, window (2, 0): a query's first key blocks are all masked", _QKV_TILES,
                (("causal", False), ("window", (2, 0))), seed=13),
           # scores of spread ~64: exp of one past 88.7 overflows float32 without the running max, and a row's max
           # grows from block to block, so a step that does not rescale o and l drifts from the answer
           Case("T16 S16 H8, blocks of 4, large scores (exp overflows past 88.7 without the running max)",
                _QKV_TILES, (("causal", False),), seed=15, spread=8.0)),
    reference=None, mistakes=STEP_MISTAKES, timed=False,
)
STEP_BLOCK = 4


# ------------------------------------------------------------------------------------------------
# 4. a decode step with a KV cache (page 8)
# ------------------------------------------------------------------------------------------------
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

EXERCISES: dict[str, Exercise] = {e.name: e for e in (ATTENTION, GQA, CAUSAL, WINDOW, STEP, DECODE)}
ON_PAGE: dict[str, tuple[str, ...]] = {}
for _e in EXERCISES.values():
    ON_PAGE.setdefault(_e.page, ())
    ON_PAGE[_e.page] += (_e.name,)


def get(name: str) -> Exercise:
    try:
        return EXERCISES[name]
    except KeyError:
        raise ValueError(f"no exercise named {name!r}; there are {', '.join(EXERCISES)}") from None
