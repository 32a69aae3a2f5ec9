"""Page 10 (Across GPUs, pages/p10_across_gpus.py): charts of the ring grid, bytes against compute, the
measured timeline, speed-up and scaling, each from a table of attnlab.studies.ring_schedule / attnlab.studies.ring_results;
the compiled programs' order of sends and waits; the bytes-per-step model and the shipped 2 × H200 results
as sections of the page's tabs."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from attnlab.studies import ring_results
from attnlab.studies import ring_schedule as rs
from attnlab.studies.suite import SuiteRun
from pages import charts, encodings, tables

LAYOUTS = {"zigzag": "balanced (zig-zag)", "contiguous": "contiguous"}
KINDS = ["full", "diagonal", "partly skipped", "skipped"]
KIND_COLORS = ["#1f77b4", "#9ecae1", "#f58518", "#ffffff"]  # partly skipped orange; skipped white, outlined
# the speed-up chart's variants: saturated, one hue each (the implementation palette's extra hues read pale)
VARIANT_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                  "#bcbd22", "#7f7f7f", "#393b79", "#637939"]


def grid_frame(schedule: list[rs.RingStep]) -> pd.DataFrame:
    """The schedule as one row per (step, device), with the words the grid shows."""
    return pd.DataFrame([{"step": r.step, "device": r.device, "compute": r.compute, "work": r.work,
                          "holds": f"K/V of d{r.kv_from_device}",
                          "sends": "—" if r.sends_to is None else f"→ d{r.sends_to}",
                          "query chunks": str(list(r.q_chunks)), "key chunks": str(list(r.kv_chunks))}
                         for r in schedule])


def grid(df: pd.DataFrame, step: int) -> alt.Chart:
    """Steps down, devices across; colour = what is computed; the chosen step stands out."""
    base = alt.Chart(df).encode(x=alt.X("device:O", title="device", axis=alt.Axis(labelAngle=0, orient="top")),
                                y=alt.Y("step:O", title="step"))
    chosen = alt.datum.step == step  # the chosen step is outlined; the colours keep their meaning
    cells = base.mark_rect().encode(
        color=alt.Color("compute:N", scale=alt.Scale(domain=KINDS, range=KIND_COLORS), title="computes",
                        legend=alt.Legend(symbolType="square", symbolStrokeColor="#555", symbolStrokeWidth=1)),
        stroke=alt.condition(chosen, alt.value("#d62728"), alt.value("#bbb")),
        strokeWidth=alt.condition(chosen, alt.value(4), alt.value(2)),
        tooltip=encodings.tips("step", "device", "holds", "query chunks", "key chunks", "compute", "work", "sends"))
    ink = alt.condition(alt.datum.compute == "full", alt.value("white"), alt.value("#222"))
    holds = base.mark_text(baseline="bottom", dy=-1, fontSize=11).encode(text="holds:N", color=ink)
    sends = base.mark_text(baseline="top", dy=3, fontSize=11).encode(text="sends:N", color=ink)
    return (cells + holds + sends).properties(height=alt.Step(44), title="In each cell: the K/V block the device "
                                              "holds at that step, and under it where it sends it next")


def work_bars(df: pd.DataFrame) -> alt.Chart:
    totals = df.groupby("device", as_index=False)["work"].sum()
    return (alt.Chart(totals, title="Work per device").mark_bar()
            .encode(x=alt.X("device:O", axis=alt.Axis(labelAngle=0)),
                    y=alt.Y("work:Q", title="work (full blocks)"), tooltip=encodings.tips("device", "work"))
            .properties(height=44 * df["step"].nunique()))


def costs_chart(df: pd.DataFrame, hiding_T: int) -> alt.Chart:
    long = df.melt(id_vars=["T"], value_vars=["transfer_ms", "compute_ms"], var_name="per step", value_name="ms")
    long["per step"] = long["per step"].map({"transfer_ms": "send K/V (transfer)", "compute_ms": "attention (compute)"})
    lines = (alt.Chart(long).mark_line(point=True)
             .encode(x=alt.X("T:Q", scale=alt.Scale(type="log", base=2), title="sequence length T = S",
                             axis=alt.Axis(format=",~g")),
                     y=alt.Y("ms:Q", scale=alt.Scale(type="log"), title="ms per step (busiest device)"),
                     color=alt.Color("per step:N"), tooltip=encodings.tips("T", "per step", alt.Tooltip("ms:Q", format=".4g"))))
    rule = alt.Chart(pd.DataFrame({"T": [hiding_T]})).mark_rule(strokeDash=[4, 4]).encode(x="T:Q")
    return lines + rule


def timeline_chart(df: pd.DataFrame) -> alt.Chart:
    return (alt.Chart(df).mark_bar(stroke="white")
            .encode(x=alt.X("start_ms:Q", title="ms since the ring started"), x2="end_ms:Q",
                    y=alt.Y("part:N", title=None), color=alt.Color("part:N", title=None),
                    row=alt.Row("schedule:N", title=None,  # row names written across, never cut off
                                header=alt.Header(labelAngle=0, labelAlign="left", labelLimit=180)),
                    tooltip=encodings.tips("schedule", "step", "part", alt.Tooltip("start_ms:Q", format=".4f"),
                             alt.Tooltip("end_ms:Q", format=".4f")))
            .properties(height=70))


def speedup_chart(df: pd.DataFrame, y: str = "speedup") -> alt.Chart:
    """Speed-up (or efficiency) against T, one line per variant, one panel per mask; the rule is 'as fast as
    one GPU' (1×) or perfect scaling (efficiency 1)."""
    data = df.rename(columns={"variant": "implementation"})
    names = list(dict.fromkeys(list(ring_results.VARIANTS.values()) + list(data["implementation"])))
    color = alt.Color("implementation:N", title=None, scale=alt.Scale(domain=names, range=VARIANT_COLORS[:len(names)]))
    line = (alt.Chart().mark_line(point=alt.OverlayMarkDef(filled=True, size=60), strokeWidth=2.5)
            .encode(x=alt.X("T:Q", scale=alt.Scale(type="log", base=2), axis=alt.Axis(format=",~g"),
                            title="sequence length T"),
                    y=alt.Y(f"{y}:Q", title="speed-up vs one GPU (×)" if y == "speedup" else "efficiency"),
                    color=color, tooltip=encodings.tips("T", "implementation", "ms", "one_device_ms", y)))
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
                    color=encodings.impl_color(data), strokeDash=alt.StrokeDash("mask:N", title="mask"),
                    shape=alt.Shape("mask:N", title="mask"),
                    tooltip=encodings.tips("P", "mask", "implementation", "T", "speedup", "efficiency")))


def compiled_order(run: ring_results.RingRun) -> None:
    """The shipped programs' order of sends, waits and attention calls, and why the ring is fenced."""
    order = ring_results.program_order(run)
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
        tables.text_table(order)


def same_program_notes(run: ring_results.RingRun) -> None:
    """Where fenced and unfenced compiled alike, their measured gap is noise: say so under the speed-ups."""
    for m in ring_results.same_programs(run):
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
        tables.table(scale)
        st.caption(f"Only {scale['P'].iloc[0]} GPUs are measured so far, so there is no scaling line to draw yet: "
                   "efficiency (speed-up / P) at the longest sequence measured.")
    if missing:
        st.info(f"Not measured (no results ship): {', '.join(f'{n} GPUs' for n in missing)}.")


def costs(shape, run: ring_results.RingRun | None, P: int, causal: bool, layout: str) -> None:
    """Bytes sent against FLOPs computed per ring step over T (a model at measured rates), where compute
    hides the send, and the table of it."""
    rates = ring_results.rates(run, SuiteRun.load("h200"), shape.dtype)
    st.write(
        f"Each step, every GPU sends its K and V blocks, 2·B·(S/P)·K·H·itemsize bytes, while it computes one block "
        f"of attention, about 4·B·(T/P)·(S/P)·N·H FLOPs (with a causal mask, a block on the diagonal half of that "
        f"and a block wholly above it none). The bytes grow with T, the FLOPs with T², so past some "
        f"length the compute hides the transfer. Here at the sidebar's B={shape.batch}, N={shape.heads}, "
        f"K={shape.kv_heads}, H={shape.head_dim}, {shape.dtype}, {'causal' if causal else 'not causal'}, "
        f"{LAYOUTS[layout]}, on P={P} GPUs, with T = S:"
    )
    if rates.flops_per_s is None:
        st.warning("No measured attention rate ships with this version, so the crossover cannot be drawn.")
    else:
        lengths = [2**k for k in range(10, 21)]
        table = rs.step_costs(shape.batch, shape.heads, shape.kv_heads, shape.head_dim, shape.itemsize, P,
                              lengths, rates.flops_per_s, rates.bytes_per_s, causal=causal, layout=layout)
        hiding_T = rs.hiding_length(shape.heads, shape.kv_heads, shape.itemsize, P, rates.flops_per_s,
                                    rates.bytes_per_s, causal=causal, layout=layout)
        m1, m2, m3 = st.columns(3)
        m1.metric("sequence length where compute hides the send", f"T ≈ {hiding_T:,}",
                  help="the dashed line: the shortest T with the busiest GPU's compute per step ≥ its send")
        m2.metric("attention rate assumed", f"{rates.flops_per_s / 1e12:.0f} TFLOP/s", help=rates.flops_source)
        m3.metric("link bandwidth assumed (one way)", f"{rates.bytes_per_s / 1e9:.0f} GB/s", help=rates.bytes_source)
        charts.draw(st, costs_chart, table, hiding_T, width="stretch")
        st.caption(f"Rates: attention, {rates.flops_source}; link, {rates.bytes_source}. {rates.measured}. A model, not a "
                   "measurement: the same rate at every length.")
        tables.table(table.rename(columns={"bytes_per_step": "bytes"}), column_config={
            "tokens_per_device": st.column_config.NumberColumn("tokens per GPU (T/P)", format="%d"),
            "bytes": st.column_config.NumberColumn("bytes sent per step (each GPU)", format="localized"),
            "transfer_ms": st.column_config.NumberColumn("send per step (ms)", format="%.4f"),
            "compute_ms": st.column_config.NumberColumn("compute per step (ms)", format="%.4f"),
            "compute_flops": st.column_config.NumberColumn("FLOPs per step", format="%.3e"),
            "hidden": st.column_config.CheckboxColumn("compute hides the send")})


def measured(run: ring_results.RingRun | None) -> None:
    """The shipped 2 × H200 ring results: a per-step timeline, speed-up and efficiency against one GPU,
    where the ring starts to pay, its correctness; or why they are absent."""
    if run is None:
        st.info("The ring benchmark's results (`scripts/ring_bench.py` on two H200s, shipped as "
                "`attnlab/shipped/ring_h200x2.json`) do not ship with this version yet, so there is no per-step "
                "timeline, speed-up or crossover to show. The ring and the bytes-per-step model (the first tab) do not need them.")
    else:
        st.caption(f"📦 {ring_results.label(run)}. Shipped with the lab, not measured on this machine.")
        mask = st.radio("mask", ring_results.MASKS, format_func=lambda m: m.replace("_", "-"), horizontal=True,
                        key="p11_mask")
        summary = ring_results.timeline_summary(run, mask)
        if summary:
            t1, t2, t3 = st.columns(3)
            t1.metric(f"ring, overlapped (T={summary.T:,})", f"{summary.ring_ms:.3f} ms", help=summary.variant)
            t2.metric("ring, send after compute", f"{summary.ring_no_overlap_ms:.3f} ms")
            t3.metric("transfer hidden by overlap", f"{summary.transfer_hidden:.0%}",
                      help="(no-overlap − overlapped) / total transfer time, clipped to 0–100 %")
            charts.draw(st, timeline_chart, ring_results.timeline(run, mask), width="stretch")
            st.caption(f"Bars: each step's compute (with its merge) and one send ({summary.send_ms:.3f} ms, "
                       f"{summary.send_GBps:.0f} GB/s), each timed alone and laid end to end; the metrics above "
                       "are the whole ring, timed. Overlap is the compiler's decision: XLA's scheduler lets one "
                       "collective run beside compute at a time unless told otherwise, and a ring step sends two "
                       "(K and V), so the benchmark allows two in flight "
                       "(`--xla_gpu_experimental_parallel_collective_overlap_limit=2`); without it the compiled "
                       "program sent V before any attention started.")
            compiled_order(run)
        speed = ring_results.speedups(run)
        y = st.radio("y axis", ["speedup", "efficiency"], horizontal=True, key="p11_speed_y")
        charts.draw(st, speedup_chart, speed, y, width="stretch")
        st.caption("Above the dashed line the ring pays: it beats one GPU (speed-up) or scales perfectly (efficiency). "
                   "Compare the ring with all-gather, and the balanced causal ring with the contiguous one.")
        same_program_notes(run)
        tables.text_table(ring_results.crossovers(run))  # every row in view: eleven lines, eleven rows
        if ring_results.skipped(run):
            st.caption(f"Not measured (the benchmark's time ran out): T = {ring_results.skipped(run)}.")
        errors = run.correctness
        st.caption(f"Correct: relative error against one GPU at T={errors.T}: non-causal "
                   f"{errors.non_causal:.1e}, causal {errors.causal:.1e}.")
        tables.download(speed, "ring_h200x2_speedups")
