"""FP8: cuDNN's FP8 attention against bf16, and TransformerEngine's autocast and FP8 dense layers.

Built on the one harness (`timing`) and the registry; the suite (`suite.py`) runs them on a GPU, the
TransformerEngine & FP8 page shows them. Autocast is an `AutocastStudy`, the others tables (units in names).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab import device as device_mod
from attnlab import kernels
from attnlab.admission import DEVICE, DeviceBusy, OverBudget
from attnlab.backends import fp8, get, te
from attnlab.backends.base import abstract_inputs
from attnlab.measure import compiled, runs, timing
from attnlab.shapes import AttentionShape


def _study_bytes(shape: AttentionShape, names: list[str], variants: int, backward: bool = False) -> int:
    """Device bytes a study holds at once: its backends' estimate for each variant it keeps alive."""
    return variants * runs.memory_needed(shape, names, accuracy=False, backward=backward)[0]


def _rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _ratio(a, b):
    return None if a is None or not b else a / b


def fp8_attention_study(shapes: Iterable[AttentionShape]) -> pd.DataFrame:
    """(c): cuDNN FP8 attention against bf16 cuDNN: speed, and the error each scaling choice costs; a row per
    shape: 'status' ('ok', 'unsupported', 'error') and 'reason'; per variant (bf16, fp8, fp8_unit, fp8_e2e)
    '{variant}_ms', '{variant}_tflops', '{variant}_clock_mhz' sustained and '{variant}_burst_...' at boost;
    'speedup' (bf16 ms / fp8 ms); 'err_...' (relative errors, ||fp8 - bf16|| / ||bf16||).

    Speed (kernel time): FP8 kernel alone (FP8 in and out; 448/amax or unit scales) and end to end, against
    bf16, at boost clock (after an idle second) and sustained (after 1.5 s of calls), clock read. Error for:
    unit scales; 448/amax on Q, K, V; + 448 on P; + calibrated O; x/64: unit; all but O (underflows); all."""
    rows, info = [], device_mod.info()
    for shape in shapes:
        base = {"shape": shape.describe(), "q_len": shape.q_len, "head_dim": shape.head_dim, "causal": shape.causal}
        why = get("cudnn_fp8").unmet(shape, info)
        if why:
            rows.append({**base, "status": "unsupported", "reason": why})
            continue
        try:  # the whole study of a shape in one turn, admitted for its memory
            with runs.inputs(shape, device_bytes=_study_bytes(shape, ["sdpa_cudnn", "cudnn_fp8"], variants=4)) as args:
                c = shape.causal
                q, k, v = args
                bf16 = get("sdpa_cudnn").jit(shape)
                ref = bf16(q, k, v).astype(jnp.float32)
                s_o = fp8.calibrated_output_scale(q, k, v, causal=c)
                run = lambda q, k, v, c=c, **kw: jax.jit(functools.partial(fp8.cudnn_fp8_attention, causal=c, **kw))(q, k, v)[0]  # noqa: E731
                err = lambda out, ref=ref: _rel_err(out.astype(jnp.float32), ref)  # noqa: E731
                row = {**base, "status": "ok", "scale_o": s_o,
                       "err_unit_scales": err(run(q, k, v, data_scales=False)),
                       "err_amax_qkv": err(run(q, k, v)),
                       "err_amax_qkv_p": err(run(q, k, v, scale_s=fp8.P_SCALE)),
                       "err_amax_all": err(run(q, k, v, scale_s=fp8.P_SCALE, scale_o=s_o))}
                small = [x / 64 for x in (q, k, v)]  # tiny activations: below FP8's normal range unscaled
                ref_small = bf16(*small).astype(jnp.float32)
                row["err_small_inputs_unit_scales"] = err(run(*small, data_scales=False), ref_small)
                # Q, K, V and P scaled, O left at unit scale: a small O still underflows FP8 (smallest 2^-9)
                row["err_small_inputs_amax_scales"] = err(run(*small, scale_s=fp8.P_SCALE), ref_small)
                s_o_small = fp8.calibrated_output_scale(*small, causal=c)
                row["err_small_inputs_all_scales"] = err(run(*small, scale_s=fp8.P_SCALE, scale_o=s_o_small), ref_small)

                # speed: each at the GPU's boost clock (after idling) and under sustained load, with the clock
                qkv8, scales = fp8.quantize_inputs(q, k, v)
                unit8, unit = fp8.quantize_inputs(q, k, v, data_scales=False)
                variants = {
                    "bf16": (bf16, (q, k, v)),
                    "fp8": (lambda q8, k8, v8, sc=scales, c=c, s_o=s_o: fp8.fp8_kernel(  # noqa: E731
                        q8, k8, v8, sc, causal=c, scale_s=fp8.P_SCALE, scale_o=s_o)[0], qkv8),
                    "fp8_unit": (lambda q8, k8, v8, sc=unit, c=c: fp8.fp8_kernel(q8, k8, v8, sc, causal=c)[0], unit8),
                    "fp8_e2e": (get("cudnn_fp8").jit(shape), (q, k, v)),
                }
                gf = shape.flops() / 1e9
                for key, (fn, args) in variants.items():
                    exe, _, _ = compiled.compile_timed(fn, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args])
                    t = timing.clock_states(exe, args)
                    row.update({f"{key}_ms": t.sustained_ms, f"{key}_tflops": _ratio(gf, t.sustained_ms),
                                f"{key}_clock_mhz": t.sustained_clock_mhz, f"{key}_burst_ms": t.burst_ms,
                                f"{key}_burst_tflops": _ratio(gf, t.burst_ms), f"{key}_burst_clock_mhz": t.burst_clock_mhz,
                                "max_clock_mhz": t.max_clock_mhz, "timing_note": t.note})
                row.update(speedup=_ratio(row["bf16_ms"], row["fp8_ms"]),
                           burst_speedup=_ratio(row["bf16_burst_ms"], row["fp8_burst_ms"]),
                           e2e_speedup=_ratio(row["bf16_ms"], row["fp8_e2e_ms"]))
                rows.append(row)
        except Exception as e:
            rows.append({**base, "status": "error", "reason": f"{type(e).__name__}: {str(e)[:300]}"})

    return pd.DataFrame(rows)


@dataclasses.dataclass(frozen=True)
class AutocastStudy:
    """(a): TE's DotProductAttention with and without `te.autocast`: output difference, time, kernels."""

    status: str  # "ok", "unsupported" or "error"
    reason: str = ""  # why not, when status is not "ok"
    shape: str = ""
    max_abs_diff_autocast_vs_not: float | None = None  # max |output with autocast - without|
    bf16_ms: float | None = None  # ms per call without autocast (CUPTI device time, else pipelined)
    autocast_ms: float | None = None  # ms per call under FP8 autocast
    bf16_kernels: tuple[str, ...] = ()  # kernel names, in launch order
    autocast_kernels: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def same_kernels(self) -> bool:
        return list(self.bf16_kernels) == list(self.autocast_kernels)

    @property
    def device_timed(self) -> bool:
        """The times are CUPTI's device times: kernel names come only from CUPTI, with the times."""
        return bool(self.bf16_kernels and self.autocast_kernels)

    @classmethod
    def from_json(cls, d: Mapping) -> AutocastStudy:
        names = {f.name for f in dataclasses.fields(cls)}
        if "status" not in d:
            raise ValueError("not an autocast study: it has no 'status'")
        kernels = {k: tuple(d.get(k) or ()) for k in ("bf16_kernels", "autocast_kernels")}
        return cls(**{**{k: v for k, v in d.items() if k in names}, **kernels})

    def to_json(self) -> dict:
        """As the suite's file holds it: the parts a study made (an unrun study is its status and reason)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
                if v not in (None, "", ())}


def te_autocast_study(shape: AttentionShape) -> AutocastStudy:
    """(a): does te.autocast change DotProductAttention's output, kernels or time?"""
    if why := te.import_error():  # cached: the same sentence every call
        return AutocastStudy("unsupported", why)
    try:
        out, specs = {}, abstract_inputs(shape)
        with DEVICE.building():  # compiled first, between runs (a tuned compile's autotuner runs kernels)
            programs = {enabled: te.autocast_runner(shape, enabled, specs) for enabled in (False, True)}
        with runs.inputs(shape, device_bytes=_study_bytes(shape, ["te_dpa"], variants=2)) as args:
            for enabled, exe in programs.items():  # then timed and run in one turn, admitted for its memory
                t = timing.time_compiled(exe, args)
                out[enabled] = (np.asarray(exe(*args), np.float32), t)
        (o0, t0), (o1, t1) = out[False], out[True]
        return AutocastStudy(
            "ok", shape=shape.describe(), max_abs_diff_autocast_vs_not=float(np.abs(o0 - o1).max()),
            bf16_ms=t0.device_ms or t0.throughput_ms, autocast_ms=t1.device_ms or t1.throughput_ms,
            bf16_kernels=tuple(k for k, _ in t0.kernels), autocast_kernels=tuple(k for k, _ in t1.kernels))
    except Exception as e:
        return AutocastStudy("error", f"{type(e).__name__}: {str(e)[:400]}")


def te_block_study(shape: AttentionShape) -> pd.DataFrame:
    """(b): an attention block of TE layers in bf16 and under FP8 autocast, a table row per recipe: ms (per
    call), tflops, rel_err_vs_bf16, top_kernels ([name, µs] pairs), or status and reason."""
    if te.import_error():
        return pd.DataFrame([{"status": "unsupported", "reason": te.import_error()}])
    try:  # one turn for the block's draws, training steps, compiles and runs, admitted for its memory
        with DEVICE.use(_study_bytes(shape, ["te_dpa"], variants=3, backward=True)):
            return _te_block_rows(shape)
    except (DeviceBusy, OverBudget) as e:  # a busy GPU, or a block over the budget: a row that says so
        return pd.DataFrame([{"shape": shape.describe(), "status": "error", "reason": f"{type(e).__name__}: {e}"}])


def _te_block_rows(shape: AttentionShape) -> pd.DataFrame:
    rows, ref = [], None
    x = jax.random.normal(jax.random.PRNGKey(3), (shape.batch, shape.q_len, shape.heads * shape.head_dim),
                          jnp.float32).astype(shape.dtype)
    for recipe in (None, "fp8_delayed", "fp8_current"):
        try:
            exe, variables = te.block_runner(shape, recipe, x)
            y = np.asarray(exe(variables, x), np.float32)
            ref = y if recipe is None else ref
            t = timing.time_compiled(exe, [variables, x])
            ms = t.device_ms or t.throughput_ms
            rows.append({
                "shape": shape.describe(), "recipe": recipe or "bf16", "status": "ok", "ms": ms,
                "tflops": te.attention_block_flops(shape) / ms / 1e9,
                "rel_err_vs_bf16": 0.0 if recipe is None else _rel_err(y, ref),
                "top_kernels": [(k[:90], round(ms * 1e3, 1)) for k, ms in sorted(t.kernels, key=lambda x: -x[1])[:6]],
            })
        except Exception as e:
            rows.append({"shape": shape.describe(), "recipe": recipe or "bf16", "status": "error",
                         "reason": f"{type(e).__name__}: {str(e)[:400]}"})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# the formats, and the studies' results as tables a page can show
# --------------------------------------------------------------------------------------------
def formats() -> pd.DataFrame:
    """The two FP8 formats (Micikevicius et al. 2022, arXiv:2209.05433), their limits read from
    `jnp.finfo`, and where the lab uses each. TE's HYBRID recipe format is E4M3 forward, E5M2 backward."""
    rows = []
    for name, dtype, role, here in (
            ("E4M3", jnp.float8_e4m3fn, "forward: activations, weights", "cuDNN FP8 attention (Q, K, V, P, O)"),
            ("E5M2", jnp.float8_e5m2, "backward: gradients (more range)", "TE's backward matrix multiplies (GEMMs), HYBRID")):
        fi = jnp.finfo(dtype)
        rows.append({"format": name, "exponent bits": fi.nexp, "mantissa bits": fi.nmant,
                     "largest value": float(fi.max), "smallest value": float(fi.smallest_subnormal),
                     "used for": role, "in this lab": here})
    df = pd.DataFrame(rows)
    return df.astype({"exponent bits": "Int64", "mantissa bits": "Int64"})


def kernel_cell(names) -> str:
    """Kernel names (or [name, µs] pairs) in words, as one line of text for a table cell."""
    return "; ".join(f"{kernels.describe(k[0])} {k[1]:.1f} µs" if isinstance(k, (list, tuple))
                     else kernels.describe(str(k)) for k in (names if isinstance(names, (list, tuple)) else []))


def kernels_side_by_side(study: AutocastStudy) -> pd.DataFrame:
    """The autocast study's two kernel lists as two columns of equal length."""
    a, b = list(study.bf16_kernels), list(study.autocast_kernels)
    n = max(len(a), len(b))
    pad = lambda ks: [kernels.describe(k, 56) for k in ks] + [""] * (n - len(ks))  # noqa: E731 (fits half a page)
    return pd.DataFrame({"kernels without autocast": pad(a), "kernels with autocast": pad(b)})


SPEEDS = {"bf16": "bf16 cuDNN", "fp8": "FP8 kernel, 448/amax scales", "fp8_unit": "FP8 kernel, unit scales",
          "fp8_e2e": "FP8 end to end (quantise + kernel + dequantise)"}


def speed_frame(df: pd.DataFrame, burst: bool) -> pd.DataFrame:
    """TFLOP/s per (shape, precision) in one GPU state, long form for a grouped bar chart."""
    sfx = "_burst" if burst else ""
    cols = {f"{k}{sfx}_tflops": label for k, label in SPEEDS.items() if f"{k}{sfx}_tflops" in df}
    if not cols or df.empty:
        return pd.DataFrame(columns=["shape", "precision", "TFLOP/s"])
    return (df.melt(id_vars=["shape"], value_vars=list(cols), var_name="precision", value_name="TFLOP/s")
            .replace({"precision": cols}).dropna(subset=["TFLOP/s"]))


def fastest(df: pd.DataFrame) -> pd.Series | None:
    """The row with the fastest FP8 kernel at boost clock (None when no row has one)."""
    if "fp8_burst_tflops" not in df or df["fp8_burst_tflops"].isna().all():
        return None
    return df.loc[df["fp8_burst_tflops"].idxmax()]

