"""Page 5b's roofline of the shipped ladder: each rung by the traffic model's bytes, the rungs Nsight Compute
counted once more by their DRAM bytes (labelled, beside the model's point), and two labelled roofs, the
datasheet's and the one measured in the same run. The sums live in attnlab.studies.roofline."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from attnlab.studies import kvcache, roofline
from attnlab.studies.ladder import LadderRun
from attnlab.studies.suite import Ceilings, SuiteRun
from pages import charts, encodings


def roofline_chart(points: pd.DataFrame, roofs: pd.DataFrame) -> alt.Chart:
    decades = [10.0 ** e for e in range(6)]
    x = alt.X("intensity:Q", scale=alt.Scale(type="log", domain=[1, 1e5]), axis=alt.Axis(values=decades, format=",~g"),
              title="arithmetic intensity (FLOPs per byte moved to or from GPU memory)")
    y = alt.Y("tflops:Q", scale=alt.Scale(type="log", domain=[10, 3000]), title="TFLOP/s",
              axis=alt.Axis(values=[10, 30, 100, 300, 1000, 3000], format=",~g"))
    lines = alt.Chart(roofs).mark_line(color="#333", clip=True).encode(  # the roofs start below the y axis's 10
        x=x, y=y, detail="roof:N", strokeDash=alt.StrokeDash("kind:N", scale=alt.Scale(
            domain=["datasheet", "measured"], range=[[6, 4], [1, 0]]), legend=None),
        tooltip=encodings.tips("roof"))
    ends = roofs.sort_values("intensity").groupby("kind", as_index=False).last()
    names = alt.layer(*(alt.Chart(ends[ends["kind"] == k]).mark_text(align="right", dx=-4, dy=dy, fontSize=11,
                                                                      color="#333").encode(x=x, y=y, text="roof:N")
                        for k, dy in (("datasheet", -9), ("measured", 11))))
    data = points.rename(columns={"achieved_tflops": "tflops"})
    tips = encodings.tips("label", "causal", "bytes", alt.Tooltip("traffic_bytes:Q", format=",", title="bytes"),
                       alt.Tooltip("intensity:Q", format=",.0f"), alt.Tooltip("tflops:Q", format=".0f"))
    enc = dict(x=x, y=y, color=encodings.impl_color(data), shape=alt.Shape("causal:N"), tooltip=tips)
    model = alt.Chart(data[data["bytes"] == roofline.MODEL]).mark_point(size=110, filled=False, strokeWidth=2).encode(**enc)
    counted = alt.Chart(data[data["bytes"] == roofline.MEASURED]).mark_point(size=130, filled=True).encode(**enc)
    pairs = data[data["implementation"].isin(data.loc[data["bytes"] == roofline.MEASURED, "implementation"])
                 & ~data["causal"].astype(bool)].assign(
        tag=lambda d: d["bytes"].map({roofline.MEASURED: "DRAM bytes counted", roofline.MODEL: "model's bytes"}))
    link = alt.Chart(pairs).mark_line(color="#999", strokeDash=[2, 2]).encode(x=x, y=y, detail="implementation:N")
    tags = alt.Chart(pairs.drop_duplicates("tag")).mark_text(dy=16, fontSize=11, color="#333").encode(x=x, y=y, text="tag:N")
    return (lines + names + link + model + counted + tags).properties(
        title="Roofline of the ladder (H200): filled dots by DRAM bytes counted, hollow by the model's bytes",
        height=380)


def block(found: LadderRun) -> None:
    """The roofline of the shipped ladder with its captions, or nothing when the file has no ceilings."""
    if not found.ceilings or not found.ladder:
        return
    points = pd.DataFrame(roofline.points(found))
    if points.empty:
        return
    charts.draw(st, roofline_chart, points, pd.DataFrame(roofline.roofs(found)), width="stretch")
    counted = points[points["bytes"] == roofline.MEASURED]
    st.caption(
        "x: FLOPs over the bytes each rung moves to and from GPU memory. Hollow: the traffic model's bytes (scores "
        "through memory for XLA and plain JAX; for fused kernels every K/V re-read, query blocks of 128), for every "
        "rung. Filled: the DRAM bytes Nsight Compute counted for the kernel (the Memory traffic tab's table)"
        + (": " + ", ".join(f"{r['label']} moved {r['model_over_measured']:.0f}× fewer bytes than its model counts"
                            for _, r in counted.iterrows())
           + ", because the 50 MB L2 cache serves most re-reads of K and V."
           + (" By its counted bytes each sits under the compute roofs, not above the bandwidth roofs as its model's "
              "point does." if (counted["achieved_tflops"] <= found.ceilings.matmul_bf16_tflops).all() else "")
           if not counted.empty else ".")
        + " The FP8 rung runs on FP8 tensor cores, whose datasheet peak is twice bf16's: the bf16 roofs do not bound it.")
    _why_short(found)
    _piles_and_ridge(points[points["bytes"] == roofline.MODEL], found.ceilings)


def _why_short(found: LadderRun) -> None:
    """One sentence: why the measured roof sits under the datasheet's."""
    s = roofline.shortfall(found)
    if not s:
        return
    decode = SuiteRun.load(kvcache.SHIPPED)
    read = roofline.fastest_read_tb_s(decode.tables.get("decode") if decode else None)
    st.caption(
        f"Why the solid roof (measured: {s.copy_tb_s:.2f} TB/s, {s.copy_pct:.0f} % of the datasheet's "
        f"{s.sheet_tb_s:g}; {s.matmul_tflops:.0f} TFLOP/s, {s.matmul_pct:.0f} % of its {s.sheet_tflops:g}) "
        "sits under the dashed one: the datasheet multiplies every memory pin and every tensor core, busy every cycle "
        "at the top clock; a real program loses time to DRAM refresh and to turning the bus between reads and writes "
        "(a copy does both for every byte), and a long matmul draws enough power that the GPU lowers its clock. "
        "The copy's rate is a yardstick, not a ceiling"
        + (f": page 8's cuDNN decode step, which only reads, reads K and V at up to {read:.2f} TB/s." if read else "."))


def _piles_and_ridge(points: pd.DataFrame, ceilings: Ceilings) -> None:
    """Say which dots hide others (one marker drawn on top) and which rung sits where the roof turns."""
    name = lambda r: f"{r['label']}{' (causal)' if r['causal'] else ''}"  # noqa: E731
    piles = [f"{', '.join(name(r) for _, r in g.iterrows())} at {g['intensity'].iloc[0]:.0f} FLOPs/byte "
             f"({g['achieved_tflops'].min():.0f}-{g['achieved_tflops'].max():.0f} TFLOP/s)"
             for g in charts.piles(points, "intensity", "achieved_tflops")]
    ridge = ceilings.matmul_bf16_tflops / ceilings.copy_tb_s
    at = points[(points["intensity"] - ridge).abs() <= 0.1 * ridge]
    st.caption(("Hollow dots on top of one another (the same traffic model, TFLOP/s within a tenth): "
                + "; ".join(piles) + ". " if piles else "")
               + (f"The measured roof turns from bandwidth to compute at {ridge:.0f} FLOPs/byte: "
                  + ", ".join(f"{name(r)} ({r['intensity']:.0f}, {r['achieved_tflops']:.0f} TFLOP/s)"
                              for _, r in at.iterrows()) + (" sits there." if len(at) == 1 else " sit there.")
                  if not at.empty else ""))
