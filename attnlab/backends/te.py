"""NVIDIA TransformerEngine (TE) for JAX, optional: its absence is a normal, explained state.

TE's `transformer_engine.jax.flax.DotProductAttention` is a Flax Linen module with no parameters: inputs are
[b, s, h, d] ('bshd_bshd_bshd'), `num_gqa_groups` is the number of KV heads, and its fused path compiles to
one `te_fused_attn_forward_ffi` custom call into cuDNN. TE's own `mask` means True = *masked out*, the
opposite of `jax.nn` (so we use attn_mask_type).

FP8 in TE acts through `te.autocast(enabled=True, recipe=...)` on its GEMM layers (DenseGeneral, ...), so
`attention_block` wraps attention in TE's projections to measure the FP8 effect where it exists."""

from __future__ import annotations

import functools
import importlib.util

import jax
import jax.numpy as jnp

from attnlab.backends.base import (
    Backend,
    Requirement,
    cuda_gpu,
    dtype_in,
    head_dim_rule,
    streamed_bytes,
)
from attnlab.device import FUSED_ATTENTION_MIN_CC
from attnlab.masks import Causal
from attnlab.shapes import AttentionShape


@functools.lru_cache(maxsize=1)
def import_error() -> str | None:
    """None when `transformer_engine.jax` imports here, else why not (in a sentence)."""
    if importlib.util.find_spec("transformer_engine") is None:
        return "TransformerEngine is not installed (pip install 'transformer-engine[jax]'; NVIDIA's JAX container ships it)"
    try:
        import transformer_engine.jax  # noqa: F401
        import transformer_engine.jax.flax  # noqa: F401
    except Exception as e:  # a CPU-only machine, or a wheel built for another CUDA
        return f"TransformerEngine is installed but does not import: {type(e).__name__}: {str(e)[:200]}"
    return None


def dot_product_attention_module(shape: AttentionShape):
    """TE's DotProductAttention configured for `shape` (no parameters to initialise)."""
    from transformer_engine.jax import flax as te_flax

    return te_flax.DotProductAttention(
        head_dim=shape.head_dim,
        num_attention_heads=shape.heads,
        num_gqa_groups=shape.kv_heads,
        attn_mask_type="causal" if shape.causal else "no_mask",
        attention_dropout=0.0,
        qkv_layout="bshd_bshd_bshd",
        transpose_batch_sequence=False,
    )


def te_attention(q, k, v, shape: AttentionShape):
    """(B, T, N, H), (B, S, K, H) x2 -> (B, T, N, H) through TE's DotProductAttention."""
    module = dot_product_attention_module(shape)
    return module.apply({}, q, k, v, deterministic=True)


# -- FP8 where it acts: TE's dense layers around attention -----------------------------------------
def recipes() -> dict:
    """The FP8 recipes compared: delayed scaling (the codelab's) and current scaling (amax of this step)."""
    from transformer_engine.common import recipe

    return {
        "fp8_delayed": recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID, amax_history_len=16, amax_compute_algo="max"),
        "fp8_current": recipe.Float8CurrentScaling(),
    }


def attention_block(shape: AttentionShape):
    """QKV projection -> DotProductAttention -> output projection, with TE's DenseGeneral layers."""
    import flax.linen as nn
    from transformer_engine.jax import flax as te_flax

    d_model = shape.heads * shape.head_dim
    kv_width = shape.kv_heads * shape.head_dim

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):  # x: (B, T, D)
            B, T, _ = x.shape
            qkv = te_flax.DenseGeneral(d_model + 2 * kv_width, dtype=x.dtype, use_bias=False, name="qkv")(x)
            q, k, v = jnp.split(qkv, [d_model, d_model + kv_width], axis=-1)
            q = q.reshape(B, T, shape.heads, shape.head_dim)
            k = k.reshape(B, T, shape.kv_heads, shape.head_dim)
            v = v.reshape(B, T, shape.kv_heads, shape.head_dim)
            o = dot_product_attention_module(shape)(q, k, v, deterministic=True)
            return te_flax.DenseGeneral(d_model, dtype=x.dtype, use_bias=False, name="out")(o.reshape(B, T, d_model))

    return Block()


def attention_block_flops(shape: AttentionShape) -> float:
    """Projections (2·B·T·D·(D + 2·Dkv) + 2·B·T·D·D) plus the attention itself."""
    d, dkv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    tokens = shape.batch * shape.q_len
    return 2 * tokens * d * (d + 2 * dkv) + 2 * tokens * d * d + shape.flops()


def block_runner(shape: AttentionShape, recipe_name: str | None, x, seed: int = 0):
    """(compiled block, variables), all built inside `te.autocast`, as TE reads the recipe while tracing."""
    import transformer_engine.jax as te

    block = attention_block(shape)
    recipe = recipes()[recipe_name] if recipe_name else None
    with te.autocast(enabled=recipe is not None, recipe=recipe):
        variables = block.init(jax.random.PRNGKey(seed), x)
        if recipe_name == "fp8_delayed":  # a few steps so the amax history holds real values
            from transformer_engine.jax import NVTE_FP8_COLLECTION_NAME

            step = jax.jit(lambda v, x: block.apply(v, x, mutable=[NVTE_FP8_COLLECTION_NAME]))
            for _ in range(3):
                _, updates = step(variables, x)
                variables = {**variables, **updates}
        compiled = jax.jit(block.apply).lower(variables, x).compile()
    return compiled, variables


def autocast_runner(shape: AttentionShape, enabled: bool, args):
    """TE's DotProductAttention compiled inside `te.autocast(enabled=...)` with DelayedScaling."""
    import transformer_engine.jax as te

    recipe = recipes()["fp8_delayed"]
    with te.autocast(enabled=enabled, recipe=recipe if enabled else None):
        return jax.jit(lambda q, k, v: te_attention(q, k, v, shape)).lower(*args).compile()


TE_SNIPPET = '''\
import jax, transformer_engine.jax as te
from transformer_engine.jax import flax as te_flax
from transformer_engine.common import recipe

attn = te_flax.DotProductAttention(head_dim=64, num_attention_heads=8, num_gqa_groups=8,
                                   attn_mask_type="causal", qkv_layout="bshd_bshd_bshd",
                                   transpose_batch_sequence=False)
out = jax.jit(lambda q, k, v: attn.apply({}, q, k, v, deterministic=True))(q, k, v)  # [b, s, h, d] bf16

# FP8 acts on TE's GEMM layers, not on DotProductAttention (TE 2.x for JAX):
with te.autocast(enabled=True, recipe=recipe.Float8CurrentScaling()):
    dense = te_flax.DenseGeneral(4096, dtype=jax.numpy.bfloat16)
    params = dense.init(jax.random.PRNGKey(0), x)
    y = jax.jit(dense.apply)(params, x)
'''

def requirements(shape, device):
    error = import_error()
    return [*cuda_gpu(device, FUSED_ATTENTION_MIN_CC),
            Requirement("TransformerEngine", "transformer_engine.jax importable", error or "imports", error is None),
            dtype_in(shape, ("bfloat16", "float16")), head_dim_rule(shape, 256, 8)]


TE_DPA = Backend(
    name="te_dpa",
    label="TransformerEngine DPA",
    fn=te_attention,
    needs=requirements,
    masks=(Causal,),
    device_bytes=streamed_bytes,
    description="transformer_engine.jax.flax.DotProductAttention: TE's fused attention (cuDNN underneath).",
    adds="The same cuDNN kernel behind NVIDIA's training library, with FP8 around it in the dense layers.",
)
