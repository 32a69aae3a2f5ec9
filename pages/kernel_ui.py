"""UI for page 10 (Inside the fused kernel): mask controls, the tile grid, byte charts, the roofline and
the kernels' source. No attention math here: it lives in attnlab.math.flash, flash_traffic and ladder."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from attnlab.backends import tokamax as tokamax_backend
from attnlab.math import flash
from attnlab.studies import clocks, flash_traffic
from pages import charts, common, encodings, roofline_ui, sections, tables

if TYPE_CHECKING:
    from attnlab.studies.ladder import LadderRun

# skipped tiles are white and crossed (×) on both grids; partly masked tiles orange, never a pale tint
STATES = ["done", "current", "to come", "skipped"]
STATE_COLORS = ["#4c78a8", "#f58518", "#c6dbef", "#ffffff"]
KINDS = ["full", "partial", "skipped"]
KIND_COLORS = ["#4c78a8", "#f58518", "#ffffff"]


def mask_controls(key: str, shape, kv_len: int) -> tuple[bool, tuple[int, int] | None, int | None]:
    """Causal, window and padding toggles starting from the sidebar's masks; values kept inside 0..kv_len."""
    c1, c2, c3 = st.columns(3)
    causal = c1.toggle("causal", value=shape.causal, key=f"{key}_causal")
    window = None
    if c2.toggle("sliding window", value=shape.window is not None, key=f"{key}_use_window"):
        left0, right0 = shape.window or (kv_len // 4, 0)
        left = c2.number_input("left", 0, kv_len, min(left0, kv_len), key=f"{key}_left")
        right = c2.number_input("right", 0, kv_len, min(right0, kv_len), key=f"{key}_right")
        window = (int(left), int(right))
    length = None
    if c3.toggle("padding", value=bool(shape.kv_lengths), key=f"{key}_use_padding"):
        start = min(shape.kv_lengths[0], kv_len) if shape.kv_lengths else max(1, kv_len * 3 // 4)
        length = int(c3.number_input("real keys", 0, kv_len, start, key=f"{key}_length",
                                     help="keys past this one are padding (one sequence here)"))
    return causal, window, length


def tile_frame(kinds: list[list[str]], current: int | None = None) -> pd.DataFrame:
    """One row per tile: its kind and, while stepping (current = the step's index), its state."""
    cols = len(kinds[0])
    rows = []
    for i, row in enumerate(kinds):
        for j, kind in enumerate(row):
            n = i * cols + j
            state = "skipped" if kind == "skipped" else None
            if current is not None and state is None:
                state = "done" if n < current else "current" if n == current else "to come"
            rows.append({"Q block i": i, "K block j": j, "kind": kind, "state": state or kind,
                         "step": n + 1, "current": n == current})
    return pd.DataFrame(rows)


def tile_chart(df: pd.DataFrame, field: str, title: str, size: int = 260) -> alt.Chart:
    domain, colors = (STATES, STATE_COLORS) if field == "state" else (KINDS, KIND_COLORS)
    base = alt.Chart(df, title=title).encode(x=alt.X("K block j:O"), y=alt.Y("Q block i:O"))
    rect = base.mark_rect(stroke="#555", strokeWidth=0.5).encode(
        color=alt.Color(f"{field}:N", scale=alt.Scale(domain=domain, range=colors), title=None,
                        legend=alt.Legend(symbolType="square", symbolStrokeColor="#555", symbolStrokeWidth=1)),
        tooltip=encodings.tips("Q block i", "K block j", "kind", "state", "step"))
    if len(df) <= 1024:  # a cross on every skipped tile, so white never reads as 'not yet drawn'
        rect += base.transform_filter("datum.kind == 'skipped'").mark_text(text="×", color="#888",
                                                                          fontSize=max(8, min(16, 320 // len(df) ** 0.5)))
    if len(df) <= 64:
        rect += base.transform_filter("datum.current").mark_text(text="▶", fontSize=14)
    return rect.properties(width=size, height=size)


def source_lines(fn, start: str, end: str) -> str:
    """The lines of fn's source from the first starting with `start` to the first after it containing `end`."""
    lines = inspect.getsource(fn).splitlines()
    a = next(n for n, ln in enumerate(lines) if ln.strip().startswith(start))
    b = next(n for n in range(a, len(lines)) if end in lines[n])
    indent = len(lines[a]) - len(lines[a].lstrip())
    return "\n".join(ln[indent:] for ln in lines[a:b + 1])


LINES_NOTE = ("\"line 8\" and the like in its comments are the lines of Algorithm 1 in the FlashAttention-2 paper "
              "(Dao, 2023), which the code follows step by step.")


def flash_update_source() -> str:
    return source_lines(flash.flash_attention, "def update(", "return O_new, l_new, m_new")


def pallas_source(implementation: str) -> tuple[str, str]:
    """(the kernel's K/V loop with the online-softmax lines marked, where it comes from)."""
    live = common.on_device(tokamax_backend.inner_loop_source, implementation)
    if live:
        return live, f"from the installed tokamax ({tokamax_backend._KERNELS[implementation][0]})"
    e = tokamax_backend.EXCERPTS[implementation]
    text = "\n".join(f"{n:4d} {'◀ ' + mark if mark else '':<12}{line}"
                     for n, line, mark in tokamax_backend.excerpt_lines(implementation))
    return text, f"tokamax is not installed on the device worker: the excerpt shipped with the lab, {e['path']}. " \
                 f"{tokamax_backend.LICENCE_NOTE}"


def traffic_block(shape) -> None:
    """The bytes model of naive against flash (attnlab.studies.flash_traffic): a chart over T and a table at the shape."""
    bq_t = st.select_slider("query block of the flash kernel", [64, 128, 256], value=128, key="p10_traffic_bq")
    dims = (shape.batch, shape.heads, shape.kv_heads, shape.head_dim, shape.itemsize)
    model = pd.DataFrame([{"T = S": t, "model": m, "bytes": f["total"]} for t in (2 ** e for e in range(7, 16))
                          for m, f in (("naive: four kernels", flash_traffic.traffic_naive(dims[0], t, t, *dims[1:])),
                                       ("flash: one kernel", flash_traffic.traffic_flash(
                                           dims[0], t, t, *dims[1:], block_q=min(bq_t, t))))])
    charts.draw(st, bytes_chart, model, "T = S", "bytes", "model", "GPU memory traffic (model)", "T = S",
                "bytes moved", width="stretch")
    at = {"naive": flash_traffic.traffic_naive(shape.batch, shape.q_len, shape.kv_len, *dims[1:]),
          "flash": flash_traffic.traffic_flash(shape.batch, shape.q_len, shape.kv_len, *dims[1:],
                                               block_q=min(bq_t, shape.q_len))}
    table = pd.DataFrame(at)
    st.dataframe(table.loc[[i for i in table.index if i != "total"] + ["total"]].map(tables.fmt_bytes),
                 width="stretch", placeholder=tables.MISSING)
    st.caption(f"At {shape.describe()}; no cache reuse and no skipped tiles counted, so masks "
               "change nothing here (attnlab/studies/flash_traffic.py says what it assumes).")


def bytes_chart(df: pd.DataFrame, x: str, y: str, color: str, title: str, x_title: str, y_title: str) -> alt.Chart:
    """Bytes `y` against `x` on log-log axes, a line per `color`; x's ticks at the lengths measured (the learner's
    own T among them: Vega's powers of two left T = 384 without a tick)."""
    enc_color = encodings.impl_color(df) if color == "implementation" else alt.Color(f"{color}:N", title=None)
    xs = sorted(df[x].unique().tolist())
    return (alt.Chart(df, title=title).mark_line(point=True)
            .encode(x=alt.X(f"{x}:Q", scale=alt.Scale(type="log", base=2, domain=encodings.log2_room(xs), nice=False),
                            axis=alt.Axis(values=xs, format=",~g"), title=f"{x_title} (log)"),
                    y=encodings.bytes_y(y, f"{y_title} (log)", df[y]),
                    color=enc_color, tooltip=encodings.tips(x, color, y)))


def rung_chart(df: pd.DataFrame) -> alt.Chart:
    """TFLOP/s per rung, one bar colour per implementation, not causal beside causal."""
    order = list(dict.fromkeys(df.sort_values("rung")["label"]))
    return (alt.Chart(df).mark_bar()
            .encode(y=alt.Y("label:N", sort=order, title=None, axis=alt.Axis(labelLimit=220)), x=alt.X("best_tflops:Q", title="TFLOP/s"),
                    color=encodings.impl_color(df), row=alt.Row("causal:N", title="causal"),
                    tooltip=encodings.tips("label", "causal", alt.Tooltip("best_tflops:Q", format=".0f"),
                             alt.Tooltip("pct_of_measured_matmul:Q", format=".0f")))
            .properties(width=520))


def step_table(step) -> pd.DataFrame:
    """The running max m and sum l of each query row of the block, before and after this tile."""
    n = len(step.row_max_before)
    return pd.DataFrame({"m before": step.row_max_before, "m after": step.row_max_after,
                         "rescale exp(m_old − m_new)": step.rescale, "l before": step.row_sum_before,
                         "l after": step.row_sum_after},
                        index=pd.Index(np.arange(n), name="row of the block"))


# --------------------------------------------------------------------------------------------
# the shipped H200 measurements (attnlab/shipped/h200_ladder.json, written by `python -m attnlab ladder`)
# --------------------------------------------------------------------------------------------
NOT_MEASURED = ("Not measured yet: run `python -m attnlab ladder --out attnlab/shipped/h200_ladder.json` on a "
                "GPU to ship these measurements with the lab.")


def shipped_caption(found: LadderRun) -> None:
    """Where and when the shipped ladder was measured."""
    e = found.environment
    st.caption(f"📦 Measured on {e.device} (compute capability {e.compute_capability}), driver "
               f"{e.driver}, jax {e.jax}, cuDNN {e.cudnn}, on {e.date}, at {found.anchor}. "
               f"Shipped with the lab, not measured on this machine. TFLOP/s and ms: {clocks.WARM}.")


def ncu_block(found: LadderRun | None) -> None:
    from attnlab.studies import ladder

    # its own shape, not the sidebar's: said in the heading, beside the model's table at the sidebar's shape
    st.markdown(f"**DRAM bytes counted by an H200 (Nsight Compute) at {ladder.ANCHOR.describe()}**")
    ncu = found.ncu if found else {}
    if not ncu:
        st.info(NOT_MEASURED + " Until then, the model above is all there is.")
        return
    from attnlab import kernels

    rows = [{"implementation": n, "kernel": kernels.describe(c.kernel) if c.kernel else None,
             "read": tables.fmt_bytes(c.read_bytes), "written": tables.fmt_bytes(c.write_bytes),
             "the model's total": tables.fmt_bytes(ladder.model_bytes(ladder.ANCHOR, n)),
             "why not measured": c.reason or None} for n, c in ncu.items()]
    tables.text_table(pd.DataFrame(rows))  # kernel names are long: they wrap
    st.caption("The model counts every re-read of K and V (once per block of queries) as traffic to GPU memory; "
               "the H200's 50 MB L2 cache serves most of those re-reads, so the DRAM counters read far less.")
    if all(c.reason for c in ncu.values()):
        st.info("The GPU's counters could not be read where the file was made (reasons above): the model only.")
    shipped_caption(found)


def mask_sweep_block(found: LadderRun | None) -> None:
    from attnlab.studies import ladder

    st.markdown("**Kernel time under each mask, B4 T8192 N16 H128 bf16 on an H200**")
    rows = found.masks if found else None
    if rows:
        df = pd.DataFrame(rows)
        df["ms"] = df["device_ms"].fillna(df["throughput_ms"])
        ok = df[df["status"] == "ok"]
        charts.draw(st, mask_chart, ok, list(dict.fromkeys(df["mask"])))
        shipped_caption(found)
        bad = df[df["status"] != "ok"]
        if not bad.empty:
            tables.table(bad[["mask", "implementation", "status", "reason"]])
    else:
        st.info(NOT_MEASURED)
    with st.expander("Expected on an H200 (reference figures to compare with, not measured by this lab)"):
        masks = [m for m, _ in ladder.masks(ladder.ANCHOR)]
        st.dataframe(pd.DataFrame({n: ms for n, ms in ladder.EXPECTED_MASKS_MS.items()}, index=masks),
                     width="stretch", placeholder=tables.MISSING)
        st.caption("Kernel time in ms at B4 T8192 N16 H128 bf16, as the lab's authors measured it.")


def ladder_block(found: LadderRun | None) -> None:
    """The shipped ladder (None before it is measured): each rung's TFLOP/s, what it adds, the roofline."""
    from attnlab.studies import ladder

    if not found or not found.ladder:
        st.info(NOT_MEASURED)
    else:
        shipped_caption(found)
        fwd = ladder.rungs(found)
        ok = fwd[fwd["status"] == "ok"]
        if not ok.empty:
            charts.draw(st, rung_chart, ok, width="content")
        cols = ["rung", "label", "causal", "best_tflops", "pct_of_measured_matmul", "pct_of_datasheet", "adds"]
        tables.text_table(ok[cols].round({"best_tflops": 0, "pct_of_measured_matmul": 1, "pct_of_datasheet": 1})
                          .rename(columns={"best_tflops": "TFLOP/s", "adds": "what this rung adds",
                                           "pct_of_measured_matmul": "% of the bf16 matmul measured there (bf16 rungs)",
                                           "pct_of_datasheet": "% of datasheet peak (FP8 peak for FP8)"}))
        back = ladder.rungs(found, "forward+backward")
        if not back.empty and (back["status"] == "ok").any():
            st.markdown("**Forward + backward** (training: 3.5 × the forward FLOPs)")
            tables.text_table(back[back["status"] == "ok"][cols[:4]].round({"best_tflops": 0})
                              .rename(columns={"best_tflops": "TFLOP/s"}))
            absent = list(dict.fromkeys(ok.loc[~ok["implementation"].isin(back["implementation"]), "label"]))
            st.caption("Rungs missing here did not run forward + backward: "
                       + (f"{', '.join(absent)} ran forward only (no backward run in this suite); " if absent else "")
                       + "the others' reasons are listed below.")
        for part in (fwd, back):
            if not part.empty and (part["status"] != "ok").any():
                tables.text_table(part[part["status"] != "ok"][["label", "causal", "pass", "status", "reason"]])
                sections.memory_note(part[part["status"] != "ok"])
        roofline_ui.block(found)
    with st.expander("Expected on an H200 (reference figures to compare with, not measured by this lab)"):
        st.dataframe(pd.DataFrame([{"implementation": n, "TFLOP/s not causal": a, "TFLOP/s causal": b}
                                   for n, (a, b) in ladder.EXPECTED_H200.items()]), hide_index=True, placeholder=tables.MISSING)
        st.caption("At B4 T8192 N16 H128 bf16, as the lab's authors measured it. Plain-JAX flash: ~69 TFLOP/s at "
                   "B4 T4096, compiled scratch 1,356 MiB against XLA's 6,144 MiB.")


def mask_chart(ok: pd.DataFrame, order: list[str]) -> alt.Chart:
    """Kernel time per mask (in `order`), a bar per implementation."""
    return alt.Chart(ok).mark_bar().encode(
        x=alt.X("ms:Q", title="kernel time (ms)"), y=alt.Y("mask:N", sort=order, title=None, axis=alt.Axis(labelLimit=260)),
        yOffset=alt.YOffset("implementation:N"), color=encodings.impl_color(ok),
        tooltip=encodings.tips("mask", "implementation", alt.Tooltip("ms:Q", format=".3f"))).properties(width=520, height=300)


def error_chart(walk: list, current: int) -> alt.Chart:
    """max |partial − exact| of each Q block over the whole walk, the current step marked by a rule."""
    df = pd.DataFrame({"step": range(1, len(walk) + 1), "max |partial − exact|": [x.max_error for x in walk],
                       "Q block": [str(x.q_block) for x in walk]})
    line = alt.Chart(df).mark_line(point=True).encode(
        # half a step of room at each end (not Vega's "nice" 0 to a round number: an empty slot before step 1)
        x=alt.X("step:Q", scale=alt.Scale(domain=[0.5, len(walk) + 0.5], nice=False),
                axis=alt.Axis(tickMinStep=1, format="d")), y="max |partial − exact|:Q",
        color=alt.Color("Q block:N"), tooltip=encodings.tips(*df.columns))
    rule = alt.Chart(pd.DataFrame({"step": [current]})).mark_rule(color="#f58518", strokeWidth=2).encode(x="step:Q")
    return (line + rule).properties(height=200)
