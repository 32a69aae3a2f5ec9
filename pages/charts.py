"""Altair charts handed to Streamlit as Vega-Lite specs, without st.altair_chart's process-wide lock."""

from __future__ import annotations

import hashlib
import threading

import altair as alt
from streamlit import dataframe_util

# st.altair_chart converts every chart of every session under one lock (it switches Altair's global
# data transformer and theme for the call) and validates the spec against the Vega-Lite schema. With
# a class on one server, charts queued on that lock for seconds (scripts/capacity.py --sample). Here
# the transformer and theme are set once for the process, the datasets go to a per-thread dict, and
# the spec is not validated again (the tests render every chart): so no page calls st.altair_chart.
_charts = threading.local()


def _to_named_dataset(data) -> dict:
    """Altair data transformer: the data as Arrow bytes, named by their hash (as Streamlit names
    them: a chart whose data changed gets a new name, so the browser redraws it)."""
    datasets = getattr(_charts, "datasets", None)
    if datasets is None:  # an Altair conversion outside vega_spec (this transformer is process-wide): inline values
        return alt.to_values(data)
    arrow = dataframe_util.convert_anything_to_arrow_bytes(data)
    name = "data-" + hashlib.md5(arrow, usedforsecurity=False).hexdigest()
    datasets[name] = arrow
    return {"name": name}


# Altair also validates every schema object as it is made (its "debug mode"): 560 validations in one
# pass over the pages. The charts are fixed code, exercised by every page test, so that is off too.
alt.utils.schemapi.disable_debug_mode()
alt.data_transformers.register("attnlab_named", _to_named_dataset)
alt.data_transformers.enable("attnlab_named")
alt.theme.enable("none")  # Streamlit's own chart theme applies (as st.altair_chart does)


def vega_spec(chart) -> dict:
    """The Vega-Lite spec of an Altair chart, its data frames under spec['datasets']."""
    _charts.datasets = {}
    try:
        spec = chart.to_dict(validate=False)
        spec["datasets"] = {**(spec.get("datasets") or {}), **_charts.datasets}
    finally:
        _charts.datasets = None
    return spec


def altair(where, chart, **kw) -> None:
    """`where.altair_chart(chart, **kw)` (where: st, a column, a tab) without the lock; see above."""
    where.vega_lite_chart(vega_spec(chart), **kw)


def piles(df, x: str, y: str, within: float = 0.1) -> list:
    """Groups of rows a log-log scatter draws on top of one another: x within a hundredth and y within
    `within` (a tenth) of the next; each group a frame, highest y first. Captions name them, since a
    marker on top hides the ones beneath."""
    out = []
    rows = df.sort_values(x)
    while len(rows):
        column = rows[rows[x] <= rows[x].iloc[0] * 1.01].sort_values(y, ascending=False)
        rows = rows.drop(column.index)
        group = [column.index[0]]
        for prev, i in zip(column.index, column.index[1:], strict=False):
            if column.at[prev, y] > (1 + within) * column.at[i, y]:
                out.append(group)
                group = []
            group.append(i)
        out.append(group)
    return [df.loc[g] for g in out if len(g) > 1]
