"""GPU kernel names in words: what each kernel CUPTI reports is, for a learner reading a table.

Kernel names are what the libraries call them: cuDNN's generated names
(`cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_...`), cuBLAS's `nvjet_sm90_...`,
XLA's fusions (`gemm_fusion_dot`, `triton_softmax`, `loop_multiply_fusion`) and C++ symbols
(`_ZN18transformer_engine10fused_attn25populate_rng_state_kernelE...`, demangled here).
The words are a reading of the name, not a guarantee: the raw name is always kept beside them.
"""

from __future__ import annotations

import re

# (pattern on the lower-cased name, what it is); first match wins
RULES: tuple[tuple[str, str], ...] = (
    (r"flash_fprop|fmha.*(fwd|fprop)|fused_attn.*forward", "cuDNN flash attention, forward"),
    (r"flash_bprop|fmha.*(bwd|bprop)|fused_attn.*backward", "cuDNN flash attention, backward"),
    (r"cudnn", "cuDNN kernel"),
    (r"nvjet_sm\d+_qq", "cuBLAS matmul, FP8 inputs"),
    (r"nvjet|cublas|sm\d+_xmma_gemm", "cuBLAS matmul"),
    (r"gemm_fusion|triton_gemm|cutlass|gemm|\bdot\b", "matmul (XLA fusion)"),
    (r"softmax", "softmax (XLA fusion)"),
    (r"transpose", "transpose (layout change)"),
    (r"reduce|reduction", "reduction (XLA fusion)"),
    (r"rng", "random-number state"),
    (r"convert", "type conversion (XLA fusion)"),
    (r"slice", "slice (XLA)"),
    (r"memcpy|memset|copy", "memory copy"),
    (r"fusion", "elementwise (XLA loop fusion)"),
)


def demangle(name: str) -> str:
    """`ns::ns::function` from an Itanium C++ symbol (`_ZN<len><id>...E<args>`); other names unchanged."""
    if not name.startswith("_Z"):
        return name
    i, parts = (3, []) if name.startswith("_ZN") else (2, [])
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        parts.append(name[j: j + n])
        i = j + n
        if not name.startswith("_ZN"):
            break
    return "::".join(parts) if parts and all(parts) else name


def what(name: str) -> str | None:
    """What the kernel is, in words, or None when the name says nothing we know."""
    low = demangle(name).lower()
    return next((words for pattern, words in RULES if re.search(pattern, low)), None)


def short(name: str, n: int = 48) -> str:
    """The demangled name, cut to n characters."""
    name = demangle(name)
    return name if len(name) <= n else name[: n - 1] + "…"


def describe(name: str, n: int = 48) -> str:
    """'what it is (short raw name)', or the short name alone."""
    words = what(name)
    return f"{words} ({short(name, n)})" if words else short(name, n)
