"""Flash attention in plain JAX: the online softmax over K/V blocks, as FlashAttention-2 computes it.

Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning" (2023),
arXiv:2307.08691, Algorithm 1. The names in the comments are the paper's: Q_i is the i-th block of
queries (block_q rows), K_j and V_j the j-th block of keys and values (block_k rows), S_ij their
scores, m_i the running row max, l_i the running row sum, P~_ij = exp(S_ij - m_i) and O_i the
un-normalised output; after the last block O_i = diag(l_i)^-1 O_i and L_i = m_i + log(l_i).

The T x S score matrix is never made: one (block_q, block_k) tile of it exists at a time, so memory
grows with T, not with T x S. A fused kernel does the same inside one GPU program; here XLA runs the
loops, which is slower than `jax.nn` on a CPU but shows the algorithm step by step.

Layout as in the rest of the lab: q (B, T, N, H), k and v (B, S, K, H), N a multiple of K (GQA).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from attnlab.masks import Mask
from attnlab.masks import visible as allowed
from attnlab.math import attention


def _pad_to(x: Array, length: int, axis: int) -> Array:
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, length - x.shape[axis])
    return jnp.pad(x, pad)


def flash_attention(q, k, v, *, causal: bool = False, window: tuple[int, int] | None = None,
                    kv_lengths=None, mask: Mask | None = None, block_q: int = 64, block_k: int = 64,
                    return_lse: bool = False):
    """softmax(Q·Kᵀ/sqrt(H))·V by FlashAttention-2's Algorithm 1 (Dao 2023, arXiv:2307.08691).

    q (B, T, N, H); k, v (B, S, K, H) with N a multiple of K; the mask is `mask` (a shape's), else the one
    jax.nn's arguments causal, window and kv_lengths (B,) make.
    Returns O (B, T, N, H) in q's dtype and, with return_lse, L = m + log(l) (B, N, T) in float32
    (-inf for a query that may see no key; its output is 0, as in jax.nn.dot_product_attention).
    T and S need not be multiples of the block sizes: the inputs are padded and the padding masked.
    """
    B, T, N, H = q.shape
    _, S, K, _ = k.shape
    if N % K:
        raise ValueError(f"heads ({N}) must be a multiple of kv_heads ({K})")
    G = N // K  # query heads that share one K/V head
    Tr, Tc = math.ceil(T / block_q), math.ceil(S / block_k)  # number of Q blocks, number of K/V blocks
    scale = 1.0 / math.sqrt(H)
    mask = Mask.of(causal=causal, window=window, kv_lengths=kv_lengths) if mask is None else mask
    mask = mask.sequence(np.arange(B)[:, None, None, None, None])  # each sequence's, against tiles (B, K, G, Br, Bc)

    # Split the sequences into blocks, block index first so that the loops walk over it.
    q_blocks = _pad_to(q, Tr * block_q, 1).reshape(B, Tr, block_q, K, G, H).transpose(1, 0, 3, 4, 2, 5)
    # q_blocks: (Tr, B, K, G, Br, H): query heads grouped by the K/V head they read (GQA without a copy)
    k_blocks = _pad_to(k, Tc * block_k, 1).reshape(B, Tc, block_k, K, H).transpose(1, 0, 3, 2, 4)
    v_blocks = _pad_to(v, Tc * block_k, 1).reshape(B, Tc, block_k, K, H).transpose(1, 0, 3, 2, 4)
    # k_blocks, v_blocks: (Tc, B, K, Bc, H)

    def one_query_block(i, Q_i):  # for 1 <= i <= Tr (Algorithm 1, line 3); Q_i (B, K, G, Br, H)
        q_index = (i * block_q + jnp.arange(block_q))[:, None]  # (Br, 1)

        def one_key_block(carry, j):  # for 1 <= j <= Tc (line 6)
            O_i, l_i, m_i = carry
            K_j, V_j = k_blocks[j], v_blocks[j]  # (B, K, Bc, H)
            k_index = (j * block_k + jnp.arange(block_k))[None, :]  # (1, Bc)
            seen = mask.visible(q_index, k_index)
            seen = (k_index < S) if seen is None else seen & (k_index < S)  # the block padding past S is no key

            def update(carry):
                O_i, l_i, m_i = carry
                S_ij = jnp.einsum("bkgqh,bksh->bkgqs", Q_i, K_j, preferred_element_type=jnp.float32)  # line 8
                S_ij = jnp.where(seen, S_ij * scale, -jnp.inf)  # (B, K, G, Br, Bc): scaled, masked
                # m is a shift for numerical safety only: the output does not depend on it.
                m_new = lax.stop_gradient(jnp.maximum(m_i, S_ij.max(axis=-1)))  # line 9
                m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)  # a row with no key yet: no shift
                P_ij = jnp.exp(S_ij - m_safe[..., None])  # P~_ij (B, K, G, Br, Bc), masked entries 0
                rescale = jnp.exp(m_i - m_safe)  # exp(m_i^(j-1) - m_i^(j)): old terms, new max
                l_new = rescale * l_i + P_ij.sum(axis=-1)  # line 9
                # As the kernels do, P~_ij is cast to V's dtype for the matmul; accumulation is float32.
                PV = jnp.einsum("bkgqs,bksh->bkgqh", P_ij.astype(v.dtype), V_j,
                                preferred_element_type=jnp.float32)
                O_new = rescale[..., None] * O_i + PV  # O_i = diag(e^(m_old - m_new)) O_i + P~_ij V_j, line 10
                return O_new, l_new, m_new

            # A tile that no query of the block may see is skipped, as fused kernels skip it.
            return lax.cond(jnp.any(seen), update, lambda c: c, carry), None

        O_i = jnp.zeros((B, K, G, block_q, H), jnp.float32)  # line 5: O_i = 0, l_i = 0, m_i = -inf
        l_i = jnp.zeros((B, K, G, block_q), jnp.float32)
        m_i = jnp.full((B, K, G, block_q), -jnp.inf, jnp.float32)
        (O_i, l_i, m_i), _ = lax.scan(one_key_block, (O_i, l_i, m_i), jnp.arange(Tc))
        O_i = O_i / jnp.where(l_i == 0, 1.0, l_i)[..., None]  # O_i = diag(l_i)^-1 O_i, line 12
        L_i = m_i + jnp.log(l_i)  # line 13: the log-sum-exp, all the backward pass needs of the softmax
        return O_i.astype(q.dtype), L_i

    # Backward recomputes S_ij and P~_ij of one query block at a time instead of storing all tiles.
    one_query_block = jax.checkpoint(one_query_block)
    out, lse = lax.map(lambda args: one_query_block(*args), (jnp.arange(Tr), q_blocks))
    # out: the O_i (Tr, B, K, G, Br, H) -> (B, T, N, H); lse: the L_i (Tr, B, K, G, Br) -> (B, N, T)
    out = out.transpose(1, 0, 4, 2, 3, 5).reshape(B, Tr * block_q, N, H)[:, :T]
    if not return_lse:
        return out
    lse = lse.transpose(1, 2, 3, 0, 4).reshape(B, N, Tr * block_q)[:, :, :T]
    return out, lse


# What the backward pass keeps and what it recomputes (Dao 2023, Sec. 3.1.2 and Algorithm 2).
BACKWARD_PLAN: tuple[tuple[str, str, str], ...] = (
    ("Q, K, V", "(B, T, N, H), (B, S, K, H)", "saved: the inputs, needed again to rebuild the scores"),
    ("O", "(B, T, N, H)", "saved: D_i = rowsum(dO_i ∘ O_i) replaces a sum over the softmax row"),
    ("L = m + log(l)", "(B, N, T) float32", "saved: one number per query row; P_ij = exp(S_ij - L_i) exactly"),
    ("S_ij = Q_i K_jᵀ / √d", "(Br, Bc) per tile", "recomputed per tile, never written to memory"),
    ("P_ij", "(Br, Bc) per tile", "recomputed from S_ij and L_i, never written to memory"),
)


def tile_map(T: int, S: int, block_q: int, block_k: int, causal: bool = False,
             window: tuple[int, int] | None = None, kv_length: int | None = None) -> list[list[str]]:
    """Each (query block, key block) tile as 'skipped', 'partial' or 'full', for one sequence.

    'full': every real query of the block may see every key slot of the block (no mask needed);
    'skipped': none may see any, so a fused kernel never loads K_j, V_j for that query block;
    'partial': the mask must be applied (including a last block that runs past S).
    Returns Tr rows of Tc entries.
    """
    Tr, Tc = math.ceil(T / block_q), math.ceil(S / block_k)
    length = S if kv_length is None else min(kv_length, S)
    rows = []
    for i in range(Tr):
        q_index = np.arange(i * block_q, min((i + 1) * block_q, T))[:, None]
        row = []
        for j in range(Tc):
            k_index = np.arange(j * block_k, (j + 1) * block_k)[None, :]
            ok = allowed(q_index, k_index, causal=causal, window=window, kv_length=length)
            row.append("full" if ok.all() else "skipped" if not ok.any() else "partial")
        rows.append(row)
    return rows


@dataclasses.dataclass(frozen=True)
class Step:
    """One tile of the online softmax, for one query block i and one key block j."""

    q_block: int
    k_block: int
    kind: str  # 'skipped', 'partial' or 'full' (see tile_map)
    scores: np.ndarray | None  # S_ij (Br, Bc), scaled, -inf where masked; None when skipped
    probabilities: np.ndarray | None  # P~_ij = exp(S_ij - m_new) (Br, Bc); None when skipped
    row_max_before: np.ndarray  # m_i before this tile (Br,)
    row_max_after: np.ndarray  # m_i after (Br,)
    row_sum_before: np.ndarray  # l_i before (Br,)
    row_sum_after: np.ndarray  # l_i after (Br,)
    rescale: np.ndarray  # exp(m_before - m_after), applied to the old l_i and O_i (Br,)
    partial_output: np.ndarray  # diag(l_i)^-1 O_i so far (Br, H); 0 for rows with no key yet
    max_error: float  # max |partial_output - exact output| over the block's rows


def step_through(q, k, v, *, block_q: int, block_k: int, causal: bool = False,
                 window: tuple[int, int] | None = None, kv_lengths: int | None = None) -> list[Step]:
    """The online softmax of one head, tile by tile: q (T, H), k and v (S, H), float32.

    Same algorithm as flash_attention (Algorithm 1 of arXiv:2307.08691) written with NumPy loops so
    each tile's state can be shown. kv_lengths is one number here (one sequence). Returns one Step per
    (i, j) tile in the order a kernel program walks them: for each query block, the key blocks in turn.
    """
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    T, H = q.shape
    S = k.shape[0]
    length = S if kv_lengths is None else int(kv_lengths)
    scale = np.float32(1.0 / math.sqrt(H))
    exact = _exact_attention(q, k, v, causal=causal, window=window, kv_length=length)  # (T, H)
    kinds = tile_map(T, S, block_q, block_k, causal, window, length)
    steps = []
    for i, row in enumerate(kinds):
        rows = slice(i * block_q, min((i + 1) * block_q, T))
        Q_i = q[rows]  # (Br, H)
        q_index = np.arange(rows.start, rows.stop)[:, None]
        O_i = np.zeros_like(Q_i)  # (Br, H)
        l_i = np.zeros(len(Q_i), np.float32)  # (Br,)
        m_i = np.full(len(Q_i), -np.inf, np.float32)  # (Br,)
        for j, kind in enumerate(row):
            cols = slice(j * block_k, min((j + 1) * block_k, S))
            K_j, V_j = k[cols], v[cols]  # (Bc, H)
            S_ij = P_ij = None
            m_new, l_new, rescale = m_i, l_i, np.ones_like(l_i)
            if kind != "skipped":
                k_index = np.arange(cols.start, cols.stop)[None, :]
                mask = allowed(q_index, k_index, causal=causal, window=window, kv_length=length)
                S_ij = np.where(mask, (Q_i @ K_j.T) * scale, -np.inf).astype(np.float32)  # (Br, Bc)
                m_new = np.maximum(m_i, S_ij.max(axis=1))
                m_safe = np.where(np.isneginf(m_new), np.float32(0), m_new)
                P_ij = np.exp(S_ij - m_safe[:, None])  # P~_ij (Br, Bc)
                rescale = np.exp(m_i - m_safe)
                l_new = rescale * l_i + P_ij.sum(axis=1)
                O_i = rescale[:, None] * O_i + P_ij @ V_j
            partial = O_i / np.where(l_new == 0, np.float32(1), l_new)[:, None]
            steps.append(Step(i, j, kind, S_ij, P_ij, m_i, m_new, l_i, l_new, rescale, partial,
                              float(np.abs(partial - exact[rows]).max())))
            m_i, l_i = m_new, l_new
    return steps


def _exact_attention(q, k, v, *, causal, window, kv_length) -> np.ndarray:
    """softmax(Q·Kᵀ/sqrt(H))·V for one head in float64 (attnlab.math.attention in NumPy), 0 for a query with no key."""
    one = lambda x: np.asarray(x, np.float64)[None, :, None, :]  # (T, H) -> (1, T, 1, H)  # noqa: E731
    return attention.attention(one(q), one(k), one(v), causal=causal, window=window, kv_lengths=[kv_length],
                               xp=np)[0, :, 0]
