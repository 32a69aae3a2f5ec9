"""Charts for page 11 (Across GPUs): the ring grid, bytes against compute, the measured timeline,
speed-up and scaling, each from a table of attnlab.ring_schedule / attnlab.ring_results; and the
compiled programs' order of sends and waits, from the shipped results."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from attnlab import ring_results
from pages import charts, common

KINDS = ["full", "diagonal", "partly skipped", "skipped"]
KIND_COLORS = ["#1f77b4", "#9ecae1", "#fdd0a2", "#eeeeee"]


def grid_frame(schedule: list[dict]) -> pd.DataFrame:
    """The schedule as one row per (step, device), with the words the grid shows."""
    return pd.DataFrame([{"step": r["step"], "device": r["device"], "compute": r["compute"], "work": r["work"],
                          "holds": f"K/V of d{r['kv_from_device']}",
                          "sends": "—" if r["sends_to"] is None else f"→ d{r['sends_to']}",
                          "query chunks": str(list(r["q_chunks"])), "key chunks": str(list(r["kv_chunks"]))}
                         for r in schedule])


def grid(df: pd.DataFrame, step: int) -> alt.Chart:
    """Steps down, devices across; colour = what is computed; the chosen step stands out."""
    base = alt.Chart(df).encode(x=alt.X("device:O", title="device", axis=alt.Axis(labelAngle=0, orient="top")),
                                y=alt.Y("step:O", title="step"))
    chosen = alt.datum.step == step  # the chosen step is outlined; the colours keep their meaning
    cells = base.mark_rect().encode(
        color=alt.Color("compute:N", scale=alt.Scale(domain=KINDS, range=KIND_COLORS), title="computes"),
        stroke=alt.condition(chosen, alt.value("#d62728"), alt.value("white")),
        strokeWidth=alt.condition(chosen, alt.value(4), alt.value(2)),
        tooltip=common.tips("step", "device", "holds", "query chunks", "key chunks", "compute", "work", "sends"))
    ink = alt.condition(alt.datum.compute == "full", alt.value("white"), alt.value("#222"))
    holds = base.mark_text(baseline="bottom", dy=-1, fontSize=11).encode(text="holds:N", color=ink)
    sends = base.mark_text(baseline="top", dy=3, fontSize=11).encode(text="sends:N", color=ink)
    return (cells + holds + sends).properties(height=alt.Step(44), title="Which K/V block each device holds "
                                              "(top) and where it sends it (bottom)")


def work_bars(df: pd.DataFrame) -> alt.Chart:
    totals = df.groupby("device", as_index=False)["work"].sum()
    return (alt.Chart(totals, title="Work per device").mark_bar()
            .encode(x=alt.X("device:O", axis=alt.Axis(labelAngle=0)),
                    y=alt.Y("work:Q", title="work (full blocks)"), tooltip=common.tips("device", "work"))
            .properties(height=44 * df["step"].nunique()))


def costs_chart(df: pd.DataFrame, hiding_T: int) -> alt.Chart:
    long = df.melt(id_vars=["T"], value_vars=["transfer_ms", "compute_ms"], var_name="per step", value_name="ms")
    long["per step"] = long["per step"].map({"transfer_ms": "send K/V (transfer)", "compute_ms": "attention (compute)"})
    lines = (alt.Chart(long).mark_line(point=True)
             .encode(x=alt.X("T:Q", scale=alt.Scale(type="log", base=2), title="sequence length T = S",
                             axis=alt.Axis(format=",~g")),
                     y=alt.Y("ms:Q", scale=alt.Scale(type="log"), title="ms per step (busiest device)"),
                     color=alt.Color("per step:N"), tooltip=common.tips("T", "per step", alt.Tooltip("ms:Q", format=".4g"))))
    rule = alt.Chart(pd.DataFrame({"T": [hiding_T]})).mark_rule(strokeDash=[4, 4]).encode(x="T:Q")
    return lines + rule


def timeline_chart(df: pd.DataFrame) -> alt.Chart:
    return (alt.Chart(df).mark_bar(stroke="white")
            .encode(x=alt.X("start_ms:Q", title="ms since the ring started"), x2="end_ms:Q",
                    y=alt.Y("part:N", title=None), color=alt.Color("part:N", title=None),
                    row=alt.Row("schedule:N", title=None,  # row names written across, never cut off
                                header=alt.Header(labelAngle=0, labelAlign="left", labelLimit=180)),
                    tooltip=common.tips("schedule", "step", "part", alt.Tooltip("start_ms:Q", format=".4f"),
                             alt.Tooltip("end_ms:Q", format=".4f")))
            .properties(height=70))


def speedup_chart(df: pd.DataFrame, y: str = "speedup") -> alt.Chart:
    """Speed-up (or efficiency) against T, one line per variant, one panel per mask; the rule is 'as fast as
    one GPU' (1×) or perfect scaling (efficiency 1)."""
    data = df.rename(columns={"variant": "implementation"})
    line = (alt.Chart().mark_line(point=True)
            .encode(x=alt.X("T:Q", scale=alt.Scale(type="log", base=2), axis=alt.Axis(format=",~g"),
                            title="sequence length T"),
                    y=alt.Y(f"{y}:Q", title="speed-up vs one GPU (×)" if y == "speedup" else "efficiency"),
                    color=common.impl_color(data), tooltip=common.tips("T", "implementation", "ms", "one_device_ms", y)))
    rule = alt.Chart().mark_rule(strokeDash=[4, 4]).encode(y=alt.datum(1))
    return (alt.layer(line, rule, data=data).facet(column=alt.Column("mask:N", title=None))
            .configure_legend(labelLimit=360, orient="bottom", columns=2))  # seven variants: two columns fit


def scaling_chart(df: pd.DataFrame) -> alt.Chart:
    """Efficiency by P, one colour per variant, one marker shape per mask (a line needs two P: with
    one P measured the markers alone show it)."""
    data = df.rename(columns={"variant": "implementation"})
    return (alt.Chart(data).mark_line(point=alt.OverlayMarkDef(size=80, filled=True))
            .encode(x=alt.X("P:O", title="GPUs (P)", axis=alt.Axis(labelAngle=0)),
                    y=alt.Y("efficiency:Q", title="efficiency (speed-up / P)", scale=alt.Scale(domain=[0, 1.1])),
                    color=common.impl_color(data), strokeDash=alt.StrokeDash("mask:N", title="mask"),
                    shape=alt.Shape("mask:N", title="mask"),
                    tooltip=common.tips("P", "mask", "implementation", "T", "speedup", "efficiency")))


def compiled_order(data: dict) -> None:
    """The shipped programs' order of sends, waits and attention calls, and why the ring is fenced."""
    order = ring_results.program_order(data)
    if order.empty:
        return
    with st.expander("What the compiler scheduled: where each program waits for its send"):
        st.markdown(
            "Issuing the send before the attention is not enough: XLA's scheduler decides where the program "
            "*waits* for it. In the causal ring it put both waits before the first attention call, so the GPU sat "
            "idle for the whole transfer. The lab's ring adds a **fence** (`jax.lax.optimization_barrier` over the "
            "step's result and the block being received): the received block is usable only once the step's "
            "attention is done, so the wait moves after it. Compare the causal rows with and without the fence, "
            "and the speed-ups below.")
        common.text_table(order)


def same_program_notes(data: dict) -> None:
    """Where fenced and unfenced compiled alike, their measured gap is noise: say so under the speed-ups."""
    for m in ring_results.same_programs(data):
        st.caption(f"In the {m.replace('_', '-')} ring the fence changes nothing: both compiled to the same order of "
                   "sends, waits and attention calls (the table above), so the gap between the fenced and the "
                   "unfenced line is run-to-run noise, a measure of how far to trust one run.")


def scaling(scale: pd.DataFrame, missing: list[int]) -> None:
    """Efficiency against P as a chart once two ring sizes ship; one ring size as a table (a chart of one
    column of points says less than the numbers); which sizes were not measured."""
    if not scale.empty and scale["P"].nunique() > 1:
        charts.draw(st, scaling_chart, scale, width="stretch")
        st.caption("Efficiency at the longest sequence each file measured (in the tooltip).")
    elif not scale.empty:
        common.table(scale)
        st.caption(f"Only {scale['P'].iloc[0]} GPUs are measured so far, so there is no scaling line to draw yet: "
                   "efficiency (speed-up / P) at the longest sequence measured.")
    if missing:
        st.info(f"Not measured (no results ship): {', '.join(f'{n} GPUs' for n in missing)}.")
