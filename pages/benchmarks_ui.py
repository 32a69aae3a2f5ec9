"""Page 7's display pieces: timing bars, sweep lines that stay visible when they overlap, and the
sweep and shipped-table sections. No measurement or arithmetic on timings happens here (attnlab.studies.timing_demo)."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from attnlab import shipped
from attnlab.backends import REGISTRY
from attnlab.measure import cost, runs, timing
from attnlab.studies import clocks, ladder, timing_demo
from attnlab.studies.suite import SuiteRun
from pages import charts, common, encodings, sections, tables, waiting

# clocks.NOTE points other pages to "page 7's *Long context on an H200* tab"; on page 7 itself it says this page
CLOCK_NOTE = clocks.NOTE.replace("page 7's *Long context on an H200* tab", "this page's *Long context on an H200* tab")

_num, _text = st.column_config.NumberColumn, st.column_config.TextColumn
HERE = {"compile": _text("compile", width="medium", help="the first call's trace + XLA compile; a program compiled "
                         "before (by another implementation or page) is a cache lookup and says so, naming whose "
                         "program it is: \"cached (sdpa_xla's)\""),
        "wall_spread_pct": _num("wall spread (% of median)", format="%.0f %%"),
        "timing_note": _text("timing note", width="medium")}
FIDELITY = {"shape": _text("shape"), "implementation": _text("implementation"),
            "harness_over_bare": _num("harness ÷ bare loop, TFLOP/s (×)", format="%.3f",
                                       help="the harness's TFLOP/s over the bare loop's (both throughput): above 1, the harness is faster"),
            "harness_tflops": _num("harness TFLOP/s (throughput)", format="%.1f"),
            "bare_tflops": _num("bare loop TFLOP/s", format="%.1f"),
            "harness_device_tflops": _num("harness TFLOP/s (device time)", format="%.1f"),
            "harness_wall_ms": _num("harness wall (ms)", format="%.3f"),
            "harness_throughput_ms": _num("harness throughput (ms)", format="%.3f"),
            "harness_device_ms": _num("harness device (ms)", format="%.3f"),
            "bare_wall_ms": _num("bare loop wall (ms)", format="%.3f"),
            "bare_pipelined_ms": _num("bare loop, many calls one wait (ms)", format="%.3f"),
            "kernels": _text("kernels (GPU time)", width="large")}


OVERLAP = 0.03  # lines closer than this (relative) at every x look like one on a log axis
DASHES = [[1, 0], [6, 3], [2, 2], [8, 2, 2, 2]]


def _shape_scale(df: pd.DataFrame) -> alt.Shape:
    names = list(dict.fromkeys(df["implementation"]))
    order = list(REGISTRY) + [n for n in names if n not in REGISTRY]
    return alt.Shape("implementation:N", scale=alt.Scale(domain=order), legend=None)


def bars(df: pd.DataFrame, what: str = "") -> None:
    """Wall, throughput and TFLOP/s side by side, one colour per implementation (and a row per dtype if several)."""
    ok = df[df["status"] == runs.OK]
    if ok.empty:  # nothing ran (a busy GPU, say): the table's rows say why; no empty charts
        return
    y = "implementation" if ok["dtype"].nunique() == 1 else "run"
    ok = ok.assign(run=ok["implementation"] + " · " + ok["dtype"])
    cols = [c for c in ("wall_ms", "throughput_ms", "device_ms") if ok[c].notna().any()]
    cols.append("device_tflops" if ok["device_tflops"].notna().any() else "tflops")
    per_row = 2 if len(cols) > 3 or y == "run" else len(cols)  # four charts of long labels side by side were cramped
    places = [col for i in range(0, len(cols), per_row) for col in st.columns(per_row)][: len(cols)]
    for col, c in zip(places, cols, strict=True):
        charts.draw(col, bar_chart, ok, y, c, f"{what}{tables.label(c)}", width="stretch")


def bar_chart(ok: pd.DataFrame, y: str, c: str, title: str) -> alt.Chart:
    """Column `c` of each row `y` as a horizontal bar, coloured by implementation."""
    return alt.Chart(ok, title=title).mark_bar().encode(
        y=alt.Y(f"{y}:N", title=None, axis=alt.Axis(labelLimit=220)), x=alt.X(f"{c}:Q", title=tables.label(c)),
        color=encodings.impl_color(ok).legend(None), tooltip=encodings.tips(y, alt.Tooltip(f"{c}:Q", format=".4g")))


def lines(df: pd.DataFrame, x: str, y: str, title: str, dash: str | None = "dtype") -> None:
    """One line per implementation (its colour and marker) × `dash`; lines that lie on top of each other are drawn
    dashed over the other, with hollow markers, and a caption says they overlap."""
    ok = df[df["status"] == runs.OK].dropna(subset=[y])
    if ok.empty:
        st.warning("No cell of this could run here; the reasons are in the table below.")
        return
    dash_of = dash or (lambda _: 0)  # lines are compared within one dtype (one dash) at a time
    pairs = [p for d, part in ok.groupby(dash_of) for p in timing_demo.overlapping(part, x, y, OVERLAP)]
    if dash is None or ok[dash].nunique() == 1:
        on_top = {b for a, b in pairs}
        ok = ok.assign(line=ok["implementation"].map(lambda n: "dashed: overlaps a line" if n in on_top else "solid"))
        dash = "line"
    charts.draw(st, line_chart, ok, x, y, title, dash, width="stretch")
    for a, b in dict.fromkeys(pairs):
        st.caption(f"⚠️ **{a}** and **{b}** overlap: within {OVERLAP:.0%} of each other at every {x}, so one line lies on the "
                   "other (the dashed line and hollow markers let both show; hover for the values).")
    meet = {(a, b): agree for _, part in ok.groupby(dash_of) for a, b, agree in timing_demo.meeting(part, x, y, OVERLAP)}
    if meet:
        st.caption("Where two lines meet (within " + f"{OVERLAP:.0%}), one marker hides the other: "
                   + "; ".join(f"**{a}** and **{b}** at {x} = {', '.join(f'{v:,}' for v in agree)}"
                               for (a, b), agree in meet.items()) + " (hover for the values).")


def line_chart(ok: pd.DataFrame, x: str, y: str, title: str, dash: str) -> alt.Chart:
    """Log-log lines of `lines`, zoomable: a colour and marker per implementation, a dash per value of `dash`."""
    styles = sorted(ok[dash].unique(), key=lambda v: v not in ("solid", "float32"))  # solid first
    xs = sorted(ok[x].unique().tolist())
    return alt.Chart(ok, title=title).mark_line(point=alt.OverlayMarkDef(filled=False, size=70), strokeWidth=2).encode(
        x=alt.X(f"{x}:Q", scale=alt.Scale(type="log", base=2, nice=False, domain=encodings.log2_room(xs)) if len(xs) > 1
                else alt.Scale(), axis=alt.Axis(values=xs, format=",~g"), title=tables.label(x)),
        # the data's own range (Vega's 'nice' log domain ran to whole decades: 0.01-1 ms for points of 0.06-0.16 ms)
        y=alt.Y(f"{y}:Q", scale=alt.Scale(type="log", nice=False, padding=encodings.EDGE_PX), title=tables.label(y),
                axis=alt.Axis(format="~g")),
        color=encodings.impl_color(ok), shape=_shape_scale(ok), detail="dtype:N",
        strokeDash=alt.StrokeDash(f"{dash}:N", title=dash, scale=alt.Scale(domain=styles, range=DASHES[:len(styles)]),
                                  # a legend of line pieces: the dashes are what tells its values apart
                                  legend=None if styles == ["solid"] else alt.Legend(labelLimit=200, symbolType="stroke",
                                                                                     symbolStrokeWidth=2)),
        tooltip=encodings.tips(x, "implementation", "dtype", alt.Tooltip(f"{y}:Q", format=".4g"))).interactive()


def sweep(key: str, field: str, values: list[int], default: list[int], make_shape, what: str, shipped: str,
          names: list[str]) -> None:
    """Controls, a button, the live sweep (both dtypes by default) and the shipped H200 sweep beside it."""
    c1, c2 = st.columns([2, 3])  # the values' picker 3/5 of the page: seven lengths' tags in view (half cut "64")
    chosen = c1.multiselect("implementations", list(REGISTRY), default=names, key=f"{key}_impls")
    picked = c2.multiselect(field, values, default=default, key=f"{key}_values")
    c3, c4 = st.columns(2)
    dtypes = c3.multiselect("dtype", ["float32", "bfloat16"], default=["float32", "bfloat16"], key=f"{key}_dtypes")
    backward = c4.radio("pass", ["forward", "forward+backward"], key=f"{key}_pass", horizontal=True) != "forward"
    shapes = [make_shape(v).replace(dtype=d) for d in dtypes for v in sorted(picked)]
    here, there = st.columns(2)
    df = None
    with here:
        st.markdown("**Measured here**")
        slow = common.on_device(cost.too_slow_plan, tuple(shapes), (len(chosen),) * len(shapes), timing.MIN_CALLS,
                                backward=backward) if shapes and chosen else None
        if slow:
            st.warning(slow)
        elif sections.on_demand(key, f"Run the {what} ({len(shapes) * len(chosen)} cells)",
                              (tuple(shapes), tuple(chosen), backward), timing=(shapes, len(chosen), backward)):
            with waiting.fresh():
                df = sections.sweep(key, shapes, chosen, what.capitalize(), timed=True, accuracy=False, backward=backward)
                y = st.selectbox("y axis", [c for c in ("wall_ms", "throughput_ms", "device_ms", "tflops", "device_tflops")
                                            if df[c].notna().any()] or ["wall_ms"], key=f"{key}_y", format_func=tables.label)
                lines(df, field, y, f"{tables.label(y)} by {field}")
        else:
            st.caption("Not run yet at these settings. Cells anyone measured before come back at once (cached).")
    with there:
        st.markdown("**📦 Shipped: the same sweep on an H200**")
        ship = sections.shipped_frame(shipped)
        if ship.empty:
            st.info("No H200 results ship with this version.")
        else:
            y = st.selectbox("y axis", ["wall_ms", "device_ms", "device_tflops"], key=f"{key}_ship_y",
                             format_func=tables.label, help="wall: what the codelab's benchmark_attention reads "
                             "(median of calls, each waited for); device: the GPU's kernel time (CUPTI).")
            lines(ship, field, y, f"H200: {tables.label(y)} by {field}")
            dtypes_there = ", ".join(sorted(ship["dtype"].unique()))
            st.caption(f"From {ship['shape'].iloc[0]} to {ship['shape'].iloc[-1]}; {dtypes_there} only (the shipped "
                       f"sweep measured no float32 cells). Clock: {clocks.WARM}.")
    if not ship.empty:  # the page's width: one column per implementation
        st.markdown("**📦 The H200's sweep as the codelab prints it: ms per call (wall), one column per implementation, "
                    "each with its spread (IQR)**")
        tables.table(ms_per_call(ship, field))
        st.caption("This sweep and the table of the codelab's shape (tab *At your shape*) are separate runs on the "
                   "H200, minutes apart: where a shape appears in both (B4 T128, say) their wall times differ by about "
                   "their spread (the IQR columns of both), since a call there lasts tens of microseconds, mostly Python "
                   "and the launch. Compare rows within one table.")
    if df is not None:
        cols = [field, "implementation", "dtype", "pass", "wall_ms", "wall_ms_iqr", "throughput_ms", "device_ms",
                "tflops", "device_tflops", "pct_of_peak", "timing_note"]
        sections.results(df, cols, failed=False)
        sections.not_run(df, keys=("implementation", "dtype", field))
        tables.download(df, f"{key}_sweep", "Download this sweep (CSV)")


def ms_per_call(df: pd.DataFrame, field: str) -> pd.DataFrame:
    """The codelab's table: one row per value of `field`, one column per implementation, wall ms per call, each
    followed by its spread (the IQR of its calls: how far apart two runs of one cell may land)."""
    ok = df[df["status"] == runs.OK]
    wall, iqr = (ok.pivot_table(index=field, columns="implementation", values=v, sort=False)
                 for v in ("wall_ms", "wall_ms_iqr"))
    columns = {}
    for n in wall.columns:
        columns[n] = wall[n].round(3)
        if n in iqr.columns:
            columns[f"{n} IQR"] = iqr[n].round(4)
    return pd.DataFrame(columns).rename_axis(field).reset_index()


def long_context() -> None:
    """The shipped long-context sweep (T 2,048 to 16,384), the GPU's ceilings, and the harness's fidelity check."""
    st.header("Long context on an H200")
    st.caption("**What to look at:** cuDNN's fused kernel (sdpa_cudnn) against XLA's (sdpa_xla) and the naive "
               "scores as T grows, and how close the best comes to the measured matmul ceiling. Where two lines lie on "
               "each other (TransformerEngine calls cuDNN's fused attention too), the upper one is dashed and a note "
               "under the chart says so.")
    long = sections.shipped_frame("long_context")
    if long.empty:
        st.info("No H200 results ship with this version, so this tab has nothing to show.")
        return
    c1, c2, c3 = st.columns(3)
    causal = c1.radio("mask", ["full", "causal"], key="p7_long_mask", horizontal=True) == "causal"
    head_dims = sorted(long["head_dim"].unique().tolist())
    head_dim = c2.selectbox("head_dim", head_dims, index=len(head_dims) - 1, key="p7_long_hd")
    part = long[(long["causal"] == causal) & (long["head_dim"] == head_dim)]
    y = c3.selectbox("TFLOP/s from", [c for c in ("device_tflops", "tflops") if part[c].notna().any()] or ["tflops"],
                     key="p7_long_y", format_func={"device_tflops": "device time (CUPTI)",
                                                   "tflops": "throughput time"}.get)
    for col, p in zip(st.columns(2), ["forward", "forward+backward"], strict=True):
        with col:
            lines(part[part["pass"] == p], "q_len", y, f"{p}, {'causal' if causal else 'full'}, H{head_dim}", dash=None)
    st.caption(CLOCK_NOTE)
    sections.not_run(part, keys=("implementation", "pass", "q_len"))
    tables.download(long, "h200_long_context", "Download the long-context table (CSV)")
    h200, found = SuiteRun.load("h200"), ladder.LadderRun.load()
    ceil = h200.ceilings if h200 else None
    peak = h200.environment.peak if h200 else None
    if ceil:
        m1, m2 = st.columns(2)
        m1.metric(f"bf16 matmul {ceil.matmul_n}×{ceil.matmul_n}", f"{ceil.matmul_bf16_tflops:.0f} TFLOP/s",
                  help=f"datasheet: {peak.bf16_tflops} TFLOP/s dense" if peak else None)
        m2.metric("device-to-device copy", f"{ceil.copy_tb_s:.2f} TB/s",
                  help=f"datasheet: {peak.memory_tb_s} TB/s" if peak else None)
        other = found.ceilings.matmul_bf16_tflops if found and found.ceilings else None
        if peak:
            st.caption(f"Datasheet ({peak.source}): {peak.bf16_tflops} bf16 TFLOP/s dense, "
                       f"{peak.memory_tb_s} TB/s. The measured rates are yardsticks from two plain programs "
                       "(one large matmul, timed warm; a copy that reads and writes every byte), not ceilings: a "
                       "kernel that only reads can pass the copy's rate (page 8's cuDNN decode step does), nothing "
                       "passes the datasheet's, and FP8 tensor cores have twice the bf16 peak. Page 5b's roofline "
                       "draws both roofs and says why the measured one is lower"
                       + (f"; it uses its own run's measurement of the same matmul, {other:.0f} TFLOP/s (run-to-run "
                          "variation, not another method)." if other else "."))
    fid = shipped.frame("fidelity")
    if not fid.empty:
        st.markdown("**Fidelity**: the harness against a bare `for` loop at the same shapes "
                    "(harness ÷ bare loop near 1 means the harness adds nothing of its own).")
        first = [c for c in FIDELITY if c in fid]
        st.dataframe(fid[first[:5]], hide_index=True, width="stretch", column_config=FIDELITY, placeholder=tables.MISSING)
        with st.expander("Every column: wall, throughput and device times of both, and the kernels that ran"):
            st.dataframe(fid[first + [c for c in fid.columns if c not in first]], hide_index=True, width="stretch",
                         column_config=FIDELITY, placeholder=tables.MISSING)
        tables.download(fid, "h200_fidelity", "Download the fidelity table (CSV)")
    same = pd.DataFrame(clocks.one_kernel(h200, found))
    if not same.empty:
        st.markdown(f"**One kernel, {len(same)} figures**: cuDNN's forward pass at {clocks.ANCHOR} in every shipped "
                    "table, with how each was timed and the GPU's clock state")
        tables.text_table(same)
        st.caption("Device time counts only the GPU's kernels; throughput time also counts the gaps between calls. At "
                   "this shape the gaps are microseconds against milliseconds of kernel, and the two are read in "
                   "passes of their own (CUPTI's profiled calls first, then the timed loop), so either can come out "
                   "higher: the clock of its pass decides. "
                   "The H200 lowers its clock under sustained load, and kernel time follows it: page 9 reads the "
                   "clock and times both states; the other tables were timed warm (after a 0.2 s warm-up, clock not "
                   "read), each in its own run, so their figures fall where that run's clock was.")
