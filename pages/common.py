"""Shared UI for every page: the shape sidebar (kept in the URL), cached calls into attnlab,
availability badges, and table + chart + CSV download. No attention math lives here.
"""

from __future__ import annotations

import dataclasses
import os

import altair as alt
import pandas as pd
import streamlit as st

from attnlab import device, presets, runs
from attnlab.backend import streamed_bytes
from attnlab.backends import REGISTRY
from attnlab.queue import DEVICE
from attnlab.shapes import FIELD_MAX, INT_FIELDS, AttentionShape

SHAPE_KEYS = [f.name for f in dataclasses.fields(AttentionShape)]
LABELS = {"batch": "batch (B)", "q_len": "q_len (T)", "kv_len": "kv_len (S)", "heads": "heads (N)",
          "kv_heads": "kv_heads (K)", "head_dim": "head_dim (H)"}


# --------------------------------------------------------------------------------------------
# cached calls into the run layer: a result is computed once per shape and shared by everyone
# --------------------------------------------------------------------------------------------
# ATTNLAB_PERSIST_RESULTS=1 (the GKE image sets it) also keeps results on disk across restarts.
PERSIST = "disk" if os.environ.get("ATTNLAB_PERSIST_RESULTS") == "1" else None
CACHE = dict(max_entries=1024, show_spinner=False, persist=PERSIST, ttl=None if PERSIST else 12 * 3600)


@st.cache_resource(show_spinner=False)
def device_info_static() -> device.DeviceInfo:
    return device.info()


def device_info() -> device.DeviceInfo:
    """Device facts with memory read now (cheap)."""
    return device.info()


@st.cache_data(**CACHE)
def run(shape: AttentionShape, names: tuple[str, ...], accuracy: bool = True, timed: bool = False,
        program: bool = False, backward: bool = False, budget_s: float | None = None) -> list[runs.Result]:
    """runs.run, cached: every learner who asks for the same thing shares one result. `budget_s`: a
    shorter timing (seconds per implementation), for timings a page takes without being asked."""
    kw = {} if budget_s is None else {"budget_s": budget_s}
    return runs.run(shape, list(names), accuracy=accuracy, timed=timed, program=program, backward=backward, **kw)


def frame(shape: AttentionShape, names, **parts) -> pd.DataFrame:
    """`run` as a table in the run layer's vocabulary (runs.COLUMNS), minus results that failed to
    be admitted for a passing reason (a busy GPU is not cached: the next visit tries again)."""
    results = run(shape, tuple(names), **parts)
    if any(r.status == runs.BUSY for r in results):
        run.clear()  # a busy queue is not an answer worth keeping
    return runs.to_frame(results)


@st.cache_data(max_entries=256, ttl=12 * 3600, show_spinner=False)
def unmet(shape: AttentionShape) -> dict[str, str | None]:
    """For every backend, None when it can run `shape` here, else why not."""
    info = device.info()
    return {n: b.unmet(shape, info) for n, b in REGISTRY.items()}


def runnable(shape: AttentionShape, names=None) -> list[str]:
    return [n for n in (names or REGISTRY) if unmet(shape)[n] is None]


# --------------------------------------------------------------------------------------------
# the shape: sidebar widgets <-> URL query parameters
# --------------------------------------------------------------------------------------------
def _url_shape_params() -> dict[str, str]:
    return {k: v for k, v in st.query_params.to_dict().items() if k in SHAPE_KEYS}


MASK_KEYS = ("window", "kv_lengths")  # text widgets: "" for none, else numbers separated by commas


def _widget_value(key: str, value):
    if key in MASK_KEYS:
        return ",".join(map(str, value)) if value else ""
    return value


def _seed_widgets(shape: AttentionShape) -> None:
    st.session_state["shape_values"] = {k: _widget_value(k, getattr(shape, k)) for k in SHAPE_KEYS}
    for k in SHAPE_KEYS:
        st.session_state[f"shape_{k}"] = _widget_value(k, getattr(shape, k))


def _reset() -> None:
    """Back to the codelab's shape (a callback: it runs before the widgets are drawn)."""
    _seed_widgets(AttentionShape())
    st.session_state["shape_url_problems"] = []


def _widgets_changed() -> None:
    st.session_state["shape_values"] = {k: st.session_state[f"shape_{k}"] for k in SHAPE_KEYS}
    st.session_state["shape_url_problems"] = []  # the learner took over from a bad URL


CUSTOM = "— custom —"


def _apply_preset() -> None:
    """A model's heads, kv_heads and head_dim into the widgets (a callback: before they are drawn);
    the rest of the shape stays, and the URL then carries the new values like any other change."""
    ss = st.session_state
    preset = presets.BY_NAME.get(ss.get("shape_preset"))
    if preset is not None:
        for k, v in (("heads", preset.heads), ("kv_heads", preset.kv_heads), ("head_dim", preset.head_dim)):
            ss[f"shape_{k}"] = v
        _widgets_changed()


def _preset_selectbox(sb) -> None:
    """'model preset': back to custom once the heads no longer match the chosen model; its source shown."""
    ss = st.session_state
    chosen = presets.BY_NAME.get(ss.get("shape_preset"))
    if chosen and (ss["shape_heads"], ss["shape_kv_heads"], ss["shape_head_dim"]) != (
            chosen.heads, chosen.kv_heads, chosen.head_dim):
        ss["shape_preset"], chosen = CUSTOM, None
    sb.selectbox("model preset", [CUSTOM, *presets.BY_NAME], key="shape_preset", on_change=_apply_preset,
                 help="Sets heads, kv_heads and head_dim to a published model's; the rest of the shape stays.")
    if chosen:
        sb.caption(f"{chosen.describe()}. Source: {chosen.source}." + (f" {chosen.note}." if chosen.note else ""))


def shape_sidebar() -> AttentionShape | None:
    """Render the shape controls in the sidebar; return the valid shape, or None (messages shown).

    The URL is the source of truth when it names a shape (a shared link, a reload); otherwise the
    session's last shape is written back into the URL, so every page can be shared as a link.
    """
    ss = st.session_state
    url = _url_shape_params()
    if "shape_batch" not in ss or (url and url != ss.get("shape_url_seen")):
        shape, problems = AttentionShape.from_query_params(url)
        _seed_widgets(shape or AttentionShape())
        ss["shape_url_problems"] = problems
        ss["shape_url_seen"] = url
    else:
        # Streamlit resets widget state when a page change interrupts a run, and these widgets then
        # come back at their defaults (every field 1); the shape itself lives in a plain key.
        for k, v in ss.get("shape_values", {}).items():
            ss[f"shape_{k}"] = v

    sb = st.sidebar
    sb.markdown("### Shape")
    _preset_selectbox(sb)
    c1, c2 = sb.columns(2)
    for i, f in enumerate(INT_FIELDS):
        (c1 if i % 2 == 0 else c2).number_input(
            LABELS[f], min_value=1, max_value=FIELD_MAX[f], step=1, key=f"shape_{f}", on_change=_widgets_changed)
    sb.selectbox("dtype", ["float32", "bfloat16", "float16"], key="shape_dtype", on_change=_widgets_changed)
    sb.toggle("causal", key="shape_causal", on_change=_widgets_changed)
    with sb.expander("More masks", expanded=bool(ss.get("shape_window") or ss.get("shape_kv_lengths"))):
        st.text_input("sliding window: left, right", key="shape_window", on_change=_widgets_changed,
                      placeholder="e.g. 256,0", help="Query i sees keys i-left .. i+right "
                      "(jax.nn.dot_product_attention's local_window_size). Empty: no window.")
        st.text_input("padding: real keys per sequence", key="shape_kv_lengths", on_change=_widgets_changed,
                      placeholder="e.g. 100 or 100,64", help="One number for every sequence, or one per sequence "
                      "of the batch (key_value_seq_lengths). Empty: no padding.")
    sb.button("Reset to the codelab's shape", use_container_width=True, key="shape_reset", on_click=_reset)

    if ss.get("shape_url_problems"):
        for p in ss["shape_url_problems"]:
            st.error(f"From the URL: {literal(p)}")
        st.info("Fix the values in the sidebar (or use Reset); nothing is computed until the shape is valid.")
        return None
    typed = {k: str(ss[f"shape_{k}"]).lower() if isinstance(ss[f"shape_{k}"], bool) else str(ss[f"shape_{k}"])
             for k in SHAPE_KEYS}
    shape, problems = AttentionShape.from_query_params(typed)
    if problems:
        for p in problems:
            st.error(literal(p))
        return None
    too_big = DEVICE.check(streamed_bytes(shape), 0)
    if too_big:
        st.error(f"Even a fused kernel at {shape.describe()} {too_big}. Make batch, q_len, kv_len or heads smaller.")
        return None
    wanted = shape.to_query_params()
    if wanted != url:
        for k in SHAPE_KEYS:
            if k in st.query_params and k not in wanted:
                del st.query_params[k]
        st.query_params.update(wanted)
        ss["shape_url_seen"] = wanted
    return shape


def literal(text: str) -> str:
    """Text a learner typed (or a link carried), shown as inline code: never Markdown, never a link."""
    return "`" + text.replace("`", "'").replace("\n", " ") + "`"


def device_badge() -> None:
    info = device_info_static()
    if info.backend == "gpu":
        st.sidebar.success(f"**{info.device_kind}** · compute capability {info.compute_capability_str}")
    else:
        st.sidebar.info(f"**{info.backend.upper()} backend** ({info.device_kind}). GPU-only paths say so "
                        "on each page; shipped H200 results are shown where it helps.")


def current_shape() -> AttentionShape | None:
    """The shape app.py validated for this run (None when invalid: the page computes nothing)."""
    return st.session_state.get("shape")


def require_shape() -> AttentionShape:
    shape = current_shape()
    if shape is None:
        st.warning("The shape in the sidebar is not valid, so this page computes nothing. See the messages above.")
        st.stop()
    return shape


# --------------------------------------------------------------------------------------------
# small display helpers
# --------------------------------------------------------------------------------------------
def requirements_table(shape: AttentionShape, info: device.DeviceInfo, names=None) -> pd.DataFrame:
    """Every declared requirement of `names` (default: all backends) at `shape` on this device."""
    return pd.DataFrame([{"implementation": n, "requirement": r.what, "needed": r.needed, "here": r.here,
                          "met": "yes" if r.met else "no"}
                         for n in (names or REGISTRY) for r in REGISTRY[n].requirements(shape, info)])


def support_table(shape: AttentionShape) -> pd.DataFrame:
    return pd.DataFrame([{"implementation": n, "label": REGISTRY[n].label, "runs here": "no" if why else "yes",
                          "why not": why or ""} for n, why in unmet(shape).items()])


# One label, unit and format per measurement column, on every page's tables.
_num = st.column_config.NumberColumn
_text = st.column_config.TextColumn
COLUMNS = {
    "compile_ms": _num("compile (ms)", format="%.1f"),
    "wall_ms": _num("wall (ms)", format="%.4f", help="perf_counter around one call + block_until_ready, median"),
    "wall_ms_iqr": _num("wall spread, IQR (ms)", format="%.4f"),
    "throughput_ms": _num("throughput (ms)", format="%.4f", help="many calls dispatched, one wait, per call"),
    "device_ms": _num("device (ms)", format="%.4f", help="the GPU's own kernel time per call (CUPTI)"),
    "kernel_count": _num("kernels", format="%d"),
    "tflops": _num("TFLOP/s", format="%.2f"),
    "device_tflops": _num("device TFLOP/s", format="%.2f"),
    "pct_of_peak": _num("% of peak", format="%.1f"),
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
_TEXT_NONE = "—"


def table(data, *, column_config: dict | None = None, hide_index: bool = True, width="stretch",
          drop_empty: bool = True, **kwargs) -> None:
    """st.dataframe with the shared column labels; columns with no value in any row are left out
    (e.g. device time on a CPU, which the page explains), and missing text reads '—'."""
    if isinstance(data, pd.DataFrame):
        df = data
        if drop_empty and len(df):
            df = df[[c for c in df.columns if not df[c].isna().all()]]
        text = [c for c in df.columns if df[c].dtype == object and df[c].dropna().map(type).eq(str).all()]
        if text:
            df = df.assign(**{c: df[c].where(df[c].notna(), _TEXT_NONE) for c in text})
        data = df
        config = {c: v for c, v in COLUMNS.items() if c in df.columns}
    else:
        config = {}
    st.dataframe(data, hide_index=hide_index, width=width, column_config={**config, **(column_config or {})}, **kwargs)


def download(df: pd.DataFrame, name: str, label: str = "Download CSV") -> None:
    st.download_button(label, df.to_csv(index=False).encode(), file_name=f"{name}.csv", mime="text/csv", key=f"dl_{name}")


def impl_color(df: pd.DataFrame) -> alt.Color:
    """The same colour for an implementation on every chart (registry order); the legend lists those present."""
    names = list(dict.fromkeys(df["implementation"]))
    order = list(REGISTRY) + [n for n in names if n not in REGISTRY]
    return alt.Color("implementation:N", scale=alt.Scale(domain=order),
                     legend=alt.Legend(values=[n for n in order if n in names]))


def label(column: str) -> str:
    """A measurement column's label with its unit ('device_ms' -> 'device (ms)')."""
    config = COLUMNS.get(column)
    return (config or {}).get("label") or column


def line_chart(df: pd.DataFrame, x: str, y: str, color: str = "implementation", log: bool = True,
               title: str | None = None, y_title: str | None = None) -> alt.Chart:
    """One line per implementation; on log axes the x ticks sit on the values measured, base 2."""
    xs = sorted(pd.to_numeric(df[x], errors="coerce").dropna().unique().tolist()) if x in df else []
    if log and len(xs) > 1:
        x_enc = alt.X(f"{x}:Q", scale=alt.Scale(type="log", base=2, nice=False, domain=[xs[0], xs[-1]]),
                      axis=alt.Axis(values=xs, format=",~g"), title=label(x))
    else:
        x_enc = alt.X(f"{x}:Q", title=label(x))
    tooltip = [c for c in (x, color, y, "wall_ms", "device_ms", "tflops", "status") if c in df.columns]
    return (alt.Chart(df, title=title).mark_line(point=True)
            .encode(x=x_enc, y=alt.Y(f"{y}:Q", scale=alt.Scale(type="log") if log else alt.Scale(),
                                     title=y_title or label(y)),
                    color=impl_color(df) if color == "implementation" else f"{color}:N",
                    tooltip=list(dict.fromkeys(tooltip)))
            .interactive())


BYTES_LABEL = ("datum.value >= 1073741824 ? format(datum.value / 1073741824, '.3~g') + ' GiB' : "
               "datum.value >= 1048576 ? format(datum.value / 1048576, '.3~g') + ' MiB' : "
               "datum.value >= 1024 ? format(datum.value / 1024, '.3~g') + ' KiB' : format(datum.value, '.3~g') + ' B'")


def bytes_axis(title: str) -> alt.Axis:
    """An axis of byte counts labelled in B, KiB, MiB, GiB rather than raw numbers."""
    return alt.Axis(title=title, labelExpr=BYTES_LABEL)


def fmt_bytes(n) -> str:
    from attnlab.shapes import format_bytes

    return "—" if n is None or pd.isna(n) else format_bytes(n)
