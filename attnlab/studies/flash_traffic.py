"""How many bytes attention moves between HBM and the chip: naive (four kernels) against flash (one).

A first-order model after Dao et al., "FlashAttention" (2022), arXiv:2205.14135, Sec. 3.2 (Theorem 2: standard
attention needs Θ(T·H + T·S) HBM accesses, flash Θ(T²·H²/M) with on-chip memory M). Pure Python, no JAX, so a
page can draw it for any shape without a GPU. Assumptions, kept simple on purpose:
- Each kernel reads its operands from HBM exactly once and writes its result exactly once; no cache (L2) reuse
  between kernels or between programs of one kernel.
- Naive: four kernels, as naive attention (attnlab.math.attention) writes them; scores S = Q·Kᵀ/√H and weights
  P in float32 (as jax.nn's XLA path), P's cast to V's dtype fused into the P·V read, masks made from indices.
- Flash: one program per (batch, query head, query block), as FlashAttention-2 and tokamax's Triton kernel lay
  out the grid; each reads its Q block once and streams all of K and V (read ceil(T / block_q) times per query
  head; skipped tiles still counted), and writes the float32 log-sum-exp (one per query row) for the backward.
Layout: q (B, T, N, H), k and v (B, S, K, H); itemsize is the bytes of one input element (2 for bf16).
"""

from __future__ import annotations

import math

FLOAT32_BYTES = 4


def traffic_naive(batch: int, q_len: int, kv_len: int, heads: int, kv_heads: int, head_dim: int,
                  itemsize: int) -> dict[str, int]:
    """HBM bytes of naive attention, by what is moved; 'total' sums them.

    1. scores: read Q (B·T·N·H) and K (B·S·K·H), write S (B·N·T·S float32)
    2. softmax: read S, write P (B·N·T·S float32)
    3. attend: read P and V (B·S·K·H), write O (B·T·N·H)
    The two T×S terms dominate once T·S ≫ T·H: naive traffic grows with T·S.
    """
    q = batch * q_len * heads * head_dim * itemsize
    kv = batch * kv_len * kv_heads * head_dim * itemsize
    scores = batch * heads * q_len * kv_len * FLOAT32_BYTES
    out = {
        "Q read": q,
        "K read": kv,
        "scores written (float32)": scores,
        "scores read for softmax": scores,
        "weights written (float32)": scores,
        "weights read for P·V": scores,
        "V read": kv,
        "O written": q,
    }
    out["total"] = sum(out.values())
    return out


def traffic_flash(batch: int, q_len: int, kv_len: int, heads: int, kv_heads: int, head_dim: int,
                  itemsize: int, block_q: int) -> dict[str, int]:
    """HBM bytes of one fused flash attention kernel, by what is moved; 'total' sums them.

    Q: read once (B·T·N·H). K and V: each of the B·N·ceil(T/block_q) programs reads its whole K/V head (S·H):
    T·S/block_q·H instead of T·S, so a larger block_q (more on-chip memory) means less traffic. O: written
    once (B·T·N·H). L = m + log(l): written once, float32 (B·N·T). S and P stay on chip."""
    q = batch * q_len * heads * head_dim * itemsize
    q_blocks = math.ceil(q_len / block_q)
    kv_per_head = kv_len * head_dim * itemsize
    out = {
        "Q read": q,
        "K read": batch * heads * q_blocks * kv_per_head,
        "V read": batch * heads * q_blocks * kv_per_head,
        "O written": q,
        "log-sum-exp written (float32)": batch * heads * q_len * FLOAT32_BYTES,
    }
    out["total"] = sum(out.values())
    return out
