"""Naive attention: the four stages in jax.numpy, materialising the (B, N, T, S) scores."""

from attnlab.backends.base import Backend, anywhere, materialised_bytes
from attnlab.masks import MASK_TYPES
from attnlab.math import attention

NAIVE = Backend(
    name="naive",
    label="Naive (from scratch)",
    fn=lambda q, k, v, shape: attention.attention(q, k, v, mask=shape.mask),
    needs=anywhere,
    masks=MASK_TYPES,  # every type the lab has: attnlab.math follows the shape's Mask itself
    device_bytes=materialised_bytes(3),  # scores, their exponentials and the weights, float32
    description="The four stages written out in jax.numpy (attnlab.math.attention); materialises the (B, N, T, S) scores.",
    adds="The formula as written: every stage a separate array in memory.",
)
