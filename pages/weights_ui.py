"""UI for looking at attention weights (pages 1 and 6): a (T, S) matrix as a table or a heatmap."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from attnlab import weights

MASKED_GREY = "#d9d9d9"


def matrix(a: np.ndarray, row: str, col: str) -> pd.DataFrame:
    """A small 2-D array as a table whose index and columns say what they count."""
    return pd.DataFrame(a, index=pd.Index(range(a.shape[0]), name=row), columns=[f"{col}{j}" for j in range(a.shape[1])])


def matrix_table(a: np.ndarray, row: str, col: str) -> None:
    """`matrix` shown with two decimals, by st.dataframe's own number format (a pandas Styler did
    the same at several times the cost of marshalling, for each of page 1's six tables)."""
    df = matrix(a, row, col)
    st.dataframe(df, width="stretch", column_config={c: st.column_config.NumberColumn(format="%.2f") for c in df.columns})


def heatmap(m: np.ndarray, title: str, *, allowed: np.ndarray | None = None, vmax: float = 1.0,
            value: str = "weight", size: int = 320) -> alt.Chart:
    """A (T, S) matrix as a heatmap on the colour scale [0, vmax]. Cells the mask hides (`allowed`
    False) are grey; a small matrix also shows each number.

    Painted on a canvas: as SVG a 64 x 64 map is 4,096 elements per layer, and page 6 shows three
    such maps (in Chromium the canvas saves about 0.3 s of a page load for those three). The browser
    evaluates Vega's expressions with an interpreter, per cell: so the masked and the visible cells
    come as two frames (no filter to evaluate), and the tooltip's numbers come rounded (no format)."""
    df = weights.long_frame(m, value)
    masked = np.zeros(len(df), bool) if allowed is None else ~np.asarray(allowed, bool).ravel()
    seen_df = df[~masked].round({value: 6})
    small = max(m.shape) <= 16

    def axis(n: int) -> alt.Axis:
        return alt.Axis() if small else alt.Axis(values=list(range(0, n, 8)))

    x = alt.X("key:O", title="key position (S)", axis=axis(m.shape[1]))
    y = alt.Y("query:O", title="query position (T)", axis=axis(m.shape[0]))
    seen = alt.Chart(seen_df, title=title).mark_rect().encode(
        x=x, y=y, color=alt.Color(f"{value}:Q", scale=alt.Scale(scheme="blues", domain=[0, vmax]), title=value),
        tooltip=[alt.Tooltip("query:O"), alt.Tooltip("key:O"), alt.Tooltip(f"{value}:Q")])
    chart = seen
    if masked.any():
        hidden = alt.Chart(df[masked].assign(masked=True)).mark_rect(color=MASKED_GREY).encode(
            x=x, y=y, tooltip=[alt.Tooltip("query:O"), alt.Tooltip("key:O"), alt.Tooltip("masked:N", title="masked")])
        chart = hidden + seen
    if small:
        chart += alt.Chart(seen_df).mark_text(baseline="middle", fontSize=10).encode(
            x=x, y=y, text=alt.Text(f"{value}:Q", format=".2f"),
            color=alt.condition(f"datum.{value} > {vmax / 2}", alt.value("white"), alt.value("black")))
    return chart.properties(width=size, height=size, usermeta={"embedOptions": {"renderer": "canvas"}})
