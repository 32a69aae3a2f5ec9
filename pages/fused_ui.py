"""Sections pages 4 and 5 share: what `implementation=None` compiles to here, what XLA's attention
holds in memory (measured here by compiling, and shipped from an H200), and memory charts whose
overlapping lines stay visible."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from attnlab.backends import REGISTRY
from attnlab.measure import runs
from attnlab.shapes import AttentionShape
from attnlab.studies import memory
from pages import charts, common, encodings, sections, tables, workers

PROGRAMS = ("naive", "sdpa_auto", "sdpa_xla", "sdpa_cudnn")
# why each line of a memory chart grows as it does, by implementation
WHY = {
    "naive": "writes the (B, N, T, S) scores and weights to memory between its stages",
    "sdpa_auto": "implementation=None: JAX picked XLA's path, so the same as sdpa_xla",
    "sdpa_xla": "XLA's attention is matmul → softmax → matmul: it writes the (B, N, T, S) scores too",
    "sdpa_cudnn": "one flash kernel: tiles of scores stay on chip, so its scratch is a small fixed workspace "
                  "(asked for no log-sum-exp, it keeps none)",
    "te_dpa": "TransformerEngine calls cuDNN's flash kernel too, and keeps a log-sum-exp per row (B·N·T float32) "
              "for a backward pass: O(T)",
    "cudnn_fp8": "cuDNN's FP8 flash kernel, plus the FP8 copies of Q, K and V",
}


compiled_memory = common.cached(memory.compiled_memory)
# shared by the server's processes: another process that ran the same shape answers without compiling
same_program = common.cached(memory.same_program)


def programs(shape: AttentionShape, names=PROGRAMS) -> pd.DataFrame:
    """What each implementation compiles to at `shape` (compile only: nothing is allocated or run)."""
    df = common.frame(shape, names, accuracy=False, program=True)
    return df.assign(scratch=df["temp_bytes"].map(tables.fmt_bytes))


def not_run(df: pd.DataFrame) -> None:
    """What did not run, once per implementation and reason, with the lengths it applies to."""
    bad = df[df["status"] != runs.OK]
    if bad.empty:
        return
    rows = bad.groupby(["implementation", "status", "reason"], sort=False)["q_len"].agg(
        lambda t: ", ".join(f"{int(x):,}" for x in sorted(set(t)))).reset_index()
    st.markdown("**Not run here**")
    tables.text_table(rows.rename(columns={"q_len": "at T ="})[["implementation", "at T =", "status", "reason"]])
    sections.memory_note(bad)


def none_is_xla(shape: AttentionShape, names=PROGRAMS) -> pd.DataFrame:
    """The compiled programs of None, 'xla' and 'cudnn' here, and what they say, in a sentence each."""
    df = programs(shape, names)
    first = df.groupby("reason", sort=False)["implementation"].transform("first")  # a reason said once, on its first row
    said_before = (df["reason"].astype(str) != "") & (first != df["implementation"])
    df = df.assign(reason=df["reason"].where(~said_before, "as for " + first))
    tables.text_table(df[["implementation", "status", "what_ran", "scratch", "reason"]]
               .rename(columns={"what_ran": "what ran", "scratch": "scratch (temp_bytes)"}))
    if workers.device_info().backend == "gpu":
        st.caption("Compiled as a check is, without XLA's autotuning (which would run candidate matmul kernels on the "
                   "GPU and keep the fastest): whether attention becomes cuDNN's kernel or XLA's fusions is decided "
                   "before that. A timed program is autotuned, and its matmul kernels and scratch can differ (on the "
                   "H200 at B1 T1024 N8 H64 bfloat16, autotuning hands naive's matmuls to cuBLAS and its scratch grows "
                   "from 50 to 67 MB); the memory charts below compile with autotuning.")
    rows = df.set_index("implementation")
    auto, cudnn = rows.loc["sdpa_auto"], rows.loc["sdpa_cudnn"]
    if auto["status"] == runs.OK:
        same = rows.loc["sdpa_xla", "status"] == runs.OK and same_program(shape, "sdpa_auto", "sdpa_xla")
        st.success(f"On this machine `implementation=None` compiled to **{auto['what_ran']}**"
                   + (": the very same program as `implementation=\"xla\"` (identical optimised HLO, the program text XLA compiles)." if same
                      else "."))
    else:
        st.warning(f"`implementation=None` did not compile here ({auto['status']}): {common.literal(auto['reason'])}")
    if cudnn["status"] == runs.OK:
        st.info(f"`implementation=\"cudnn\"` compiled to **{cudnn['what_ran']}**: that is the kernel None does "
                "not pick.")
    else:
        st.info(f"`implementation=\"cudnn\"` cannot compile here: {cudnn['reason']}. On an NVIDIA GPU it compiles "
                "to one custom call (`__cudnn$fmha…`), while None still compiles to XLA's fusions: on the H200, None's "
                "kernels were XLA's matmul fusions and softmax (page 7's shipped H200 table names them), and the "
                "shipped measurements below set cuDNN's kernel beside XLA's (`implementation=\"xla\"`).")
    return df


def xla_at_scale() -> None:
    """XLA's scratch at long T on the H200 (shipped), or the model's score bytes when none ships."""
    lc = memory.shipped_configuration(sections.shipped_frame("long_context"))
    longest = lc[(lc["status"] == "ok") & (lc["implementation"] == "sdpa_xla")]["q_len"].max() if len(lc) else None
    if longest is None or pd.isna(longest):
        s = AttentionShape(batch=4, q_len=8192, kv_len=8192, heads=16, kv_heads=16, head_dim=128, dtype="bfloat16")
        st.markdown(f"No H200 measurements ship with this copy. The model: at {s.describe()} one float32 "
                    f"(B, N, T, S) score matrix is **{tables.fmt_bytes(s.score_bytes())}** "
                    "(`shape.score_bytes()`), and XLA's path holds at least one.")
        return
    t = int(longest)
    at = lambda n, p="forward": memory.scratch_at(lc, n, t, p)  # noqa: E731
    first = lc[lc["q_len"] == t].iloc[0]
    st.markdown(
        f"📦 **Measured on the H200 (shipped), {first['shape']}, forward pass, compiled scratch (temp_bytes):** "
        f"implementation=\"xla\" (what None runs) **{tables.fmt_bytes(at('sdpa_xla'))}**, naive "
        f"**{tables.fmt_bytes(at('naive'))}**, cuDNN **{tables.fmt_bytes(at('sdpa_cudnn'))}**.")
    oom = lc[(lc["q_len"] == t) & (lc["pass"] == "forward+backward") & (lc["status"] != "ok")
             & lc["implementation"].isin(["naive", "sdpa_xla"])]
    for r in oom.itertuples():
        st.markdown(f"- forward+backward, {r.implementation} at T = {t:,}: **{r.status}**: {common.literal(r.reason)}")


def memory_chart(df: pd.DataFrame, y: str, title: str, y_title: str) -> None:
    """Log-log lines, one colour, dash and marker per implementation; lines within 5 % are named."""
    ok = df[(df["status"] == runs.OK) & (df[y].fillna(0) > 0)]
    if ok.empty:
        st.info("No implementation compiled at these lengths here; the reasons are in the table below.")
        return
    charts.draw(st, memory_lines, ok, y, title, y_title, width="stretch")
    for a, b, rel in memory.overlaps(ok, y):
        by = "by less than 0.01 %" if rel < 1e-4 else f"by at most {rel * 100:.2g} %"
        st.caption(f"**{a}** and **{b}** lie on top of each other (they differ {by} at any T; "
                   "dashes and markers tell them apart).")


def memory_lines(ok: pd.DataFrame, y: str, title: str, y_title: str) -> alt.Chart:
    """`memory_chart`'s chart: bytes `y` against T on log-log axes, dashes and markers per implementation."""
    xs = sorted(ok["q_len"].unique().tolist())
    enc = dict(
        x=alt.X("q_len:Q", scale=alt.Scale(type="log", base=2, nice=False), axis=alt.Axis(values=xs, format=",~g"),
                title="sequence length T = S (log)"),
        y=encodings.bytes_y(y, y_title, ok[y]),
        color=encodings.impl_color(ok), strokeDash=alt.StrokeDash("implementation:N", legend=None),
        tooltip=encodings.tips("implementation", "q_len", alt.Tooltip(f"{y}:Q", format=",")))
    base = alt.Chart(ok, title=title)
    points = base.mark_point(size=70, filled=False).encode(**enc, shape=alt.Shape("implementation:N", legend=None))
    return base.mark_line(strokeWidth=2).encode(**enc) + points


def growth(df: pd.DataFrame, y: str = "temp_bytes", where: str = "Measured here") -> None:
    """Each line's measured slope, and why it grows so."""
    from attnlab.measure import compiled

    grew = compiled.growth(df, y=y)
    if grew.empty:
        return
    lines = []
    for r in grew.itertuples():
        kind = "O(T²)" if r.slope >= 1.7 else "O(T)" if r.slope >= 0.7 else "about flat" if r.slope < 0.3 else "between"
        why = WHY.get(r.implementation, REGISTRY[r.implementation].description if r.implementation in REGISTRY else "")
        what = df[df["implementation"] == r.implementation].get("what_ran", pd.Series(dtype=str)).dropna()
        if r.slope < 1.5 and what.astype(str).str.contains("handed to a library").any() and r.implementation != "sdpa_cudnn":
            why = ("here XLA handed the matmul → softmax → matmul to a CPU library fusion, whose own scratch "
                   "`memory_analysis()` does not count; on a GPU it " + why.split(": ")[-1])
        lines.append(f"- **{r.implementation}**: ×{r.ratio:,.0f} from T = {r[2]:,} to {r[3]:,}, slope "
                     f"{r.slope:.1f} ({kind}): {why}.")
    st.markdown(f"{where}, per line (slope 2 on a log-log chart is O(T²), 1 is O(T), 0 is flat):\n"
                + "\n".join(lines))
