"""tokamax's flash attention kernels (Pallas: Mosaic GPU and Triton), optional: its absence is a normal state.

tokamax (github.com/openxla/tokamax, Apache-2.0) is a library of JAX/Pallas kernels. Its
`tokamax.dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False,
query_seq_lengths=None, key_value_seq_lengths=None, local_window_size=None, logits_soft_cap=None,
precision=None, implementation=None, q_sharding=None)` follows `jax.nn.dot_product_attention`: query
[*B,T,N,H], key and value [*B,S,K,H] with N a multiple of K (GQA is native), masks True = may attend.
`implementation` is 'mosaic', 'triton', 'cudnn', 'xla' or 'xla_chunked' (or a sequence, tried in order). Facts
below are from tokamax 0.0.17's source (Python >= 3.12, jax >= 0.11.1)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import textwrap
from typing import TypedDict

from attnlab.backends.base import Backend, Requirement, streamed_bytes
from attnlab.masks import Causal, Padding, Window

IMPLEMENTATIONS = ("mosaic", "triton", "xla_chunked")


@functools.lru_cache(maxsize=1)
def import_error() -> str | None:
    """None when `tokamax` imports here, else why not (in a sentence)."""
    if importlib.util.find_spec("tokamax") is None:
        return ("tokamax is not installed (pip install tokamax; it needs Python >= 3.12 and "
                "jax >= 0.11.1: the GPU image's lock has it; the CPU install's lock has an older jax)")
    try:
        import tokamax  # noqa: F401
    except Exception as e:  # an older jax, or a missing dependency
        return f"tokamax is installed but does not import: {type(e).__name__}: {str(e)[:200]}"
    return None


def tokamax_attention(q, k, v, *, causal: bool, implementation: str, window: tuple[int, int] | None = None,
                      kv_lengths=None):
    """(B, T, N, H), (B, S, K, H) x2 -> (B, T, N, H) via tokamax.dot_product_attention, with its `is_causal`,
    `local_window_size=(left, right)` and `key_value_seq_lengths` (B,) int32."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {', '.join(IMPLEMENTATIONS)} (got {implementation!r})")
    error = import_error()
    if error:
        raise RuntimeError(error)
    import jax.numpy as jnp
    import tokamax

    lengths = None if kv_lengths is None else jnp.asarray(kv_lengths, jnp.int32)
    return tokamax.dot_product_attention(q, k, v, is_causal=causal, local_window_size=window,
                                         key_value_seq_lengths=lengths, implementation=implementation)


def requirements(implementation: str, device, dtype: str = "bfloat16",
                 head_dim: int = 128) -> list[tuple[str, str, str, bool]]:
    """What `implementation` needs, as (what, needed, here, met) rows, for a device with `is_cuda`,
    `compute_capability` ((major, minor) or None) and `backend`.

    From tokamax 0.0.17: gpu_utils.has_mosaic_gpu_support / has_triton_support (platform 'gpu', compute
    capability >= 8.0, "SM80 support is experimental"); pallas_mosaic_gpu.py has sm80, sm90 and sm100 kernels
    for float32, float16, bfloat16 (sm80: float16, bfloat16 only); xla_chunked is plain XLA, anywhere."""
    error = import_error()
    rows = [("tokamax", "installed and importable", "yes" if error is None else error, error is None)]
    if implementation == "xla_chunked":
        return rows + [("device", "any JAX backend (plain XLA loops)", device.backend, True)]
    cc = device.compute_capability
    cc_text = "{}.{}".format(*cc) if cc else "n/a"
    rows.append(("CUDA GPU", "yes (Pallas GPU kernel)", device.backend, bool(device.is_cuda)))
    if implementation == "mosaic":
        ok_cc = bool(device.is_cuda) and cc is not None and (8, 0) <= tuple(cc) < (11, 0)
        rows.append(("compute capability", "8.x (experimental), 9.0 Hopper or 10.x Blackwell", cc_text, ok_cc))
        dtypes = ("float16", "bfloat16") if cc is not None and tuple(cc) < (9, 0) else ("float32", "float16", "bfloat16")
        rows.append(("dtype", " or ".join(dtypes), dtype, dtype in dtypes))
        # No explicit check in the source: on Hopper the Q, K, V tiles must fit 227 KiB of shared memory.
        rows.append(("head_dim", "≤ 256 in practice (tiles in 227 KiB of shared memory)", str(head_dim),
                     head_dim <= 256))
    elif implementation == "triton":
        ok_cc = bool(device.is_cuda) and cc is not None and tuple(cc) >= (8, 0)
        rows.append(("compute capability", "≥ 8.0 (Ampere or newer)", cc_text, ok_cc))
        rows.append(("dtype", "a float type (float32, float16, bfloat16)", dtype,
                     dtype in ("float32", "float16", "bfloat16")))
        rows.append(("head_dim", "any (blocks padded to the next power of two)", str(head_dim), True))
    else:
        raise ValueError(f"implementation must be one of {', '.join(IMPLEMENTATIONS)} (got {implementation!r})")
    return rows


# Where each kernel's online-softmax loop lives in tokamax, and the nested function that is that loop.
_KERNELS = {
    "mosaic": ("tokamax._src.ops.attention.pallas_mosaic_gpu_kernel_sm90", "kv_loop"),
    "triton": ("tokamax._src.ops.attention.pallas_triton", "body"),
}


def inner_loop_source(implementation: str) -> str | None:
    """The installed tokamax's K/V loop body ('mosaic': sm90 `kv_loop`, 'triton': `body`); None without."""
    if import_error() is not None or implementation not in _KERNELS:
        return None
    module_name, function = _KERNELS[implementation]
    try:
        source = inspect.getsource(importlib.import_module(module_name))
    except Exception:  # the module did not import here (no GPU toolchain), or moved
        return None
    lines = source.splitlines()
    start = next((n for n, line in enumerate(lines) if line.lstrip().startswith(f"def {function}(")), None)
    if start is None:
        return None
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    return textwrap.dedent("\n".join(lines[start:end]).rstrip())


LICENCE_NOTE = ("Copyright 2025 DeepMind Technologies Limited. Licensed under the Apache License, "
                "Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0). Excerpt copied verbatim "
                "from tokamax 0.0.17 (github.com/openxla/tokamax); unchanged.")


class Excerpt(TypedDict):
    path: str
    first_line: int
    text: str
    marks: dict[int, str]


# Each excerpt: the file in tokamax 0.0.17, its first line number, the text, and the online-softmax lines
# marked by line number: max, exp, rescale (exp of old max - new max), sum, accumulate.
EXCERPTS: dict[str, Excerpt] = {
    "triton": dict(
        path="tokamax/_src/ops/attention/pallas_triton.py",
        first_line=251,
        text="""\
    exp = jnp.exp2 if use_base2 else jnp.exp

    if use_stable_softmax:
      m_ij = jnp.maximum(m_i, jnp.max(s, axis=1))
      p = exp(s - m_ij[:, None])
      alpha = exp(m_i - m_ij)
      m_i = m_ij
      accs = [acc * alpha[:, None] for acc in accs]
      l_i *= alpha
    else:
      p = exp(s)
    l_i += jnp.sum(p, axis=1)

    if dropout_mask_ref is not None:
      dropout_mask_slice_k = (
          slice_k if (dropout_mask_ref.shape[-1] > 1) else slice(None)
      )
      dropout_mask = plgpu.load(dropout_mask_ref.at[:, dropout_mask_slice_k])
      p *= dropout_mask.astype(p.dtype) / (1 - dropout_rate)

    for i in range(split_d_out):
      slice_d = block.ds(i, block_d_out)
      v = v_ref.at[slice_k, slice_d].load(bounds_check=(True, False))
      v, _ = _rescale(v, v_scales_ref, slice_k, slice_d)
      accs[i] += plgpu.dot(
          p.astype(v.dtype), v, precision=weights_v_dot_precision
      )

""",
        marks={254: "max", 255: "exp", 256: "rescale", 258: "rescale", 259: "rescale", 262: "sum", 275: "accumulate"},
    ),
    "mosaic": dict(
        path="tokamax/_src/ops/attention/pallas_mosaic_gpu_kernel_sm90.py",
        first_line=443,
        text="""\
          scale *= math.log2(math.e)
          if use_stable_softmax:
            m_i = jnp.maximum(m_i, s.max(axis=1) * scale)
            m_valid = (mask is None and not has_k_range) | (m_i != -jnp.inf)
            alpha = jnp.where(m_valid, jnp.exp2(m_scale - m_i), 1.0)
            threshold_is_1 = rescale_threshold == 1.0
            needs_rescale = alpha < rescale_threshold
            m_scale = jnp.where(needs_rescale | threshold_is_1, m_i, m_scale)
            p = jnp.exp2(s * scale - bcast(jnp.where(m_valid, m_scale, 0.0)))
            acc = jnp.where(
                bcast(needs_rescale, acc), acc * bcast(alpha, acc), acc
            )
            l_i = jnp.where(needs_rescale | threshold_is_1, l_i * alpha, l_i)
          else:
            p = jnp.exp2(s * scale)
          p_ = p.astype(v.dtype)

          # Can't fully explain why, but empirically the ordering here
          # influences the performance of the final kernel quite significantly.
          if p_sum_before_barriers := (head_dim <= 128):
            l_i += p.sum(axis=1)
            acc, p_ = lax.optimization_barrier((acc, p_))
            l_i, m_i, m_scale = lax.optimization_barrier((l_i, m_i, m_scale))

          plgpu.barrier_wait(v_produced.at[si])
          schedule_barrier_arrive_and_wait()

          def compute_pv(refs):
            acc, l_i = refs
            plgpu.wgmma(acc, p_, v_smem.at[si])

""",
        marks={445: "max", 447: "rescale", 451: "exp", 453: "rescale", 455: "rescale", 463: "sum", 472: "accumulate"},
    ),
}


def excerpt_lines(implementation: str) -> list[tuple[int, str, str | None]]:
    """The shipped excerpt as (line number in tokamax's file, text, mark or None) rows."""
    e = EXCERPTS[implementation]
    return [(e["first_line"] + n, line, e["marks"].get(e["first_line"] + n))
            for n, line in enumerate(e["text"].splitlines())]



def _entry(implementation: str, label: str, adds: str) -> Backend:
    def needs(shape, device):
        rows = requirements(implementation, device, shape.dtype, shape.head_dim)
        return [Requirement(*r) for r in rows]

    return Backend(
        name=f"tokamax_{implementation}",
        label=label,
        fn=lambda q, k, v, shape: tokamax_attention(
            q, k, v, causal=shape.causal, implementation=implementation, window=shape.window,
            kv_lengths=shape.kv_lengths_per_batch()),
        needs=needs,
        masks=(Causal, Window, Padding),
        device_bytes=streamed_bytes,
        description=f"tokamax.dot_product_attention(implementation='{implementation}') (openxla/tokamax).",
        adds=adds,
    )


XLA_CHUNKED = _entry("xla_chunked", "tokamax, chunked XLA",
                     "Queries in chunks through plain XLA: less memory than XLA's SDPA, no fused kernel.")
TRITON = _entry("triton", "tokamax, Pallas Triton",
                "One fused kernel written in Python (Pallas) and compiled by Triton: tiles kept on chip.")
MOSAIC = _entry("mosaic", "tokamax, Pallas Mosaic GPU",
                "Hopper's asynchronous tensor-core instructions (wgmma), TMA copies (hardware that moves whole "
                "tiles to and from on-chip memory) and warp specialisation (some warps only load tiles while "
                "others compute), from Python (Pallas Mosaic GPU).")
