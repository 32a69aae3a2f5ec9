"""Altair encodings every chart of the lab shares: one colour per implementation (registry order, on every
chart), tooltips as objects, a line per implementation on base-2 log axes, byte axes with binary ticks.
Drawing and caching charts is pages/charts.py; labels with units are tables.label."""

from __future__ import annotations

import colorsys
import math

import altair as alt
import pandas as pd

from attnlab.backends import REGISTRY
from pages.tables import label

# Streamlit's ten categorical colours, but the tenth (a pale grey that read as "disabled" for cudnn_fp8) dark
PALETTE = ["#0068c9", "#83c9ff", "#ff2b2b", "#ffabab", "#29b09d", "#7defa1", "#ff8700", "#ffd16a", "#6d3fc0",
           "#3b4252"]  # today's ten backends, in registry order


def palette(n: int) -> list[str]:
    """`n` distinct colours: PALETTE first, then hues a golden angle apart (an eleventh backend gets its own)."""
    extra = [colorsys.hsv_to_rgb((i * 0.618034) % 1.0, 0.65, 0.8) for i in range(max(0, n - len(PALETTE)))]
    return PALETTE[:n] + ["#" + "".join(f"{round(c * 255):02x}" for c in rgb) for rgb in extra]


def impl_color(df: pd.DataFrame) -> alt.Color:
    """The same colour for an implementation on every chart (registry order); the legend lists those present."""
    names = list(dict.fromkeys(df["implementation"]))
    order = list(REGISTRY) + [n for n in names if n not in REGISTRY]
    return alt.Color("implementation:N", scale=alt.Scale(domain=order, range=palette(len(order))),
                     legend=alt.Legend(values=[n for n in order if n in names]))


def tips(*fields) -> list[alt.Tooltip]:
    """Tooltip fields as alt.Tooltip objects. Given a plain string, Altair finds the matching class
    by hashing every class of the Vega-Lite schema (about 1,400), 5-10 ms per field: pages with
    several charts spent a few tenths of a second of each run on it."""
    return [f if isinstance(f, alt.Tooltip) else alt.Tooltip(f) for f in fields]


EDGE_PX = 10  # room between the frame and the outermost point of a line chart (a zoomable chart clips at its frame)


def log2_room(xs: list) -> list[float]:
    """A base-2 log axis from a quarter step below the first value measured to a quarter step above the last: its
    end points drawn whole inside the frame, not halved by it (zoomable charts clip their marks at the frame)."""
    return [xs[0] / 2 ** 0.25, xs[-1] * 2 ** 0.25]


def line_chart(df: pd.DataFrame, x: str, y: str, color: str = "implementation", log: bool = True,
               title: str | None = None, y_title: str | None = None) -> alt.Chart:
    """One line per implementation; on log axes the x ticks sit on the values measured, base 2."""
    xs = sorted(pd.to_numeric(df[x], errors="coerce").dropna().unique().tolist()) if x in df else []
    if log and len(xs) > 1:
        x_enc = alt.X(f"{x}:Q", scale=alt.Scale(type="log", base=2, nice=False, domain=log2_room(xs)),
                      axis=alt.Axis(values=xs, format=",~g"), title=label(x))
    else:
        x_enc = alt.X(f"{x}:Q", title=label(x))
    tooltip = [c for c in (x, color, y, "wall_ms", "device_ms", "tflops", "status") if c in df.columns]
    return (alt.Chart(df, title=title).mark_line(point=True)
            .encode(x=x_enc, y=alt.Y(f"{y}:Q", scale=alt.Scale(type="log", nice=False, padding=EDGE_PX) if log
                                     else alt.Scale(),
                                     title=y_title or label(y)),
                    color=impl_color(df) if color == "implementation" else f"{color}:N",
                    tooltip=tips(*dict.fromkeys(tooltip)))
            .interactive())


BYTES_LABEL = ("datum.value >= 1099511627776 ? format(datum.value / 1099511627776, '.3~g') + ' TiB' : "
               "datum.value >= 1073741824 ? format(datum.value / 1073741824, '.3~g') + ' GiB' : "
               "datum.value >= 1048576 ? format(datum.value / 1048576, '.3~g') + ' MiB' : "
               "datum.value >= 1024 ? format(datum.value / 1024, '.3~g') + ' KiB' : format(datum.value, '.3~g') + ' B'")


def bytes_axis(title: str, ticks=None) -> alt.Axis:
    """An axis of byte counts labelled in B, KiB, MiB, GiB, TiB rather than raw numbers."""
    return alt.Axis(title=title, labelExpr=BYTES_LABEL, **({"values": ticks} if ticks else {}))


def bytes_y(field: str, title: str, values, log: bool = True) -> alt.Y:
    """A y encoding of byte counts whose ticks sit at round binary sizes (`binary_ticks`), from the first
    tick to the last: Vega's own ticks are powers of ten, which read as 977 KiB or 9.54 MiB."""
    ticks = binary_ticks(values, log)
    if not ticks:
        return alt.Y(f"{field}:Q", scale=alt.Scale(type="log") if log else alt.Scale(), axis=bytes_axis(title))
    scale = alt.Scale(type="log" if log else "linear", domain=[ticks[0], ticks[-1]], nice=False)
    return alt.Y(f"{field}:Q", scale=scale, axis=bytes_axis(title, ticks))


def binary_ticks(values, log: bool = True, most: int = 8) -> list[int]:
    """Ticks at powers of two that bracket `values`: log, every 2^s-th power (s as small as keeps at most
    `most` + 1 ticks); linear, 0 and the multiples of one power of two. Every label is a whole B, KiB, MiB..."""
    v = [float(x) for x in values if x is not None and not pd.isna(x) and x > 0]
    if not v:
        return []
    lo, hi = min(v), max(v)
    if not log:
        step = 2 ** max(0, math.ceil(math.log2(hi / most)))
        return [k * step for k in range(math.ceil(hi / step) + 1)]
    for s in (1, 2, 3, 4, 5, 10, 20):
        a, b = math.floor(math.log2(lo) / s) * s, math.ceil(math.log2(hi) / s) * s
        if b == a:
            b += s
        if (b - a) // s + 1 <= most + 1:
            break
    return [2 ** e for e in range(a, b + 1, s)]
