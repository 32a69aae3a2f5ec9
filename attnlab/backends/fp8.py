"""FP8 attention through JAX's own cuDNN path, with scales computed from the data.

`jax.nn.dot_product_attention` refuses FP8 inputs for cuDNN (a `KeyError` on the FP8 element type), but JAX's
internal `jax._src.cudnn.fused_attention_stablehlo.dot_product_attention(..., use_fp8=True)` runs cuDNN's FP8
flash-attention kernel on Hopper (compute capability 9.0+).

FP8 E4M3 has 3 mantissa bits and a largest value of 448. Each tensor is stored as x·scale in FP8 and
multiplied by descale = 1/scale when used (per-tensor scaling, Micikevicius et al. 2022, arXiv:2209.05433):

    scale_x = 448 / amax(|x|)          so that the largest |x| lands on FP8's largest value

The kernel quantises the softmax P *before* normalising it: each tile holds exp(s - running max), at most 1,
so P's safe scale is 448 whatever amax the kernel reports (a scale from that amax overflows P). The output's
amax is known only after a run, so `calibrated_output_scale` runs once with unit scales (delayed scaling)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array

from attnlab.backends.base import (
    Backend,
    Requirement,
    cuda_gpu,
    cudnn_loaded,
    dtype_in,
    head_dim_rule,
    streamed_bytes,
)
from attnlab.device import FP8_ATTENTION_MIN_CC
from attnlab.masks import Causal

E4M3 = jnp.float8_e4m3fn
E4M3_MAX = 448.0
_Three = tuple[Array, Array, Array]  # (q, k, v), or their scales


def amax_scale(x: Array) -> Array:
    """448 / max|x| as a float32 scalar (1 when x is all zeros)."""
    amax = jnp.max(jnp.abs(x.astype(jnp.float32)))
    return jnp.where(amax > 0, E4M3_MAX / amax, 1.0)


def quantize(x: Array, scale: Array | float) -> Array:
    """x·scale rounded to FP8 E4M3 (values beyond ±448 saturate)."""
    return jnp.clip(x.astype(jnp.float32) * scale, -E4M3_MAX, E4M3_MAX).astype(E4M3)


def _params(sq, sk, sv, s_s, s_o) -> dict:
    one = jnp.ones((1, 1, 1, 1), jnp.float32)
    f = lambda x: jnp.asarray(x, jnp.float32).reshape(1, 1, 1, 1)  # noqa: E731
    fwd = dict(descale_q=f(1 / sq), descale_k=f(1 / sk), descale_v=f(1 / sv),
               descale_s=f(1 / s_s), scale_s=f(s_s), scale_o=f(s_o))
    bwd = {k: one for k in ("amax_dQ", "amax_dK", "amax_dV", "amax_dP", "descale_o", "descale_dO",
                            "descale_dP", "scale_dQ", "scale_dK", "scale_dV", "scale_dP")}
    return {**fwd, **bwd}


P_SCALE = E4M3_MAX  # unnormalised softmax tiles lie in (0, 1]: 448 uses FP8's whole range


def quantize_inputs(q, k, v, data_scales: bool = True) -> tuple[_Three, _Three]:
    """((q8, k8, v8), (scale_q, scale_k, scale_v)): per-tensor 448/amax scales, or unit scales."""
    if data_scales:
        scales = (amax_scale(q), amax_scale(k), amax_scale(v))
    else:
        scales = (jnp.float32(1.0),) * 3
    q8, k8, v8 = (quantize(x, sc) for x, sc in zip((q, k, v), scales, strict=True))
    return (q8, k8, v8), scales


def fp8_kernel(q8, k8, v8, scales, *, causal: bool, scale_s=1.0, scale_o=1.0):
    """cuDNN's FP8 kernel alone, as inside an FP8 pipeline: (O·scale_o in E4M3, amax of P, amax of O)."""
    from jax._src.cudnn import fused_attention_stablehlo as fa  # private: no public FP8 API yet

    sq, sk, sv = scales
    out8, amax_s, amax_o = fa.dot_product_attention(
        q8, k8, v8,
        # jax's FP8Params (a TypedDict) says float, but the kernel reads (1, 1, 1, 1) arrays
        fp8_params=_params(sq, sk, sv, scale_s, scale_o),  # type: ignore[arg-type]
        scale=1.0 / q8.shape[-1] ** 0.5,
        mask_type=fa.MaskType.CAUSAL if causal else fa.MaskType.NO_MASK,
        use_fp8=True,
    )
    return out8, amax_s.reshape(()), amax_o.reshape(())


def fp8_attention_quantized(q8, k8, v8, scales, *, causal: bool, scale_s=1.0, scale_o=1.0, out_dtype=jnp.bfloat16):
    """cuDNN's FP8 kernel on inputs already in FP8. Returns (output in out_dtype, amax of P, amax of O)."""
    out8, amax_s, amax_o = fp8_kernel(q8, k8, v8, scales, causal=causal, scale_s=scale_s, scale_o=scale_o)
    return (out8.astype(jnp.float32) / scale_o).astype(out_dtype), amax_s, amax_o


def cudnn_fp8_attention(q, k, v, *, causal: bool, scale_s=1.0, scale_o=1.0, data_scales: bool = True):
    """Q, K, V quantised (448/amax or unit scales) through cuDNN's FP8 kernel: (output, amax P, amax O)."""
    qkv8, scales = quantize_inputs(q, k, v, data_scales)
    return fp8_attention_quantized(*qkv8, scales, causal=causal, scale_s=scale_s, scale_o=scale_o, out_dtype=q.dtype)


def calibrated_output_scale(q, k, v, *, causal: bool) -> float:
    """448 / amax(O), with amax(O) read from one run with unit output scale."""
    _, _, amax_o = jax.jit(lambda q, k, v: cudnn_fp8_attention(q, k, v, causal=causal, scale_s=P_SCALE))(q, k, v)
    amax_o = float(amax_o)
    return E4M3_MAX / amax_o if amax_o > 0 else 1.0


HOPPER_SNIPPET = '''\
import jax, jax.numpy as jnp
from jax._src.cudnn import fused_attention_stablehlo as fa   # JAX's internal FP8 path

def to_fp8(x):                                   # per-tensor scaling from the data
    scale = 448.0 / jnp.max(jnp.abs(x.astype(jnp.float32)))
    return (x.astype(jnp.float32) * scale).astype(jnp.float8_e4m3fn), scale

(q8, sq), (k8, sk), (v8, sv) = to_fp8(q), to_fp8(k), to_fp8(v)   # q: (B, T, N, H) bf16
one = jnp.ones((1, 1, 1, 1), jnp.float32)
p = lambda x: jnp.full((1, 1, 1, 1), x, jnp.float32)
params = dict(descale_q=p(1/sq), descale_k=p(1/sk), descale_v=p(1/sv), descale_s=one,
              scale_s=one, scale_o=one, amax_dQ=one, amax_dK=one, amax_dV=one, amax_dP=one,
              descale_o=one, descale_dO=one, descale_dP=one, scale_dQ=one, scale_dK=one,
              scale_dV=one, scale_dP=one)
out8, amax_s, amax_o = jax.jit(lambda q8, k8, v8: fa.dot_product_attention(
    q8, k8, v8, fp8_params=params, scale=q.shape[-1] ** -0.5,
    mask_type=fa.MaskType.CAUSAL, use_fp8=True))(q8, k8, v8)
out = out8.astype(jnp.bfloat16)                  # (B, T, N, H); needs compute capability 9.0+
'''

def requirements(shape, device):
    return [*cuda_gpu(device, FP8_ATTENTION_MIN_CC), cudnn_loaded(device),
            dtype_in(shape, ("bfloat16", "float16"), ", quantised to FP8 E4M3 inside"),
            head_dim_rule(shape, 256, 16),
            Requirement("head layout", "MHA only (kv_heads == heads) in JAX's FP8 path",
                        f"kv_heads {shape.kv_heads}, heads {shape.heads}", shape.kv_heads == shape.heads)]


FP8 = Backend(
    name="cudnn_fp8",
    label="cuDNN FP8 (JAX internal)",
    # Q, K, V scaled by 448/amax and P by 448 inside the call; O at unit scale (no calibration run)
    fn=lambda q, k, v, shape: cudnn_fp8_attention(q, k, v, causal=shape.causal, scale_s=P_SCALE)[0],
    needs=requirements,
    masks=(Causal,),
    device_bytes=streamed_bytes,
    description="cuDNN's FP8 flash attention via jax._src.cudnn (E4M3 inputs, amax scaling), forward only.",
    adds="FP8 (E4M3) tensor cores: twice bf16's peak, 3 mantissa bits.",
    fp8=True,
)
