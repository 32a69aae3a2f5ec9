"""Page 8's decode step as an H200 measured it (attnlab/shipped/h200_decode.json, `python -m attnlab decode`)."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from attnlab import shipped
from attnlab.measure import runs
from attnlab.studies import kvcache
from attnlab.studies.suite import SuiteRun
from pages import charts, common, encodings, sections, tables, waiting

VARIANTS = ["MHA", "GQA", "MQA"]
NOT_MEASURED = ("No H200 decode measurements ship with this version: `python -m attnlab decode --out "
                "attnlab/shipped/h200_decode.json` on a GPU makes them.")
K_LABEL = "datum.value >= 1024 ? format(datum.value / 1024, ',~g') + 'K' : format(datum.value, ',~g')"  # 4K ... 128K
Y = {"device time (µs)": "device_us", "GB/s of K and V": "kv_read_gb_per_s"}


def cache_chart(cache: pd.DataFrame, title: str) -> alt.Chart:
    """Bytes of KV cache per sequence, a bar per variant."""
    return alt.Chart(cache, title=title).mark_bar().encode(
        x=alt.X("variant:N", sort=None, axis=alt.Axis(labelAngle=0)),
        y=encodings.bytes_y("cache_bytes_per_sequence", "cache per sequence", cache["cache_bytes_per_sequence"], log=False),
        color=alt.Color("variant:N", sort=None, legend=None),
        tooltip=encodings.tips("variant", "kv_heads", "bytes_per_token", "cache_bytes_per_sequence"))


def step_chart(good: pd.DataFrame, y: str) -> alt.Chart:
    """One decode step's time `y` per variant, a bar per implementation beside each other."""
    return alt.Chart(good, title=f"One decode step: {tables.label(y)} by variant").mark_bar().encode(
        x=alt.X("variant:N", sort=None, axis=alt.Axis(labelAngle=0)), xOffset="implementation:N",
        y=alt.Y(f"{y}:Q", title=tables.label(y)), color=encodings.impl_color(good),
        tooltip=encodings.tips("variant", "kv_heads", "implementation", alt.Tooltip(f"{y}:Q", format=".4f"),
                            "kv_read_bytes", alt.Tooltip("kv_read_gb_per_s:Q", format=".1f")))


def study_chart(rows: pd.DataFrame, y: str, order: list[str]) -> alt.Chart:
    """`y` against cache length, a line per variant, a panel per implementation (in `order`)."""
    lengths = sorted(rows["kv_len"].unique().tolist())
    return (alt.Chart(rows).mark_line(point=True).encode(
        x=alt.X("kv_len:Q", scale=alt.Scale(type="log", base=2, nice=False), axis=alt.Axis(values=lengths, labelExpr=K_LABEL),
                title="cache length kv_len (tokens; 1K = 1,024)"),
        y=alt.Y(f"{y}:Q", scale=alt.Scale(type="log" if y == "device_us" else "linear"),
                title=[k for k, v in Y.items() if v == y][0]),
        color=alt.Color("variant:N", scale=alt.Scale(domain=VARIANTS)),
        tooltip=encodings.tips("variant", "kv_heads", "implementation", "kv_len", alt.Tooltip("device_us:Q", format=",.1f"),
                            "kv_read_bytes", alt.Tooltip("kv_read_gb_per_s:Q", format=",.0f")))
        .properties(width=230, height=240)
        .facet(column=alt.Column("implementation:N", sort=order, title=None)))


def measured_on_h200(kv_len: int) -> None:
    """The study's chart (time or bandwidth against cache length, one panel per implementation) and, at one
    cache length, what GQA and MQA saved against MHA, in words computed from the rows."""
    df = shipped.frame("decode", kvcache.SHIPPED)
    st.subheader("Measured on an H200: does the time follow the bytes?")
    if df.empty:
        st.caption(NOT_MEASURED)
        return
    st.caption(f"📦 {shipped.label(kvcache.SHIPPED)}. Shipped with the lab, not measured on this machine.")
    ok = df[df["status"] == runs.OK].assign(device_us=lambda d: d["device_ms"] * 1e3)
    first = ok.drop_duplicates("base").set_index("base")
    names = {b: f"{b}: B{r['batch']} N{r['heads']} H{r['head_dim']} {r['dtype']}" for b, r in first.iterrows()}
    c1, c2 = st.columns(2)
    base = c1.selectbox("shape", list(names), index=len(names) - 1, key="p8_h200_base", format_func=names.get)
    y = Y[c2.selectbox("y axis", list(Y), key="p8_h200_y")]
    rows = ok[ok["base"] == base]
    order = [n for n in kvcache.STUDY_IMPLS if n in set(rows["implementation"])]
    lengths = sorted(rows["kv_len"].unique().tolist())
    charts.draw(st, study_chart, rows, y, order, width="content")
    for j in kvcache.jumps(rows):  # a jump the bytes do not explain: the compiled program changed
        st.caption(f"`{j['implementation']}` {j['variant']}: from kv_len {j['from']:,} to {j['to']:,} the step takes "
                   f"{j['grew']:.1f}× as long for {j['longer']:.0f}× the cache. The kernels say why: XLA compiled another "
                   f"program there ({j['kernels_before']} → {j['kernels_after']} kernels), with "
                   f"{j['copy_after_ms'] * 1e3:,.0f} µs of layout copies (transposes of K and V) against "
                   f"{j['copy_before_ms'] * 1e3:,.0f} µs before.")
    missing = sorted(set(df[df["base"] == base]["implementation"]) - set(order))
    if missing:
        why = df[(df["base"] == base) & df["implementation"].isin(missing)]["reason"].iloc[0]
        st.caption(f"Not at this shape: {', '.join(missing)} ({why}).")

    at = kv_len if kv_len in lengths else lengths[-1]
    s = kvcache.savings(rows[rows["kv_len"] == at])
    tables.text_table(pd.DataFrame({
        "implementation": s["implementation"], "variant": s["variant"], "kv_heads": s["kv_heads"],
        "K and V read": [f"{tables.fmt_bytes(b)}" + (f" ({f:.0f}× fewer)" if f > 1 else "")
                         for b, f in zip(s["kv_read_bytes"], s["bytes_fewer"], strict=True)],
        "device time": [f"{ms * 1e3:,.1f} µs" + (f" ({x:.1f}× faster)" if v != "MHA" else "")
                        for ms, x, v in zip(s["ms"], s["faster"], s["variant"], strict=True)],
        "GB/s of K and V": s["kv_read_gb_per_s"].round(0),
        "of which layout copies": [f"{c * 1e3:,.1f} µs" if c else None for c in s["layout_copy_ms"]],
    }))
    st.caption(f"At kv_len = {at:,}" + (" (the cache length chosen under *One decode step*)." if at == kv_len else
                                         f" (the study's longest; it has {', '.join(f'{n:,}' for n in lengths)}).")
               + " K and V read: the bytes a step must read at least, 2·B·S·K·H·itemsize; GB/s is those bytes over "
                 "the device time, so a program that moves more (a copy) shows fewer GB/s.")
    _lessons(s, SuiteRun.load(kvcache.SHIPPED))
    tables.download(df, "h200_decode", "Download the H200 decode study (CSV)")


def _lessons(s: pd.DataFrame, study: SuiteRun | None) -> None:
    """What the table shows, in words computed from it: who turns fewer bytes into less time, and why not."""
    peak = study.environment.peak.memory_tb_s if study and study.environment.peak else None
    gqa = s[s["variant"] == "GQA"].set_index("implementation")
    if gqa.empty:
        return
    words = [f"GQA reads {gqa['bytes_fewer'].iloc[0]:.0f}× fewer K and V bytes than MHA. Its step is "
             + ", ".join(f"{x:.1f}× faster on `{n}`" for n, x in gqa["faster"].items()) + "."]
    if "sdpa_cudnn" in s["implementation"].values:
        c = s[s["implementation"] == "sdpa_cudnn"]
        tb = c["kv_read_gb_per_s"] / 1e3
        least = c.loc[c["kv_read_bytes"].idxmin()]
        words.append(f"cuDNN reads K and V in place at {tb.min():.1f}-{tb.max():.1f} TB/s"
                     + (f" (the H200's datasheet: {peak} TB/s)" if peak else "") + ", so its time follows the bytes"
                     + (f"; {least['variant']}'s small read ({tables.fmt_bytes(least['kv_read_bytes'])}) is too little "
                        "work to reach the rest of the bandwidth." if least["kv_read_gb_per_s"] == c["kv_read_gb_per_s"].min()
                        else "."))
    copies = gqa[gqa["layout_copy_ms"] > 0].sort_index(key=lambda i: i != "sdpa_xla")  # the API's program first
    if not copies.empty:
        n = copies.index[0]
        words.append(f"`{n}`'s GQA program spends {copies['layout_copy_ms'].iloc[0] * 1e3:,.0f} of its "
                     f"{copies['ms'].iloc[0] * 1e3:,.0f} µs in layout transposes: XLA copies K and V into the order "
                     "its matmuls want (read, write, read again) before using them, so the bytes saved are partly "
                     "spent again. The code copies nothing; the compiler does (the kernels are in the CSV).")
    st.info(" ".join(words))


def forward_times(shapes: tuple, names: tuple[str, ...]) -> pd.DataFrame:
    """The forward pass of each variant through `names`, timed (each shape's run cached by common.run)."""
    return pd.concat([common.frame(v, names, accuracy=False, timed=True).assign(variant=v.variant) for v in shapes],
                     ignore_index=True)


def forward_section(variants: list, names: tuple[str, ...]) -> None:
    """Page 8's "Forward time of each variant": the codelab's MHA/GQA/MQA forward timed on a button."""
    st.subheader("Forward time of each variant")
    st.write("The codelab times the three variants' forward pass at its shape: with the whole sequence at once, fewer "
             "K/V heads read less memory but do the same FLOPs, so at small shapes the times barely differ (the "
             "decode step below is where they part).")
    if sections.on_demand("p8_forward", f"Time the {len(variants)} variants' forward pass", (tuple(variants), names),
                          timing=(tuple(variants), len(names))):
        with waiting.fresh():
            forward = sections.guarded(forward_times, tuple(variants), names, what="The timing")
            if forward is not None:
                sections.results(forward, ["variant", "kv_heads", "implementation", "wall_ms", "wall_ms_iqr", "throughput_ms",
                                           "device_ms", "tflops"])


def output_checks_section(checks: pd.DataFrame | None) -> None:
    """Page 8's output check of each variant against float64 (kvcache.output_checks), and what it says."""
    if checks is None:
        return
    sections.results(checks, ["variant", "kv_heads", "implementation", "q shape", "k, v shape", "output_shape",
                              "allclose", "max_abs_error", "relative_error"], failed=False)
    sections.not_run(checks, keys=("variant", "implementation"))
    ok = checks[checks["status"] == runs.OK]
    if not ok.empty and ok["output_shape"].nunique() == 1 and ok["allclose"].all():
        which = "Every variant" if len(ok) == len(checks) else "Every variant that ran"
        st.success(f"{which} returns {ok['output_shape'].iloc[0]} and matches the float64 reference "
                   "within its dtype's tolerance (the allclose column).")
    elif not ok.empty and not ok["allclose"].all():
        st.warning("Some outputs differ from the reference beyond the tolerance; see the table.")
    for note in sorted({n for n in ok["reference_note"].dropna() if n}):
        st.caption(f"float64 reference: {note}")
