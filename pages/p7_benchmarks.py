"""Lab step 7: what one attention call costs here, measured four ways, and how it grows with T and B."""

import altair as alt
import pandas as pd
import streamlit as st

from attnlab import bench, reference
from attnlab import implementations as impls
from pages import common

st.title("7 · Benchmarks")
st.write(
    "A timing is only as good as what it measures. The lab's one harness (`attnlab.bench`) times every "
    "implementation the same way and reports four numbers; at small shapes they disagree wildly, because "
    "launching a GPU kernel from Python costs more than the kernel itself. Then the sweeps show how each "
    "implementation grows with sequence length (the naive O(T²) scores against a fused kernel) and with "
    "batch size."
)
with st.expander("The four timings, and TFLOP/s", expanded=False):
    st.markdown(
        "- **compile_ms**: the first call, which traces, lowers and compiles the program with XLA; paid once per shape.\n"
        "- **wall_ms**: `perf_counter()` around one call plus `block_until_ready()`, the median of many: the "
        "codelab's method. At small shapes this is mostly Python dispatch and synchronisation, not attention.\n"
        "- **throughput_ms**: many calls dispatched, one wait at the end, divided by the count; dispatch overlaps "
        "the device's work, as in a training loop.\n"
        "- **device_ms**: the GPU's own kernel time per call, read through CUPTI (NVIDIA's profiling interface); "
        "only on an NVIDIA GPU.\n\n"
        "TFLOP/s is the matmul FLOPs of the shape (4·B·N·T·S·H, halved when causal) over throughput_ms; "
        "device TFLOP/s uses device_ms. % of peak compares the better of the two with the GPU's datasheet figure."
    )

info = common.device_info_static()
on_gpu = info.backend == "gpu"
shape = common.require_shape()
support = common.supports(shape)

# Measured without a click when it costs a moment (cached for everyone afterwards); larger shapes
# wait for a button so that a stray sidebar change does not start a long CPU run.
AUTO_MEASURE_GFLOP = 1000.0 if on_gpu else 1.0
TIMINGS = ["wall_ms", "throughput_ms", "device_ms"]


# --------------------------------------------------------------------------------------------
# display helpers for this page (no measurement happens here)
# --------------------------------------------------------------------------------------------


def with_memory(df: pd.DataFrame) -> pd.DataFrame:
    if "temp_bytes" in df.columns:
        df = df.assign(**{"compiled temp memory": df["temp_bytes"].map(common.fmt_bytes)})
    return df


def show_table(df: pd.DataFrame, columns: list[str]) -> None:
    cols = [c for c in columns if c in df.columns]
    common.table(with_memory(df)[cols + (["compiled temp memory"] if "temp_bytes" in df.columns else [])],
                 hide_index=True, width="stretch")


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == bench.STATUS_OK] if "status" in df.columns else df


def timing_bars(df: pd.DataFrame, y: str = "implementation", title: str | None = None) -> alt.Chart:
    """Wall, throughput and device time side by side per implementation."""
    cols = [c for c in TIMINGS if c in df.columns and df[c].notna().any()]
    long = (df.melt(id_vars=[y], value_vars=cols, var_name="timing", value_name="ms").dropna(subset=["ms"])
            .replace({"timing": {c: common.label(c) for c in cols}}))
    order = [common.label(c) for c in cols]
    return (alt.Chart(long, title=title).mark_bar()
            .encode(y=alt.Y(f"{y}:N", title=None, axis=alt.Axis(labelLimit=320)), yOffset=alt.YOffset("timing:N", sort=order),
                    x=alt.X("ms:Q", title="ms per call"),
                    color=alt.Color("timing:N", sort=order),
                    tooltip=[y, "timing", alt.Tooltip("ms:Q", format=".4f")]))


def tflops_bars(df: pd.DataFrame, y: str = "implementation") -> alt.Chart:
    cols = [c for c in ("tflops", "device_tflops") if c in df.columns and df[c].notna().any()]
    names = {"tflops": "from throughput time", "device_tflops": "from device time"}
    long = (df.melt(id_vars=[y], value_vars=cols, var_name="from", value_name="TFLOP/s").dropna(subset=["TFLOP/s"])
            .replace({"from": names}))
    return (alt.Chart(long).mark_bar()
            .encode(y=alt.Y(f"{y}:N", title=None, axis=alt.Axis(labelLimit=320)), yOffset="from:N", x=alt.X("TFLOP/s:Q"),
                    color=alt.Color("from:N", title="TFLOP/s"),
                    tooltip=[y, "from", alt.Tooltip("TFLOP/s:Q", format=".3f")]))


def not_run(df: pd.DataFrame, x: str | None = None) -> None:
    """The cells that did not run, each with its reason."""
    bad = df[df["status"] != bench.STATUS_OK] if "status" in df.columns else df.iloc[0:0]
    if bad.empty:
        return
    st.markdown("**Not measured**")
    for _, r in bad.iterrows():
        where = f" at {x} = {r[x]}" if x else ""
        st.markdown(f"- `{r['implementation']}`{where} ({r.get('pass', 'forward')}): {r['status']}. {r['reason']}")


def metric_choice(df: pd.DataFrame, key: str, options=("wall_ms", "throughput_ms", "device_ms", "tflops",
                                                       "device_tflops")) -> str:
    present = [c for c in options if c in df.columns and df[c].notna().any()]
    return st.selectbox("y axis", present or ["wall_ms"], key=key, format_func=common.label)


def stored(key: str) -> dict | None:
    return st.session_state.setdefault("p7_results", {}).get(key)


def store(key: str, **value) -> None:
    st.session_state.setdefault("p7_results", {})[key] = value


def reference_box(table: str, title: str):
    """A container for the shipped H200 table (open by default on CPU), or None with a note when none ships."""
    df = reference.frame(table)
    box = st.expander(f"📦 {title}", expanded=not on_gpu)
    if df.empty:
        box.info("No H200 reference results ship with this version, so there is nothing measured on a GPU to show "
                 "here. On a GPU machine, `python -m attnlab bench --out attnlab/reference/h200.json` makes them.")
        return None, df
    box.caption(f"{reference.label()}. Shipped with the lab, not measured on this machine.")
    return box, df


# --------------------------------------------------------------------------------------------
# 1. every implementation at the sidebar's shape
# --------------------------------------------------------------------------------------------
st.header(f"Every implementation at {shape.describe()}")
runnable = [n for n, (ok, _) in support.items() if ok]
cells = [(shape, n, False) for n in runnable]
found = stored("default")
if found and found["cells"] == cells:
    rows = found["rows"]
elif shape.flops() / 1e9 <= AUTO_MEASURE_GFLOP or st.button(
        f"Time {len(runnable)} implementations at this shape", key="p7_default_run", type="primary"):
    rows = common.run_cells(cells, "Timing every implementation")
    store("default", cells=cells, rows=rows)
else:
    rows = None
    st.info(f"This shape is {shape.flops() / 1e9:,.1f} GFLOP per call; press the button to time it here.")

if rows is not None:
    df = bench.to_frame(rows)
    good = ok_rows(df)
    if not good.empty:
        show_table(good, ["implementation", "label", "compile_ms", "wall_ms", "wall_ms_iqr", "throughput_ms",
                          "device_ms", "kernel_count", "tflops", "device_tflops", "pct_of_peak"])
        common.download(df, f"timings_{shape.describe().replace(' ', '_')}", "Download these timings (CSV)")
        c1, c2 = st.columns(2)
        c1.altair_chart(timing_bars(good, title="Wall vs throughput vs device time"), width="stretch")
        c2.altair_chart(tflops_bars(good), width="stretch")
        if on_gpu and good["device_ms"].notna().any():
            st.markdown("**What ran on the GPU** (CUPTI, one call): when wall time is far above device time, "
                        "the difference is Python dispatch, launch and synchronisation, not attention.")
            common.table(good[["implementation", "device_ms", "wall_ms", "kernel_count", "kernels", "custom_calls"]],
                         hide_index=True, width="stretch")
        else:
            note = good["device_note"].dropna().iloc[0] if "device_note" in good else ""
            st.info("No device time or kernel names here: they come from CUPTI, NVIDIA's profiling interface, "
                    f"which needs an NVIDIA GPU ({note}). What you see as wall time on the CPU backend is the whole "
                    "computation plus dispatch; on a GPU at this size, most of it is dispatch.")
    not_run(df)
skipped = {n: reason for n, (ok, reason) in support.items() if not ok}
if skipped:
    st.markdown("**Cannot run this shape here**")
    common.table(pd.DataFrame([{"implementation": n, "label": impls.get(n).label, "why not": r}
                               for n, r in skipped.items()]), hide_index=True, width="stretch")

box, ref = reference_box("default", "The codelab's shape on an H200 (float32 and bfloat16)")
if box is not None:
    with box:
        good = ok_rows(ref).assign(run=lambda d: d["implementation"] + " · " + d["dtype"])
        show_table(good, ["implementation", "dtype", "wall_ms", "throughput_ms", "device_ms", "kernel_count",
                          "tflops", "device_tflops", "pct_of_peak"])
        st.altair_chart(timing_bars(good, y="run", title="H200: wall vs throughput vs device time"), width="stretch")
        not_run(ref)
        common.download(ref, "h200_default", "Download the H200 table (CSV)")


# --------------------------------------------------------------------------------------------
# 2 and 3. sweeps over sequence length and batch
# --------------------------------------------------------------------------------------------
PREFERRED = ["naive", "sdpa_xla", "sdpa_cudnn", "te_dpa"]


def sweep_section(key: str, field: str, options: list[int], default: list[int], make_shape, what: str) -> None:
    """Controls, a button, and the last result of one sweep (kept in the session)."""
    c1, c2, c3 = st.columns([3, 3, 2])
    names = c1.multiselect("implementations", list(impls.REGISTRY), key=f"{key}_impls",
                           default=[n for n in PREFERRED if support[n][0]])
    values = c2.multiselect(field, options, default=default, key=f"{key}_values")
    backward = c3.radio("pass", ["forward", "forward+backward"], key=f"{key}_pass", horizontal=True) != "forward"
    left_out = [n for n in PREFERRED if not support[n][0]]
    if left_out:
        c1.caption(f"Not selected by default, since they cannot run the sidebar's shape here: "
                   f"{', '.join(left_out)} (see above why). Selected anyway, they come back with their reason.")
    cells = [(make_shape(v), n, backward) for v in sorted(values) for n in names]
    if st.button(f"Run the {what} ({len(cells)} cells)", key=f"{key}_run", type="primary", disabled=not cells):
        store(key, rows=common.run_cells(cells, f"{what.capitalize()}"), base=make_shape(sorted(values)[0]))
    found = stored(key)
    if not found:
        st.caption("Not run yet in this session. Cells someone already measured come back at once (they are cached).")
        return
    df = bench.to_frame(found["rows"])
    st.caption(f"Last run: {what} from {found['base'].describe()}; cells not measured are listed with their reason.")
    good = ok_rows(df)
    left, right = st.columns([3, 2])
    with left:
        if good.empty:
            st.warning("No cell of this sweep could run here; the reasons are beside.")
        else:
            y = metric_choice(good, f"{key}_y")
            st.altair_chart(common.line_chart(good, x=field, y=y, title=f"{common.label(y)} by {field}"),
                            width="stretch")
    with right:
        not_run(df, x=field)
    show_table(df, [field, "implementation", "pass", "status", "wall_ms", "throughput_ms", "device_ms", "tflops",
                    "device_tflops", "pct_of_peak"])
    common.download(df, f"{key}_sweep", "Download this sweep (CSV)")


def reference_sweep(table: str, field: str, title: str) -> None:
    box, ref = reference_box(table, title)
    if box is None:
        return
    with box:
        good = ok_rows(ref)
        left, right = st.columns([3, 2])
        with left:
            y = metric_choice(good, f"ref_{table}_y", ("device_tflops", "tflops", "device_ms", "wall_ms"))
            st.altair_chart(common.line_chart(good, x=field, y=y, title=f"H200: {common.label(y)} by {field}")
                            , width="stretch")
        with right:
            not_run(ref, x=field)
        common.download(ref, f"h200_{table}", "Download the H200 sweep (CSV)")


st.header("Sequence-length sweep")
st.write("q_len = kv_len = T grows; the rest of the sidebar's shape stays. Naive attention materialises the "
         "B·N·T·T scores, so its memory and time grow as T²; where a cell would not fit, it is left out with its "
         "reason." + (" On this GPU the sweep goes on to 16,384." if on_gpu else ""))
seq = [64, 128, 256, 512, 1024] + ([2048, 4096, 8192, 16384] if on_gpu else [])
sweep_section("p7_seq", "q_len", seq, [64, 128, 256, 512, 1024], lambda t: shape.replace(q_len=t, kv_len=t),
              "sequence sweep")
reference_sweep("seq_sweep", "q_len", "The sequence sweep on an H200 (bfloat16, B4 N8 H64)")

st.header("Batch-size sweep")
st.write("B grows at T = 256. Small batches leave most of a GPU idle, so TFLOP/s climbs with B until the "
         "device is full; the time per call stays nearly flat until then.")
sweep_section("p7_batch", "batch", [1, 2, 4, 8, 16] + ([32, 64] if on_gpu else []), [1, 2, 4, 8, 16],
              lambda b: shape.replace(batch=b, q_len=256, kv_len=256), "batch sweep")
reference_sweep("batch_sweep", "batch", "The batch sweep on an H200 (bfloat16, T 256, N8 H64)")


# --------------------------------------------------------------------------------------------
# 4. long context, measured on the H200
# --------------------------------------------------------------------------------------------
st.header("Long context on the H200")
st.write("Where fused kernels earn their keep: T from 2,048 to 16,384, forward and forward+backward, with and "
         "without the causal mask. The GPU's own ceilings (a large bf16 matmul and a large copy) say how close "
         "attention comes to the hardware; the fidelity table checks the harness against the plainest timing loop.")
long = reference.frame("long_context")
if long.empty:
    st.info("No H200 reference results ship with this version, so this section has nothing to show.")
else:
    st.caption(f"📦 {reference.label()}")
    c1, c2, c3 = st.columns(3)
    causal = c1.radio("mask", ["full", "causal"], key="p7_long_mask", horizontal=True) == "causal"
    head_dims = sorted(long["head_dim"].unique().tolist())
    head_dim = c2.selectbox("head_dim", head_dims, index=len(head_dims) - 1, key="p7_long_hd")
    part = long[(long["causal"] == causal) & (long["head_dim"] == head_dim)]
    good = ok_rows(part)
    y = c3.selectbox("TFLOP/s from", [c for c in ("device_tflops", "tflops") if c in good and good[c].notna().any()]
                     or ["tflops"], key="p7_long_y", format_func={"device_tflops": "device time (CUPTI)",
                                                                  "tflops": "throughput time"}.get)
    charts = st.columns(2)
    for col, p in zip(charts, ["forward", "forward+backward"], strict=True):
        rows_p = good[good["pass"] == p]
        if not rows_p.empty:
            col.altair_chart(common.line_chart(rows_p, x="q_len", y=y, title=f"{p}, {'causal' if causal else 'full'}, "
                                               f"H{head_dim}", y_title="TFLOP/s"),
                             width="stretch")
    not_run(part, x="q_len")
    common.download(long, "h200_long_context", "Download the long-context table (CSV)")

    ceil = (reference.load() or {}).get("ceilings") or {}
    peak = ((reference.load() or {}).get("environment") or {}).get("peak") or {}
    if ceil:
        m1, m2 = st.columns(2)
        m1.metric(f"bf16 matmul {ceil.get('matmul_n')}×{ceil.get('matmul_n')}", f"{ceil['matmul_bf16_tflops']:.0f} TFLOP/s",
                  help=f"datasheet: {peak.get('bf16_tflops')} TFLOP/s dense" if peak else None)
        m2.metric("device-to-device copy", f"{ceil['copy_tb_s']:.2f} TB/s",
                  help=f"datasheet: {peak.get('memory_tb_s')} TB/s" if peak else None)
        if peak:
            st.caption(f"Datasheet ({peak.get('source')}): {peak.get('bf16_tflops')} bf16 TFLOP/s dense, "
                       f"{peak.get('memory_tb_s')} TB/s. The measured ceilings are what attention can hope for.")
    fid = reference.frame("fidelity")
    if not fid.empty:
        st.markdown("**Fidelity**: the harness against a bare `for` loop at the same shapes "
                    "(harness ÷ bare loop near 1 means the harness adds nothing of its own).")
        first = [c for c in ("shape", "harness_over_bare", "harness_tflops", "bare_tflops", "harness_device_tflops",
                             "harness_wall_ms", "harness_device_ms") if c in fid]
        common.table(fid[first + [c for c in fid.columns if c not in first]], hide_index=True, width="stretch",
                     column_config={"harness_over_bare": st.column_config.NumberColumn("harness ÷ bare loop", format="%.3f"),
                                    "harness_tflops": st.column_config.NumberColumn("harness TFLOP/s", format="%.1f"),
                                    "bare_tflops": st.column_config.NumberColumn("bare loop TFLOP/s", format="%.1f")})
        common.download(fid, "h200_fidelity", "Download the fidelity table (CSV)")
