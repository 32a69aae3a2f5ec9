"""Page 7's last tab: NVIDIA's own H200 attention table beside the same measurement made by the lab, live on a
Hopper GPU (a button), else the shipped H200 measurement, labelled as such."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from attnlab.device import FP8_ATTENTION_MIN_CC
from attnlab.studies import vendor
from pages import common, sections, tables, waiting, workers

COLUMNS = {
    "precision": st.column_config.TextColumn("precision"),
    "seq": st.column_config.NumberColumn("T = S", format="%d"),
    "mask": st.column_config.TextColumn("mask"),
    "nvidia_tflops": st.column_config.NumberColumn("NVIDIA's TFLOP/s", format="%.0f", help=vendor.SOURCE),
    "lab_tflops": st.column_config.NumberColumn("the lab's TFLOP/s", format="%.0f",
                                                help="Matmul FLOPs (4·B·N·T·S·H, halved when causal) over GPU kernel time"),
    "lab_over_nvidia": st.column_config.NumberColumn("lab / NVIDIA", format="%.2f×"),
    "clock_mhz": st.column_config.NumberColumn("SM clock (MHz)", format="%d", help="Read right after the measurement; the H200's maximum is 1,980"),
    "shape": st.column_config.TextColumn("shape run"),
    "how": st.column_config.TextColumn("how the lab measured it"),
    "note": st.column_config.TextColumn("note"),
}


def measure() -> pd.DataFrame:
    return common.on_device(vendor.measure)


def section() -> None:
    st.header("NVIDIA's own H200 table, measured the same way")
    st.write("NVIDIA publishes how fast cuDNN's attention runs on an H200 at Llama 3.1's attention shape: batch 1, "
             "64 query heads sharing 8 K/V heads (GQA), head size 128, sequence 8k and 16k, forward pass. "
             f"Source: {vendor.SOURCE}. The lab measures the same thing with its own harness, so you can see how "
             "close a JAX program gets to the vendor's figure.")
    info = workers.device_info()
    if info.at_least(FP8_ATTENTION_MIN_CC):
        st.caption(f"This server has a {info.device_kind}: the button measures all {len(vendor.VENDOR)} rows here "
                   "(compiles at four shapes, then about a second of GPU time per row: a minute or so in all; other "
                   "learners' runs wait while it holds the GPU).")
        with waiting.fresh():  # the last measurement goes as a new one runs
            if sections.on_demand("p7_vendor", "Measure NVIDIA's rows on this GPU", info.device_kind):
                with st.spinner("Measuring at NVIDIA's shapes on this GPU…"):
                    df = sections.guarded(measure, what="The measurement at NVIDIA's shapes")
                if df is not None:
                    st.caption(f"The lab's column: {df['where'].iloc[0]}.")
                    table(df)
    else:
        df = vendor.shipped()
        st.info(f"This server has no Hopper GPU, so the lab's column below was {df['where'].iloc[0]}; the 16k rows "
                "were not measured there yet.")
        table(df)


def table(df: pd.DataFrame) -> None:
    tables.table(df[list(COLUMNS)], column_config=COLUMNS)
    st.markdown(vendor.WHY)
