"""UI for looking at attention weights (pages 1 and 6): a (T, S) matrix as a table or a heatmap."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from attnlab.shapes import AttentionShape
from attnlab.studies import weights
from pages import encodings, sections, tables, waiting

MASKED_GREY = "#d9d9d9"


def matrix(a: np.ndarray, row: str, col: str) -> pd.DataFrame:
    """A small 2-D array as a table whose index and columns say what they count."""
    return pd.DataFrame(a, index=pd.Index(range(a.shape[0]), name=row), columns=[f"{col}{j}" for j in range(a.shape[1])])


def matrix_table(a: np.ndarray, row: str, col: str) -> None:
    """`matrix` shown with two decimals, by st.dataframe's own number format (a pandas Styler did
    the same at several times the cost of marshalling, for each of page 1's six tables)."""
    df = matrix(a, row, col)
    st.dataframe(df, width="stretch", column_config={c: st.column_config.NumberColumn(format="%.2f") for c in df.columns}, placeholder=tables.MISSING)


def scale_chart(effect: pd.DataFrame, y: str, seq_len: int) -> alt.Chart:
    """Page 1's scale study against head_dim, with and without 1/sqrt(d): the largest weight per row
    (y = "max_weight"), or the row entropy with a uniform row's dashed (y = "entropy")."""
    x = alt.X("head_dim:Q", scale=alt.Scale(type="log", base=2), title="head_dim d (log₂)")
    color = alt.Color("scaling:N", title="scaling", scale=alt.Scale(range=["#1f77b4", "#d62728"]))
    tooltip = encodings.tips("head_dim", "scaling", alt.Tooltip("max_weight:Q", format=".3f"),
                          alt.Tooltip("entropy:Q", format=".3f"))
    if y == "max_weight":
        return alt.Chart(effect, title=alt.Title("largest weight per row", subtitle="mean over rows", anchor="start")
                         ).mark_line(point=True).encode(
            x=x, y=alt.Y("max_weight:Q", title="max weight", scale=alt.Scale(domain=[0, 1])), color=color, tooltip=tooltip)
    title = alt.Title("row entropy (nats)", subtitle=f"dashed: a uniform row, log {seq_len}", anchor="start")
    entropy = alt.Chart(effect, title=title).mark_line(
        point=True).encode(x=x, y=alt.Y("entropy:Q", title="entropy"), color=color, tooltip=tooltip)
    uniform = alt.Chart(effect.drop_duplicates("uniform_entropy")).mark_rule(strokeDash=[4, 4]).encode(
        y="uniform_entropy:Q")
    return entropy + uniform


# Vega's "blues" scheme (vega-scale), the colour stops it interpolates between
BLUES = np.array([[int(h[k:k + 2], 16) for k in (0, 2, 4)] for h in (
    "cfe1f2", "bed8ec", "a8cee5", "8fc1de", "74b2d7", "5ba3cf", "4592c6", "3181bd", "206fb2", "125ca4", "0a4a90")], float)
IMAGE_ABOVE = 16  # a map with more rows or columns than this is drawn as one image, not a rect per cell


def heatmap(m: np.ndarray, title: str, *, allowed: np.ndarray | None = None, vmax: float = 1.0,
            value: str = "weight", size: int = 320) -> alt.Chart:
    """A (T, S) matrix as a heatmap on the colour scale [0, vmax]. Cells the mask hides (`allowed`
    False) are grey; a small matrix also shows each number, and its cells name their values on hover.

    A large one (page 6: three 64 x 64 maps) is painted on the server as one image, on the same axes
    and colour scale: as 4,096 Vega marks a map, the browser spent about 0.8 s of the page's load
    evaluating each cell's encoding with Vega's expression interpreter."""
    masked = np.zeros(m.shape, bool) if allowed is None else ~np.asarray(allowed, bool)
    if max(m.shape) > IMAGE_ABOVE:
        return _image_map(np.asarray(m, float), masked, title, vmax, value, size)
    df = weights.long_frame(m, value)
    seen_df = df[~masked.ravel()]
    x = alt.X("key:O", title="key position (S)")
    y = alt.Y("query:O", title="query position (T)")
    chart = alt.Chart(seen_df, title=title).mark_rect().encode(
        x=x, y=y, color=alt.Color(f"{value}:Q", scale=alt.Scale(scheme="blues", domain=[0, vmax]), title=value),
        tooltip=[alt.Tooltip("query:O"), alt.Tooltip("key:O"), alt.Tooltip(f"{value}:Q", format=".4f")])
    if masked.any():
        hidden = alt.Chart(df[masked.ravel()].assign(masked=True)).mark_rect(color=MASKED_GREY).encode(
            x=x, y=y, tooltip=[alt.Tooltip("query:O"), alt.Tooltip("key:O"), alt.Tooltip("masked:N", title="masked")])
        chart = hidden + chart
    chart += alt.Chart(seen_df).mark_text(baseline="middle", fontSize=10).encode(
        x=x, y=y, text=alt.Text(f"{value}:Q", format=".2f"),
        color=alt.condition(f"datum.{value} > {vmax / 2}", alt.value("white"), alt.value("black")))
    return chart.properties(width=size, height=size)


def colours(m: np.ndarray, masked: np.ndarray, vmax: float) -> np.ndarray:
    """(T, S, 3) bytes: each cell's colour on the blues scale over [0, vmax], masked cells grey."""
    t = np.clip(np.nan_to_num(m / (vmax or 1.0)), 0.0, 1.0) * (len(BLUES) - 1)
    lo = np.minimum(t.astype(int), len(BLUES) - 2)
    rgb = BLUES[lo] + (t - lo)[..., None] * (BLUES[lo + 1] - BLUES[lo])
    rgb[masked] = [int(MASKED_GREY[k:k + 2], 16) for k in (1, 3, 5)]
    return np.rint(rgb).astype(np.uint8)


def png_url(rgb: np.ndarray) -> str:
    """The cells as a PNG data URL, one pixel per cell (12 KB for 64 x 64, 0.4 ms to encode; the chart
    stretches it over the plot without smoothing, so every cell stays a sharp square)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _image_map(m: np.ndarray, masked: np.ndarray, title: str, vmax: float, value: str, size: int) -> alt.Chart:
    """One image spanning the cells' extent on the plot's axes (it scales with the plot, as cells would),
    and an invisible layer that gives the colour legend."""
    t, s = m.shape

    def scale(n: int, **kw) -> alt.Scale:
        return alt.Scale(domain=[-0.5, n - 0.5], nice=False, zero=False, **kw)

    def axis(n: int) -> alt.Axis:
        return alt.Axis(values=list(range(0, n, 8)), grid=False)

    cells = pd.DataFrame({"key": [-0.5], "key_end": [s - 0.5], "query": [-0.5], "query_end": [t - 0.5],
                          "rows": [t], "columns": [s], "url": [png_url(colours(m, masked, vmax))]})
    image = alt.Chart(cells).mark_image(aspect=False, smooth=False).encode(
        x=alt.X("key:Q", scale=scale(s), axis=axis(s), title="key position (S)"), x2="key_end:Q",
        y=alt.Y("query:Q", scale=scale(t, reverse=True), axis=axis(t), title="query position (T)"), y2="query_end:Q",
        url="url:N")
    legend = alt.Chart(pd.DataFrame({value: [0.0, vmax]})).mark_point(opacity=0).encode(
        color=alt.Color(f"{value}:Q", scale=alt.Scale(scheme="blues", domain=[0, vmax]), title=value))
    return (legend + image).properties(width=size, height=size, title=title)


def first_vs_last_section(shape: AttentionShape, first_vs_last: Callable[[AttentionShape], pd.DataFrame]) -> None:
    """Page 6's first-vs-last table at `shape` (`weights.first_vs_last_shape`), computed on opening when small,
    on a button when not, and what its last row says."""
    if not sections.on_demand("p6_fvl", "Compare first and last", shape, auto=sections.small(shape)):
        return
    with waiting.fresh():  # the last shape's table goes as this one is computed
        _first_vs_last(shape, sections.guarded(first_vs_last, shape, what="Naive attention with and without the mask"))


def _first_vs_last(shape: AttentionShape, fvl: pd.DataFrame | None) -> None:
    if fvl is None:
        return
    tables.table(fvl, column_config={"max |full − causal|": st.column_config.NumberColumn(format="%.3g")})
    last = fvl.iloc[-1]
    if shape.q_len == shape.kv_len:
        st.success(f"Last position ({int(last['position'])}): max |full − causal| = {last['max |full − causal|']:.3g}. "
                   "It sees all keys with or without the mask.")
    else:
        st.info(f"T ({shape.q_len}) ≠ S ({shape.kv_len}): with the top-left causal alignment JAX uses, the last query "
                f"sees {int(last['keys seen (causal)'])} of {shape.kv_len} keys, so its output can change too.")
