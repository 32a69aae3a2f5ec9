"""What the arrays of one attention call look like, and what the compiler makes of them.

    the layout table      Q, K, V, the output and the (B, N, T, S) scores naive attention
                          materialises: shape, dtype, layout letters, elements, bytes
    device placement      which device the live arrays sit on (`jax.Array.devices()`)
    outputs side by side  two implementations on the same inputs, each against the float64 reference
    compiled programs     which kernel ran (cuDNN custom call or XLA fusions) and the scratch memory
                          XLA reserves, read from the compiled program without running it

Layout letters are those of `jax.nn.dot_product_attention`'s docstring: Q is BTNH, K and V are
BSKH, and the scores are BNTS.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np
import pandas as pd

from attnlab import bench
from attnlab import device as device_mod
from attnlab import implementations as impls
from attnlab.shapes import DTYPES, AttentionShape, format_bytes

LETTERS = {
    "B": ("batch", "batch size: independent sequences in one call"),
    "T": ("q_len", "length of the query (target) sequence"),
    "S": ("kv_len", "length of the key/value (source) sequence"),
    "N": ("heads", "query heads"),
    "K": ("kv_heads", "key/value heads (N for MHA, fewer for GQA, 1 for MQA)"),
    "H": ("head_dim", "size of each head's vectors (d in the formula)"),
}


# --------------------------------------------------------------------------------------------
# the layout table
# --------------------------------------------------------------------------------------------
def letters(shape: AttentionShape) -> pd.DataFrame:
    """One row per layout letter: its shape field, what it means, and its value at `shape`."""
    return pd.DataFrame([
        {"letter": letter, "field": field, "meaning": meaning, "value": getattr(shape, field)}
        for letter, (field, meaning) in LETTERS.items()
    ])


def layout_table(shape: AttentionShape) -> pd.DataFrame:
    """Q, K, V, the output and naive attention's scores at `shape`: shape, dtype, layout, elements, bytes.

    The scores are float32 whatever the input dtype (naive attention and XLA's path accumulate
    the logits in float32), so their bytes are 4 per element.
    """
    B, T, S, N, K, H = shape.batch, shape.q_len, shape.kv_len, shape.heads, shape.kv_heads, shape.head_dim
    arrays = [
        ("Q (query)", (B, T, N, H), shape.dtype, "BTNH", "input"),
        ("K (key)", (B, S, K, H), shape.dtype, "BSKH", "input"),
        ("V (value)", (B, S, K, H), shape.dtype, "BSKH", "input"),
        ("output", (B, T, N, H), shape.dtype, "BTNH", "output, same layout as Q"),
        ("scores Q·Kᵀ (naive only)", (B, N, T, S), "float32", "BNTS", "materialised by naive attention"),
    ]
    rows = []
    for name, dims, dtype, layout, role in arrays:
        elements = int(np.prod(dims, dtype=np.int64))
        nbytes = elements * DTYPES[dtype].itemsize
        rows.append({"array": name, "shape": str(dims), "dtype": dtype, "layout": layout, "role": role,
                     "elements": elements, "bytes": nbytes, "size": format_bytes(nbytes)})
    return pd.DataFrame(rows)


def placement(shape: AttentionShape, seed: int = 0) -> pd.DataFrame:
    """Make Q, K, V for `shape` and report where JAX put them: device, platform, sharding, nbytes.

    `jax.Array.devices()` is the set of devices holding the array's data; arrays made by jax.random
    without a `device=` argument land on the default device (the first GPU, or the CPU).
    """
    q, k, v = impls.make_inputs(shape, seed)
    rows = []
    for name, x in (("Q", q), ("K", k), ("V", v)):
        devs = sorted(x.devices(), key=lambda d: d.id)
        rows.append({
            "array": name,
            "shape": str(tuple(x.shape)),
            "dtype": str(x.dtype),
            "devices()": ", ".join(str(d) for d in devs),
            "platform": ", ".join(sorted({d.platform for d in devs})),
            "device kind": ", ".join(sorted({d.device_kind for d in devs})),
            "sharding": type(x.sharding).__name__,
            "committed": bool(getattr(x, "committed", False)),
            "nbytes": int(x.nbytes),
        })
    del q, k, v
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# outputs side by side
# --------------------------------------------------------------------------------------------
def _to_numpy(x) -> np.ndarray:
    return np.asarray(jax.numpy.asarray(x, dtype=jax.numpy.float32), dtype=np.float64)


def _errors(ref: impls.Reference, name: str, out) -> dict:
    c = ref.check(name, out)
    if c is None:
        return {"max_abs_error": None, "relative_error": None, "allclose": None}
    return {"max_abs_error": c.max_abs_error, "relative_error": c.relative_error, "allclose": c.allclose}


def accuracy_table(shape: AttentionShape, names: Sequence[str] | None = None, seed: int = 0) -> tuple[pd.DataFrame, str]:
    """Every implementation (default: the whole registry) on the same inputs against the float64 reference.

    Returns (one row per implementation, a note on how the reference was sliced or why it was skipped).
    Implementations that cannot run `shape` here get a row with their reason instead of errors.
    """
    info = device_mod.info()
    rows = []
    with bench.DEVICE_QUEUE.slot():
        q, k, v = impls.make_inputs(shape, seed)
        ref = impls.float64_reference(shape, q, k, v)
        for name in names or list(impls.REGISTRY):
            impl = impls.get(name)
            row = {"implementation": name, "label": impl.label}
            support = impl.supports(shape, info)
            if not support.ok:
                rows.append({**row, "status": bench.STATUS_UNSUPPORTED, "reason": support.reason})
                continue
            try:
                out = impl.jit(shape)(q, k, v)
                rows.append({**row, "status": bench.STATUS_OK, "reason": "", "output shape": str(tuple(out.shape)),
                             "output dtype": str(out.dtype), **_errors(ref, name, _to_numpy(out))})
            except Exception as e:  # OOM or a backend error: a row that says so
                status = bench.STATUS_OOM if bench.is_out_of_memory(e) else bench.STATUS_ERROR
                rows.append({**row, "status": status, "reason": f"{type(e).__name__}: {str(e).strip()[:300]}"})
    tol = impls.TOLERANCES[shape.dtype]
    df = pd.DataFrame(rows)
    df.attrs.update(rtol=tol["rtol"], atol=tol["atol"])
    return df, ref.note


@dataclasses.dataclass(frozen=True)
class Pair:
    """Two implementations on the same inputs: their outputs, their difference, each against the reference."""

    a: str
    b: str
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    a_dtype: str
    b_dtype: str
    max_abs_difference: float  # max |a − b| over every element
    allclose: bool  # np.allclose(a, b, rtol, atol)
    rtol: float
    atol: float
    vs_reference: pd.DataFrame  # rows for a and b: max_abs_error, relative_error, allclose
    reference_note: str


def compare_pair(shape: AttentionShape, a: str, b: str, *, rtol: float | None = None, atol: float | None = None,
                 seed: int = 0) -> Pair:
    """Run registry entries `a` and `b` on the same inputs and compare them with each other and with float64.

    The tolerance defaults to `implementations.TOLERANCES[shape.dtype]`. Raises ValueError with the
    registry's reason when either cannot run `shape` here.
    """
    info = device_mod.info()
    for name in (a, b):
        s = impls.get(name).supports(shape, info)
        if not s.ok:
            raise ValueError(f"{name} cannot run {shape.describe()} here: {s.reason}")
    tol = impls.TOLERANCES[shape.dtype]
    rtol = tol["rtol"] if rtol is None else rtol
    atol = tol["atol"] if atol is None else atol
    with bench.DEVICE_QUEUE.slot():
        q, k, v = impls.make_inputs(shape, seed)
        out_a = impls.get(a).jit(shape)(q, k, v)
        out_b = impls.get(b).jit(shape)(q, k, v)
        na, nb = _to_numpy(out_a), _to_numpy(out_b)
        ref = impls.float64_reference(shape, q, k, v)
    vs_ref = pd.DataFrame([{"implementation": n, **_errors(ref, n, x)} for n, x in ((a, na), (b, nb))])
    return Pair(
        a=a, b=b, a_shape=tuple(out_a.shape), b_shape=tuple(out_b.shape), a_dtype=str(out_a.dtype),
        b_dtype=str(out_b.dtype), max_abs_difference=float(np.abs(na - nb).max()),
        allclose=bool(np.allclose(na, nb, rtol=rtol, atol=atol)), rtol=rtol, atol=atol,
        vs_reference=vs_ref, reference_note=ref.note,
    )


# --------------------------------------------------------------------------------------------
# compiled programs: which kernel, how much scratch memory
# --------------------------------------------------------------------------------------------
def which_kernel(info: bench.CompiledInfo) -> str:
    """In words, what the compiled program runs: cuDNN's fused attention, or XLA's own fusions."""
    if info.uses_cudnn_attention:
        call = next(c for c in info.custom_calls if "cudnn$fmha" in c or "fused_attn" in c)
        return f"cuDNN fused attention (custom call {call})"
    others = f"; library calls: {', '.join(info.custom_calls)}" if info.custom_calls else ""
    if info.library_fusions:
        others += (f"; handed to a library: {', '.join(info.library_fusions)} (its own scratch is not in XLA's "
                   "temp bytes)")
    return f"XLA's own code: {info.fusions} fusion{'s' if info.fusions != 1 else ''}{others}"


def compiled_summary(shape: AttentionShape, names: Sequence[str]) -> pd.DataFrame:
    """For each registry entry that supports `shape`: what its compiled program calls and its scratch bytes.

    Compiles from `jax.ShapeDtypeStruct`s (bench.compile_implementation): nothing is allocated or run.
    """
    info = device_mod.info()
    rows = []
    for name in names:
        s = impls.get(name).supports(shape, info)
        if not s.ok:
            rows.append({"implementation": name, "runs": "no", "what ran": "", "custom calls": "", "fusions": None,
                         "temp_bytes": None, "reason": s.reason})
            continue
        try:
            c = bench.describe_compiled(bench.compile_implementation(name, shape)[0])
        except Exception as e:
            rows.append({"implementation": name, "runs": "no", "what ran": "", "custom calls": "", "fusions": None,
                         "temp_bytes": None, "reason": f"{type(e).__name__}: {str(e).strip()[:300]}"})
            continue
        rows.append({"implementation": name, "runs": "yes", "what ran": which_kernel(c),
                     "custom calls": ", ".join(c.custom_calls) or "none", "fusions": c.fusions,
                     "temp_bytes": c.temp_bytes, "reason": ""})
    return pd.DataFrame(rows)


def growth(df: pd.DataFrame, y: str = "temp_bytes", x: str = "q_len") -> pd.DataFrame:
    """Per implementation: y at the shortest and longest x measured, their ratio, and the log-log slope
    (2 for O(T²), 1 for O(T), 0 for a fixed size)."""
    rows = []
    ok = df[(df.get("status") == bench.STATUS_OK) & (df.get(y, pd.Series(dtype=float)).fillna(0) > 0)] if len(df) else df
    for name, part in ok.groupby("implementation", sort=False):
        part = part.sort_values(x)
        if len(part) < 2:
            continue
        (x0, y0), (x1, y1) = part[[x, y]].iloc[0], part[[x, y]].iloc[-1]
        rows.append({"implementation": name, "from": int(x0), "to": int(x1), "ratio": y1 / y0,
                     "slope": float(np.log(y1 / y0) / np.log(x1 / x0))})
    return pd.DataFrame(rows)


def compiled_memory(shape: AttentionShape, names: Sequence[str], lengths: Sequence[int]) -> pd.DataFrame:
    """Scratch memory XLA reserves (`memory_analysis().temp_size_in_bytes`) as the sequence grows.

    For each T in `lengths`, `shape` with q_len = kv_len = T is compiled (never run, nothing allocated:
    the program is lowered from `jax.ShapeDtypeStruct`s) for each implementation whose requirements
    this device meets. The lab's memory cap is not applied: compiling a program that would not fit is
    free, and its temp bytes show why it would not. Naive attention's scratch holds the (B, N, T, S)
    scores, O(T²); a fused kernel streams over S and keeps O(T).
    """
    info = device_mod.info()
    rows = []
    for t in lengths:
        s = shape.replace(q_len=int(t), kv_len=int(t))
        base = {"q_len": s.q_len, "kv_len": s.kv_len, "shape": s.describe(),
                "score_bytes_float32": s.score_elements() * 4}
        problems = s.validate(memory_limit=2**62)  # field checks only: compiling allocates nothing
        for name in names:
            impl = impls.get(name)
            row = {"implementation": name, **base}
            missing = " ".join(problems) or impl.requirements(s, info)
            if missing:
                rows.append({**row, "status": bench.STATUS_UNSUPPORTED, "reason": missing})
                continue
            try:
                c = bench.describe_compiled(bench.compile_implementation(name, s)[0])
            except Exception as e:
                rows.append({**row, "status": bench.STATUS_ERROR, "reason": f"{type(e).__name__}: {str(e).strip()[:300]}"})
                continue
            rows.append({**row, "status": bench.STATUS_OK, "reason": "", "temp_bytes": c.temp_bytes,
                         "argument_bytes": c.argument_bytes, "output_bytes": c.output_bytes,
                         "what ran": which_kernel(c)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# cuDNN's requirements, one by one
# --------------------------------------------------------------------------------------------
def cudnn_checklist(shape: AttentionShape, info: device_mod.DeviceInfo) -> pd.DataFrame:
    """Each requirement `implementations._cudnn_requirements` checks, with what is here and whether it is met.

    The registry stops at the first failure; this lists them all, in the same order and with the
    same limits, so a learner sees everything that would have to change.
    """
    cc_min = device_mod.FUSED_ATTENTION_MIN_CC
    max_h = 256 if info.at_least((9, 0)) else 128
    rows = [
        ("a CUDA GPU", "backend gpu on CUDA", f"{info.backend} ({info.platform})", info.is_cuda),
        (f"compute capability ≥ {cc_min[0]}.{cc_min[1]}", f"≥ {cc_min[0]}.{cc_min[1]} (Ampere or newer)",
         info.compute_capability_str, info.at_least(cc_min)),
        ("cuDNN loaded by JAX", "a cuDNN version", info.cudnn_version or "not loaded", info.cudnn_version is not None),
        ("dtype", "bfloat16 or float16", shape.dtype, shape.dtype in ("bfloat16", "float16")),
        ("head_dim", f"≤ {max_h} and a multiple of 8" + (" (≤ 256 on compute capability ≥ 9.0)" if max_h == 128 else ""),
         str(shape.head_dim), shape.head_dim <= max_h and shape.head_dim % 8 == 0),
    ]
    return pd.DataFrame([{"requirement": r, "needed": n, "here": h, "met": bool(m)} for r, n, h, m in rows])
