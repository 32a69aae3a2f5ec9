"""`jax.nn.dot_product_attention`: with no implementation named, with XLA, and with cuDNN.

With `implementation=None`, JAX 0.4.35-0.11 takes the XLA path (its source has a TODO to pick cuDNN itself),
so the codelab forces cuDNN."""

import jax
import jax.numpy as jnp

from attnlab.backends import known_aborts
from attnlab.backends.base import (
    Backend,
    Requirement,
    cuda_gpu,
    cudnn_loaded,
    dtype_in,
    materialised_bytes,
    streamed_bytes,
)
from attnlab.device import FUSED_ATTENTION_MIN_CC
from attnlab.masks import Causal, Padding, Window


def sdpa(implementation):
    def fn(q, k, v, shape):
        lengths = shape.kv_lengths_per_batch()
        return jax.nn.dot_product_attention(
            q, k, v, is_causal=shape.causal, local_window_size=shape.window,
            key_value_seq_lengths=None if lengths is None else jnp.asarray(lengths, jnp.int32),
            implementation=implementation)

    return fn


# JAX 0.10/0.11's check, per GPU family (fused_attention_stablehlo.check_is_flash_attention)
HEAD_DIM_RULE = ("≤ 128 on Ampere and Ada (compute capability 8.x); ≤ 256 on Hopper (9.0) and Blackwell (10.x, 12.x), "
                 "cuDNN 9.11+ on Blackwell Ultra (10.3); a multiple of 8")


def cudnn_max_head_dim(device) -> tuple[int, str]:
    """JAX's rule (fused_attention_stablehlo.check_is_flash_attention, JAX 0.10/0.11: H_max 256 from compute
    capability 9.0, else 128) for this GPU; with none, for the shipped H200's (and said so)."""
    if not device.is_cuda:
        return 256, "judged for an H200 (compute capability 9.0), whose measurements ship with the lab: no GPU here"
    return (256 if device.at_least((9, 0)) else 128), f"{device.device_kind}, compute capability {device.compute_capability_str}"


def cudnn_requirements(shape, device):
    """cuDNN flash attention's requirements, as JAX 0.10 and 0.11 check them."""
    max_h, whose = cudnn_max_head_dim(device)
    ok = shape.head_dim <= max_h and shape.head_dim % 8 == 0
    return [*cuda_gpu(device, FUSED_ATTENTION_MIN_CC), cudnn_loaded(device),
            dtype_in(shape, ("bfloat16", "float16")),
            Requirement("head_dim", HEAD_DIM_RULE, f"{shape.head_dim} ({whose})", ok)]


def xla_requirements(name):
    """Anywhere JAX runs, but not float16 on the CPU (no 'F16_F16_F32' dot_general) nor at known aborts."""

    def requirements(shape, device):
        cpu_dtype = [] if device.is_cuda else [dtype_in(shape, ("float32", "bfloat16"), " on the CPU backend")]
        return cpu_dtype + known_aborts.requirement(name, shape, device)

    return requirements


AUTO = Backend(
    name="sdpa_auto",
    label="SDPA, implementation=None",
    fn=sdpa(None),
    needs=xla_requirements("sdpa_auto"),
    masks=(Causal, Window, Padding),
    device_bytes=materialised_bytes(3),
    description="jax.nn.dot_product_attention with no implementation named: JAX picks (today: XLA).",
    adds="JAX chooses the program; today that is XLA's, not cuDNN's.",
)
XLA = Backend(
    name="sdpa_xla",
    label="SDPA, XLA",
    fn=sdpa("xla"),
    needs=xla_requirements("sdpa_xla"),
    masks=(Causal, Window, Padding),
    device_bytes=materialised_bytes(3),
    description="jax.nn.dot_product_attention(implementation='xla'): XLA's fusions; the T×S scores are materialised.",
    adds="XLA fuses the element-wise steps, but still writes the T×S scores to memory.",
)
CUDNN = Backend(
    name="sdpa_cudnn",
    label="SDPA, cuDNN fused",
    fn=sdpa("cudnn"),
    needs=cudnn_requirements,
    masks=(Causal, Window, Padding),
    device_bytes=streamed_bytes,
    description="jax.nn.dot_product_attention(implementation='cudnn'): one cuDNN flash-attention kernel.",
    adds="One hand-written Hopper kernel: tiles on chip, asynchronous tensor-core instructions (wgmma), TMA copies (the Tensor Memory Accelerator: hardware that moves whole tiles between GPU memory and on-chip memory).",
)
