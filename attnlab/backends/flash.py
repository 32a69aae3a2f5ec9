"""The flash algorithm in plain JAX (attnlab.math.flash): tiles and the online softmax, run by XLA's loops."""

from attnlab.backends.base import Backend, anywhere, io_bytes
from attnlab.masks import MASK_TYPES
from attnlab.math import flash

BLOCK_Q = BLOCK_K = 512  # the tile; on a GPU a fused kernel keeps one such tile on chip


def device_bytes(shape):
    """Inputs, output, then one query block's float32 state: its accumulator, row max and sum, and one
    (block_q, block_k) tile of scores per head (XLA may keep a few: counted three times)."""
    B, N, H = shape.batch, shape.heads, shape.head_dim
    bq, bk = min(BLOCK_Q, shape.q_len), min(BLOCK_K, shape.kv_len)
    per_block = 4 * B * N * bq * (H + 2) + 3 * 4 * B * N * bq * bk
    return io_bytes(shape) + 4 * B * shape.q_len * N * (H + 2) + per_block


FLASH = Backend(
    name="flash_jax",
    label="Flash, plain JAX",
    fn=lambda q, k, v, shape: flash.flash_attention(q, k, v, mask=shape.mask, block_q=min(BLOCK_Q, shape.q_len),
                                                    block_k=min(BLOCK_K, shape.kv_len)),
    needs=anywhere,
    masks=MASK_TYPES,  # every type the lab has: attnlab.math follows the shape's Mask itself
    device_bytes=device_bytes,
    description="FlashAttention-2's Algorithm 1 in jax.numpy (attnlab.math.flash): K/V walked in tiles with an online "
                "softmax; the T×S scores never exist. XLA runs the loops, one kernel launch per tile.",
    adds="Tiles and the online softmax: memory O(T) instead of O(T·S), but each tile is still its own XLA step.",
)
