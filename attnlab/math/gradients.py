"""Gradients checked as the forward is: dQ, dK, dV against float64, by FlashAttention's rule.

The loss is the one a timed backward differentiates (`compiled.forward_backward`): L = sum(O), so dO = 1.
With P = softmax(Q·Kᵀ/√H) under the mask, in float64:

    dV = Pᵀ·dO        dP = dO·Vᵀ        dS = P ∘ (dP − rowsum(dP ∘ P)) / √H
    dQ = dS·K         dK = dSᵀ·Q        (a K/V head's gradient sums over the query heads that share it)

FlashAttention's acceptance rule (its tests, `test_flash_attn.py`): a backend's gradient passes when its largest
error against float64 is at most twice that of attention computed in the low precision itself (plain XLA math in
the input dtype, `low_precision_attention`), against the same float64 gradients.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.math import attention
from attnlab.shapes import AttentionShape

NAMES = ("dq", "dk", "dv")
FACTOR = 2.0  # FlashAttention's rule: at most twice the low precision's error
MAX_BYTES = 1 << 30  # float64 (B, N, T, S) matrices the reference holds at once: past this, not checked


def reference_bytes(shape: AttentionShape) -> int:
    """Host bytes the float64 gradients hold at once: one sequence and K/V head at a time, four (G, T, S) matrices
    (P, dP, dS and a temporary), beside float64 copies of the inputs and the three gradients."""
    group = shape.heads // shape.kv_heads
    return 8 * (4 * group * shape.q_len * shape.kv_len + 2 * shape.batch * (shape.q_len * shape.heads
                                                                            + 2 * shape.kv_len * shape.kv_heads)
                * shape.head_dim)


def float64_gradients(shape: AttentionShape, q, k, v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dQ, dK, dV of sum(attention(q, k, v)) in float64 NumPy, by the formulas above, a sequence and a K/V head at
    a time (a K/V head's gradients depend only on its own group of query heads)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    G = N // K
    qg = q.reshape(B, T, K, G, H)
    dq, dk, dv = np.zeros((B, T, K, G, H)), np.zeros_like(k), np.zeros_like(v)
    for b in range(B):
        allowed = shape.mask.matrix(T, S, B, xp=np)
        allowed = allowed if allowed is None or allowed.ndim == 2 else allowed[b, 0]  # (T, S) for this sequence
        for h in range(K):
            qh, kh, vh = qg[b, :, h].transpose(1, 0, 2), k[b, :, h], v[b, :, h]  # (G, T, H), (S, H), (S, H)
            p = attention.softmax(np.einsum("gth,sh->gts", qh, kh) / math.sqrt(H), allowed, np)  # (G, T, S)
            dv[b, :, h] = p.sum(axis=(0, 1))[:, None] * np.ones(H)  # dO = 1: dV[s] = sum over g, t of P
            dp = np.broadcast_to(vh.sum(-1), p.shape)  # dP[t, s] = dO[t] · V[s] = sum of V[s]
            ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / math.sqrt(H)
            dq[b, :, h] = np.einsum("gts,sh->tgh", ds, kh)
            dk[b, :, h] = np.einsum("gts,gth->sh", ds, qh)
    return dq.reshape(B, T, N, H), dk, dv


def low_precision_attention(q, k, v, shape: AttentionShape):
    """Attention in the inputs' dtype throughout (scores, softmax, weights · V): FlashAttention's baseline."""
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    s = jnp.einsum("btkgh,bskh->bkgts", attention.split_heads(q, K), k).reshape(B, N, T, S) / jnp.asarray(
        math.sqrt(H), q.dtype)
    allowed = shape.mask.matrix(T, S, B, xp=jnp)
    w = attention.softmax(s, allowed, jnp).astype(q.dtype)
    o = jnp.einsum("bkgts,bskh->btkgh", w.reshape(B, K, N // K, T, S), v)
    return o.reshape(B, T, N, H)


@dataclasses.dataclass(frozen=True)
class GradientCheck:
    """Each gradient's largest error against float64, the backend's and the low precision's, and the verdict."""

    errors: dict[str, float]  # the backend's max |d − d64|, by name (inf when not finite)
    baseline: dict[str, float]  # the low-precision attention's

    def failing(self) -> list[str]:
        return [n for n in NAMES if not self.errors[n] <= FACTOR * self.baseline[n] + 1e-6]

    @property
    def ok(self) -> bool:
        return not self.failing()

    def sentence(self) -> str:
        """Why a row's gradients fail, in one sentence (empty when they pass)."""
        return "; ".join(
            f"{n} error {self.errors[n]:.3g} against float64, over {FACTOR:g}× the {self.baseline[n]:.3g} of attention "
            f"computed in the low precision (FlashAttention's rule)" for n in self.failing())


def _max_error(d, d64: np.ndarray) -> float:
    d = np.asarray(d, np.float64)
    return float(np.abs(d - d64).max()) if np.all(np.isfinite(d)) else math.inf


def check(shape: AttentionShape, grads, q, k, v) -> GradientCheck:
    """The backend's gradients `grads` (dq, dk, dv of sum(O) at q, k, v) by FlashAttention's rule. Launches the
    low-precision baseline: call it in the device turn that holds q, k and v."""
    ref = float64_gradients(shape, q, k, v)
    low = jax.grad(lambda q, k, v: low_precision_attention(q, k, v, shape).astype(jnp.float32).sum(),
                   argnums=(0, 1, 2))(q, k, v)
    return GradientCheck({n: _max_error(d, r) for n, d, r in zip(NAMES, grads, ref, strict=True)},
                         {n: _max_error(d, r) for n, d, r in zip(NAMES, low, ref, strict=True)})
