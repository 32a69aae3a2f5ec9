"""cuDNN's FP8 flash attention through JAX's internal path (Hopper or newer)."""

from attnlab import fp8
from attnlab.backend import (
    Backend,
    Requirement,
    cuda_gpu,
    cudnn_loaded,
    dtype_in,
    head_dim_rule,
    masks_taken,
    streamed_bytes,
)
from attnlab.device import FP8_ATTENTION_MIN_CC


def requirements(shape, device):
    return [*cuda_gpu(device, FP8_ATTENTION_MIN_CC), cudnn_loaded(device),
            dtype_in(shape, ("bfloat16", "float16"), ", quantised to FP8 E4M3 inside"),
            head_dim_rule(shape, 256, 16),
            Requirement("head layout", "MHA only (kv_heads == heads) in JAX's FP8 path",
                        f"kv_heads {shape.kv_heads}, heads {shape.heads}", shape.kv_heads == shape.heads),
            masks_taken(shape, window=False, padding=False)]


FP8 = Backend(
    name="cudnn_fp8",
    label="cuDNN FP8 (JAX internal)",
    # Q, K, V scaled by 448/amax and P by 448 inside the call; O at unit scale (no calibration run)
    fn=lambda q, k, v, shape: fp8.cudnn_fp8_attention(q, k, v, causal=shape.causal, scale_s=fp8.P_SCALE)[0],
    requirements=requirements,
    device_bytes=streamed_bytes,
    description="cuDNN's FP8 flash attention via jax._src.cudnn (E4M3 inputs, amax scaling), forward only.",
    adds="FP8 (E4M3) tensor cores: twice bf16's peak, 3 mantissa bits.",
    fp8=True,
)
