"""Altair charts handed to Streamlit as Vega-Lite specs, built once per arguments, without st.altair_chart's
process-wide lock."""

from __future__ import annotations

import hashlib
import threading

import altair as alt
import streamlit as st
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


PAD_RIGHT = 16  # px


def vega_spec(chart) -> dict:
    """The Vega-Lite spec of an Altair chart, its data frames under spec['datasets']."""
    _charts.datasets = {}
    try:
        spec = chart.to_dict(validate=False)
        spec["datasets"] = {**(spec.get("datasets") or {}), **_charts.datasets}
        # room on the right for the last x label: centred on a tick short of the end of a 'nice' domain it was
        # drawn half outside the chart (page 7's bars, whose 3.5 ended a domain of 3.6); Vega's default is 5 px
        spec.setdefault("padding", {"left": 5, "top": 5, "bottom": 5, "right": PAD_RIGHT})
    finally:
        _charts.datasets = None
    return spec


_BUILDERS: dict[str, object] = {}


@st.cache_data(max_entries=1024, ttl=6 * 3600, show_spinner=False)
def _spec(name: str, args: tuple, kwargs: dict) -> dict:
    return vega_spec(_BUILDERS[name](*args, **kwargs))


def draw(where, builder, *args, width=None, height=None, **kwargs) -> None:
    """`where.vega_lite_chart` (where: st, a column, a tab) of the chart `builder(*args, **kwargs)`, with
    width= and height= where given; its spec kept per arguments (st.cache_data).

    Building an Altair chart and converting it to Vega-Lite (schema objects copied, encodings inferred,
    data converted to Arrow) was most of a cached page run's Python: page 10's run with its five charts
    took 96 ms, 41 ms with their specs kept (AppTest, an idle CPU; about three times both with a browser
    on the same two cores), and one pass over all pages 0.57 s of CPU, 0.39 s now (scripts/page_cpu.py).
    The spec depends
    only on the builder's arguments, so it is built once per arguments: builder must be a function of
    a pages module (not of a page script, whose functions are made anew at each run) whose chart
    depends on its arguments alone."""
    if not builder.__module__.startswith("pages."):
        raise ValueError(f"charts.draw needs a chart builder of a pages module, not {builder.__module__}.{builder.__qualname__}")
    name = f"{builder.__module__}.{builder.__qualname__}"
    _BUILDERS.setdefault(name, builder)
    size = {k: v for k, v in (("width", width), ("height", height)) if v is not None}
    where.vega_lite_chart(_spec(name, args, kwargs), **size)


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
