"""`jax.nn.dot_product_attention`: with no implementation named, with XLA, and with cuDNN.

With `implementation=None`, JAX 0.4.35-0.11 takes the XLA path (its source has a TODO to pick
cuDNN by itself; the compiled program shows no cuDNN call). The codelab therefore forces cuDNN.
"""

import jax
import jax.numpy as jnp

from attnlab.backends import known_aborts
from attnlab.backends.base import (
    Backend,
    cuda_gpu,
    cudnn_loaded,
    dtype_in,
    head_dim_rule,
    materialised_bytes,
    streamed_bytes,
)
from attnlab.device import FUSED_ATTENTION_MIN_CC


def sdpa(implementation):
    def fn(q, k, v, shape):
        lengths = shape.kv_lengths_per_batch()
        return jax.nn.dot_product_attention(
            q, k, v, is_causal=shape.causal, local_window_size=shape.window,
            key_value_seq_lengths=None if lengths is None else jnp.asarray(lengths, jnp.int32),
            implementation=implementation)

    return fn


def cudnn_requirements(shape, device):
    """cuDNN flash attention's requirements, as JAX 0.4.35..0.11 checks them."""
    max_h = 256 if device.at_least((9, 0)) else 128
    return [*cuda_gpu(device, FUSED_ATTENTION_MIN_CC), cudnn_loaded(device),
            dtype_in(shape, ("bfloat16", "float16")), head_dim_rule(shape, max_h, 8)]


def xla_requirements(name):
    """XLA's path runs anywhere JAX does, except at the shapes known to abort its compiler."""
    return lambda shape, device: known_aborts.requirement(name, shape, device)


AUTO = Backend(
    name="sdpa_auto",
    label="SDPA, implementation=None",
    fn=sdpa(None),
    requirements=xla_requirements("sdpa_auto"),
    device_bytes=materialised_bytes(3),
    description="jax.nn.dot_product_attention with no implementation named: JAX picks (today: XLA).",
    adds="JAX chooses the program; today that is XLA's, not cuDNN's.",
)
XLA = Backend(
    name="sdpa_xla",
    label="SDPA, XLA",
    fn=sdpa("xla"),
    requirements=xla_requirements("sdpa_xla"),
    device_bytes=materialised_bytes(3),
    description="jax.nn.dot_product_attention(implementation='xla'): XLA's fusions; the T×S scores are materialised.",
    adds="XLA fuses the element-wise steps, but still writes the T×S scores to memory.",
)
CUDNN = Backend(
    name="sdpa_cudnn",
    label="SDPA, cuDNN fused",
    fn=sdpa("cudnn"),
    requirements=cudnn_requirements,
    device_bytes=streamed_bytes,
    description="jax.nn.dot_product_attention(implementation='cudnn'): one cuDNN flash-attention kernel.",
    adds="One hand-written Hopper kernel: tiles on chip, asynchronous tensor-core instructions (wgmma), TMA copies (the Tensor Memory Accelerator: hardware that moves whole tiles between GPU memory and on-chip memory).",
)
