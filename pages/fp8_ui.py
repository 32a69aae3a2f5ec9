"""UI for page 9 (TransformerEngine and FP8): a study measured here on a button or shipped from an
H200, and the three FP8 studies' results as metrics, charts and tables."""

from __future__ import annotations

from collections.abc import Callable

import altair as alt
import pandas as pd
import streamlit as st

from attnlab.studies import clocks, fp8_study
from pages import charts, codeblock, common, encodings, sections, tables, workers

STATES = {"at boost clock (after 1 s idle)": True, "sustained (after 1.5 s of calls)": False}
ERRORS = {"err_unit_scales": "unit scales", "err_amax_qkv": "448/amax on Q, K, V", "err_amax_qkv_p": "… and 448 on P",
          "err_amax_all": "… and a calibrated O scale", "err_small_inputs_unit_scales": "x/64 inputs, unit scales",
          "err_small_inputs_amax_scales": "x/64 inputs, Q, K, V, P scaled, O not",
          "err_small_inputs_all_scales": "x/64 inputs, O scaled too"}
TIME_HELP = "The GPU's own kernel time per call (CUPTI), or the pipelined time per call where CUPTI is absent."


def autocast_study(shape) -> pd.DataFrame:
    """The study measured here, as one row (the shipped one is a table of one row too)."""
    return pd.DataFrame([common.on_device(fp8_study.te_autocast_study, shape).to_json()])


def block_study(shape) -> pd.DataFrame:
    return common.on_device(fp8_study.te_block_study, shape)


def attention_study(shapes: tuple) -> pd.DataFrame:
    return common.on_device(fp8_study.fp8_attention_study, tuple(shapes))


def study(key: str, why_not: str | None, label: str, params, fn: Callable[[], pd.DataFrame], table: str,
          snippet: str) -> pd.DataFrame | None:
    """Measured here on a button where it can run (why_not is None); else the reason, the code to run it
    on a GPU and the shipped H200 table, labelled. None when there is nothing to show."""
    if why_not is None:
        if not sections.on_demand(key, label, params):
            return None
        sections.queue_notice()
        with st.spinner("Measuring on the GPU ..."):
            df = sections.guarded(fn, what="The study")
        if df is not None:
            st.caption(f"Measured here, on this {workers.device_info().device_kind}.")
        return df
    st.info(f"Cannot run here: {why_not}")
    with st.expander("The code to run it on a GPU"):
        codeblock.code(snippet)
    df = sections.shipped_frame(table)
    if df.empty:
        st.info("No H200 results ship with this version, so there is nothing measured to show.")
        return None
    return df


def autocast(df: pd.DataFrame) -> None:
    a = fp8_study.AutocastStudy.from_json(df.iloc[0].dropna().to_dict())
    if not a.ok:
        st.warning(f"The study did not run: {a.status}. {common.literal(a.reason)}")
        return
    same = a.same_kernels
    m1, m2, m3 = st.columns(3)
    m1.metric("max |output with autocast − without|", f"{a.max_abs_diff_autocast_vs_not:.3g}")
    kind = "device time" if a.device_timed else "pipelined time"  # CUPTI's, or many calls and one wait
    m2.metric(f"{kind} per call without autocast (ms)", f"{a.bf16_ms:.4f}", help=TIME_HELP)
    m3.metric(f"{kind} per call with FP8 autocast (ms)", f"{a.autocast_ms:.4f}", help=TIME_HELP)
    (st.success if same else st.warning)(
        f"At {a.shape}: the kernels are {'identical' if same else 'different'} with and without "
        "autocast" + (": attention did not become FP8." if same else "; see the lists below."))
    tables.text_table(fp8_study.kernels_side_by_side(a))


def block_chart(good: pd.DataFrame) -> alt.Chart:
    """TFLOP/s of TE's attention block, a bar per FP8 recipe."""
    return alt.Chart(good, title="Attention block of TE layers: TFLOP/s by recipe").mark_bar().encode(
        x=alt.X("recipe:N", sort=None, axis=alt.Axis(labelAngle=0)), y=alt.Y("tflops:Q", title="TFLOP/s"),
        color=alt.Color("recipe:N", sort=None, legend=None),
        tooltip=encodings.tips("recipe", alt.Tooltip("ms:Q", format=".4f"), alt.Tooltip("tflops:Q", format=".1f"),
                            alt.Tooltip("rel_err_vs_bf16:Q", format=".2e")))


def speed_chart(speed: pd.DataFrame, order: list[str], title: str) -> alt.Chart:
    """TFLOP/s per shape, a bar per precision (in `order`) beside each other."""
    return alt.Chart(speed, title=title).mark_bar().encode(
        y=alt.Y("shape:N", sort=None, title=None, axis=alt.Axis(labelLimit=400)),
        yOffset=alt.YOffset("precision:N", sort=order), x=alt.X("TFLOP/s:Q"),
        color=alt.Color("precision:N", sort=order, legend=alt.Legend(orient="bottom", columns=2, labelLimit=400)),
        tooltip=encodings.tips("shape", "precision", alt.Tooltip("TFLOP/s:Q", format=".1f")))


def error_reading(good: pd.DataFrame) -> str:
    """What the block's relative error against bf16 means, with the largest one measured."""
    worst = good["rel_err_vs_bf16"].max() if "rel_err_vs_bf16" in good and good["rel_err_vs_bf16"].notna().any() else None
    said = f"The largest here, {worst:.1%}, is" if worst is not None else "A few per cent is"
    return (f"{said} of the size FP8's own rounding gives, not a fault: E4M3 keeps 3 mantissa bits, so each value is rounded by up "
            "to 2⁻⁴ = 6.25 % (about 2–4 % rms), and the block rounds the input and the weight of each of its GEMMs "
            "(general matrix multiplies). FP8 training accepts that because weights, gradients and sums stay in higher "
            "precision: it is judged by a model's loss over many steps, not by one output against bf16.")


def block(df: pd.DataFrame) -> None:
    df = df.assign(**{c: df[c].map(fp8_study.kernel_cell) for c in ("top_kernels", "gemm_kernels") if c in df})
    good = df[df["status"] == "ok"]
    if not good.empty:
        charts.draw(st, block_chart, good, width="stretch")
    tables.table(df[[c for c in ("shape", "recipe", "status", "ms", "tflops", "rel_err_vs_bf16", "reason") if c in df]],
                 column_config={"ms": st.column_config.NumberColumn("time per call (ms)", format="%.4f", help=TIME_HELP),
                                "rel_err_vs_bf16": st.column_config.NumberColumn("relative error vs bf16 block",
                                                                                 format="%.2e")})
    st.caption(error_reading(good) + f" Times: {clocks.WARM}.")
    if "top_kernels" in good:  # the evidence of where FP8 acts: long text, so a table of its own that wraps
        st.markdown("**The longest kernels of each recipe** (GPU time each): FP8 shows in the GEMMs' names")
        tables.text_table(good[["recipe", "top_kernels"]].rename(columns={"top_kernels": "longest kernels"}))
    tables.download(df, "te_block", "Download the block table (CSV)")


def fp8_attention(df: pd.DataFrame) -> None:
    good = df[df["status"] == "ok"]
    best = fp8_study.fastest(good)
    if best is not None:
        st.markdown(f"**Fastest FP8 kernel in this table: {best['shape']}**")
        m = st.columns(3)
        m[0].metric("FP8 at boost clock", f"{best['fp8_burst_tflops']:,.0f} TFLOP/s",
                    f"{best['burst_speedup']:.2f}× bf16 ({best['bf16_burst_tflops']:,.0f})", delta_color="off")
        m[1].metric("FP8 sustained", f"{best['fp8_tflops']:,.0f} TFLOP/s",
                    f"{best['speedup']:.2f}× bf16 ({best['bf16_tflops']:,.0f})", delta_color="off")
        clocks = (f"{best['fp8_burst_clock_mhz']:.0f} → {best['fp8_clock_mhz']:.0f} MHz"
                  if pd.notna(best.get("fp8_burst_clock_mhz")) and pd.notna(best.get("fp8_clock_mhz")) else "not read")
        m[2].metric("SM clock, boost → sustained", clocks, f"max {best['max_clock_mhz']:.0f} MHz"
                    if pd.notna(best.get("max_clock_mhz")) else None, delta_color="off")
    if not good.empty:
        state = st.radio("GPU state", list(STATES), horizontal=True, key="p9_fp8_state")
        speed = fp8_study.speed_frame(good, STATES[state])
        order = [v for v in fp8_study.SPEEDS.values() if v in set(speed["precision"])]
        charts.draw(st, speed_chart, speed, order, f"TFLOP/s, bf16 vs FP8 by shape {state}", width="stretch")
        st.markdown("**Relative error against bf16 cuDNN** (‖FP8 − bf16‖ / ‖bf16‖), by scaling choice")
        for inputs, cols in (("Q, K, V drawn from N(0, 1)", list(ERRORS)[:4]), ("Q, K, V scaled down 64×", list(ERRORS)[4:])):
            errors = [c for c in cols if c in good]
            if errors:  # two tables of a few columns each: seven side by side ran off the page
                st.caption(inputs)
                tables.table(good[["shape"] + errors],
                             column_config={c: st.column_config.NumberColumn(ERRORS[c], format="%.2e") for c in errors})
    tflops = {f"{k}{sfx}_tflops": f"{label}, TFLOP/s{' at boost' if sfx else ' sustained'}"
              for sfx in ("_burst", "") for k, label in fp8_study.SPEEDS.items()}
    clocks = {"bf16_burst_clock_mhz": "bf16 clock at boost, MHz", "bf16_clock_mhz": "bf16 clock sustained, MHz",
              "fp8_burst_clock_mhz": "FP8 clock at boost, MHz", "fp8_clock_mhz": "FP8 clock sustained, MHz"}
    with st.expander("Every number of this study (table)"):
        tables.table(df[[c for c in ("shape", "status", "burst_speedup", "speedup", "e2e_speedup", *tflops, *clocks,
                                     "reason") if c in df]],
                     column_config={"burst_speedup": st.column_config.NumberColumn("speed-up, kernel at boost",
                                                                                   format="%.2f×"),
                                    "speedup": st.column_config.NumberColumn("speed-up, kernel sustained", format="%.2f×"),
                                    "e2e_speedup": st.column_config.NumberColumn("speed-up, end to end", format="%.2f×"),
                                    **{c: st.column_config.NumberColumn(v, format="%.0f") for c, v in tflops.items()},
                                    **{c: st.column_config.NumberColumn(v, format="%d") for c, v in clocks.items()}})
    tables.download(df, "fp8_attention", "Download the FP8 table (CSV)")
