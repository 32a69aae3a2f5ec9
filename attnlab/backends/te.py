"""NVIDIA TransformerEngine's DotProductAttention (optional: its absence is a normal, explained state)."""

from attnlab import te
from attnlab.backend import (
    Backend,
    Requirement,
    cuda_gpu,
    dtype_in,
    head_dim_rule,
    masks_taken,
    streamed_bytes,
)
from attnlab.device import FUSED_ATTENTION_MIN_CC


def requirements(shape, device):
    error = te.import_error()
    return [*cuda_gpu(device, FUSED_ATTENTION_MIN_CC),
            Requirement("TransformerEngine", "transformer_engine.jax importable", error or "imports", error is None),
            dtype_in(shape, ("bfloat16", "float16")), head_dim_rule(shape, 256, 8),
            masks_taken(shape, window=False, padding=False)]


TE_DPA = Backend(
    name="te_dpa",
    label="TransformerEngine DPA",
    fn=te.te_attention,
    requirements=requirements,
    device_bytes=streamed_bytes,
    description="transformer_engine.jax.flax.DotProductAttention: TE's fused attention (cuDNN underneath).",
    adds="The same cuDNN kernel behind NVIDIA's training library, with FP8 around it in the dense layers.",
)
