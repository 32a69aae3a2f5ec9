"""Tables on every page with one vocabulary of labels: each measurement column's label, unit and format
(COLUMNS), a missing value read as a dash, small wrapped tables, CSV downloads."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from attnlab import device
from attnlab.shapes import PARAM_KEYS

# One label, unit and format per measurement column, on every page's tables.
_num = st.column_config.NumberColumn
_text = st.column_config.TextColumn
COLUMNS = {
    "compile_ms": _num("compile (ms)", format="%.1f"),
    "wall_ms": _num("wall (ms)", format="%.4f", help="perf_counter around one call + block_until_ready, median"),
    "wall_ms_iqr": _num("wall spread, IQR (ms)", format="%.4f",
                        help="interquartile range: the spread of the middle half of the repeated calls"),
    "throughput_ms": _num("throughput (ms)", format="%.4f", help="many calls dispatched, one wait, per call"),
    "device_ms": _num("device (ms)", format="%.4f", help="the GPU's own kernel time per call (CUPTI)"),
    "kernel_count": _num("kernels", format="%d"),
    "tflops": _num("TFLOP/s", format="%.4g"),  # 0.0123 on a CPU, 586.4 on an H200
    "device_tflops": _num("device TFLOP/s", format="%.4g"),
    "committed": st.column_config.CheckboxColumn(
        "committed", help="placed on a device explicitly (jax.device_put with a device): JAX then runs "
                          "computations on it there; uncommitted arrays may be moved"),
    "pct_of_peak": _num("% of peak", format="%.1f",
                        help="best TFLOP/s over the GPU's dense datasheet peak for what its tensor cores compute "
                             "in: TF32 for float32 (JAX's default precision), bf16 for half precision, FP8 for "
                             "cuDNN's FP8 attention (H200: "
                             f"{device.peak_for('H200').tf32_tflops:.0f}, {device.peak_for('H200').bf16_tflops:.0f} "
                             f"and {device.peak_for('H200').fp8_tflops:.0f} TFLOP/s, attnlab/device.py)"),
    "max_abs_error": _num("max abs error", format="%.2e"),
    "relative_error": _num("relative error", format="%.2e"),
    "rel_err_vs_bf16": _num("error vs bf16", format="%.2e"),
    "ms": _num("ms", format="%.3f"),
    "bytes": _num("bytes", format="localized"),
    "nbytes": _num("bytes", format="localized"),
    "elements": _num("elements", format="localized"),
    "bytes_per_token": _num("bytes per token", format="localized"),
    "reason": _text("reason", width="large"),
    "why not": _text("why not", width="large"),
    "detail": _text("detail", width="large"),
    "kernels": _text("kernels (GPU time each)", width="large"),
    "custom_calls": _text("custom calls", width="medium"),
}
# text that explains an absence: an empty cell there reads better as a dash than as "None"
MISSING = "—"


def table(data, *, column_config: dict | None = None, hide_index: bool = True, width="stretch",
          drop_empty: bool = True, **kwargs) -> None:
    """st.dataframe with the shared column labels; columns with no value in any row are left out
    (e.g. device time on a CPU, which the page explains), and a missing value, text or number, reads '—' (Streamlit
    shows "None" for a missing number, which reads like a result)."""
    if isinstance(data, pd.DataFrame):
        df = data
        if drop_empty and len(df):
            df = df[[c for c in df.columns if not df[c].isna().all()]]
        text = [c for c in df.columns if pd.api.types.is_string_dtype(df[c]) and df[c].dropna().map(type).eq(str).all()]
        if text:
            df = df.assign(**{c: df[c].where(df[c].notna(), MISSING) for c in text})
        data = df
        config = {c: v for c, v in COLUMNS.items() if c in df.columns}
    else:
        config = {}
    kwargs.setdefault("placeholder", MISSING)
    st.dataframe(data, hide_index=hide_index, width=width, column_config={**config, **(column_config or {})}, **kwargs)


SHAPE_FIELDS = set(PARAM_KEYS)


def text_table(df: pd.DataFrame) -> None:
    """A small table whose long text (what ran, a reason, kernel names) wraps instead of being cut off.
    A table with no rows draws nothing."""
    df = df.loc[:, [c for c in df.columns if df[c].notna().any()]]
    if df.empty:
        return
    num = lambda x: f"{int(x):,}" if float(x).is_integer() else f"{x:.4g}"  # noqa: E731 (7, not 7.0000)
    df = df.assign(**{c: df[c].map(lambda x: num(x) if pd.notna(x) else x) for c in df.columns
                      if pd.api.types.is_numeric_dtype(df[c]) and df[c].dtype != bool and c not in SHAPE_FIELDS})
    df = df.astype(object).where(df.notna(), "—")
    # shape fields keep their names (q_len, kv_heads: the lab's vocabulary); other raw names read as words
    name = lambda c: label(c) if c in SHAPE_FIELDS else label(c).replace("_", " ")  # noqa: E731
    st.table(df.rename(columns=name).set_index(name(df.columns[0])))


def download(df: pd.DataFrame, name: str, label: str = "Download CSV") -> None:
    st.download_button(label, df.to_csv(index=False).encode(), file_name=f"{name}.csv", mime="text/csv", key=f"dl_{name}")


def label(column: str) -> str:
    """A measurement column's label with its unit ('device_ms' -> 'device (ms)')."""
    config = COLUMNS.get(column)
    return (config or {}).get("label") or column


def fmt_bytes(n) -> str:
    from attnlab.shapes import format_bytes

    return "—" if n is None or pd.isna(n) else format_bytes(n)
