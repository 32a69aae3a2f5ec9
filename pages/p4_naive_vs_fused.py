"""Lab step 4: naive attention from scratch against jax.nn.dot_product_attention: same answer,
different programs (which kernel ran), and memory O(T²) against O(T)."""

import inspect

import altair as alt
import pandas as pd
import streamlit as st

from attnlab import implementations as impls
from attnlab import layout
from attnlab.shapes import AttentionShape
from pages import common

COMPARED = ["naive", "sdpa_auto", "sdpa_xla", "sdpa_cudnn"]
TIMED = ["naive", "sdpa_auto", "sdpa_cudnn"]


@st.cache_data(max_entries=64, ttl=6 * 3600, show_spinner="Running naive attention and jax.nn.dot_product_attention ...")
def pair(shape: AttentionShape) -> tuple[layout.Pair | None, str]:
    try:
        return layout.compare_pair(shape, "naive", "sdpa_auto"), ""
    except ValueError as e:
        return None, str(e)


@st.cache_data(max_entries=64, ttl=6 * 3600, show_spinner="Every implementation against the float64 reference ...")
def accuracy(shape: AttentionShape) -> tuple[pd.DataFrame, str]:
    return layout.accuracy_table(shape)


@st.cache_data(max_entries=64, ttl=6 * 3600, show_spinner="Compiling (not running) each implementation ...")
def compiled(shape: AttentionShape) -> pd.DataFrame:
    return layout.compiled_summary(shape, COMPARED)


@st.cache_data(max_entries=32, ttl=6 * 3600, show_spinner=False)
def memory_across_lengths(shape: AttentionShape, lengths: tuple[int, ...]) -> pd.DataFrame:
    return layout.compiled_memory(shape, ["naive", "sdpa_xla", "sdpa_cudnn"], lengths)


def micro(ms) -> str:
    return "—" if ms is None or pd.isna(ms) else f"{ms * 1e3:,.1f} µs"


st.title("4 · Naive vs fused")
st.write(
    "Attention from scratch is four lines of `jax.numpy`. `jax.nn.dot_product_attention` computes the same "
    "function, but it may hand the whole computation to one fused kernel (cuDNN's flash attention) that "
    "never writes the T × S scores to memory. Same answer, different programs: this page checks the "
    "first claim and shows the second, from the compiled programs and, on a GPU, from the kernels that ran."
)
st.code(inspect.getsource(impls.naive_attention), language="python")

shape = common.require_shape()
info = common.device_info()
tol = impls.TOLERANCES[shape.dtype]

st.subheader(f"Same answer? At {shape.describe()}")
p, why = pair(shape)
if p is None:
    st.error(why)
else:
    c1, c2, c3, c4 = st.columns(4)
    c1.metric(f"naive output ({p.a_dtype})", str(p.a_shape))
    c2.metric(f"jax.nn.dot_product_attention output ({p.b_dtype})", str(p.b_shape))
    c3.metric("max |naive − SDPA|", f"{p.max_abs_difference:.3g}")
    c4.metric(f"allclose (rtol {p.rtol:g}, atol {p.atol:g})", str(p.allclose))
    st.caption(f"The tolerance is the lab's for {shape.dtype} inputs (`implementations.TOLERANCES`).")

st.markdown("**Each implementation against a float64 reference** (NumPy, same inputs)")
acc, note = accuracy(shape)
ok = acc[acc.status == "ok"]
if not ok.empty:
    cols = [c for c in ("implementation", "label", "output shape", "output dtype", "relative_error", "max_abs_error",
                        "allclose") if c in ok.columns]
    common.table(ok[cols], hide_index=True, width="stretch",
                 column_config={"relative_error": st.column_config.NumberColumn("relative error", format="%.2e"),
                                "max_abs_error": st.column_config.NumberColumn("max abs error", format="%.2e")})
    st.caption(f"allclose at rtol {tol['rtol']:g}, atol {tol['atol']:g}; relative error is ‖out − ref‖ / ‖ref‖."
               + (f" {note}." if note else ""))
    fp8 = ok[ok["implementation"].str.contains("fp8") & ~ok["allclose"].astype(bool)]
    if not fp8.empty:
        st.caption(f"{', '.join(fp8['implementation'])}: FP8 (E4M3) keeps 3 mantissa bits, so it misses a "
                   f"{shape.dtype} tolerance by design; page 9 measures what that buys.")
skipped = acc[acc.status != "ok"]
if not skipped.empty:
    st.markdown("Not run here:")
    common.table(skipped[["implementation", "label", "status", "reason"]], hide_index=True, width="stretch")

st.subheader("Which kernel ran?")
st.write(
    "The compiled program tells. A cuDNN fused attention appears as one custom call (`__cudnn$fmha…`); "
    "XLA's own path is a handful of fusions (a matmul, a softmax, another matmul), each its own kernel on a GPU."
)
prog = compiled(shape)
common.table(prog.assign(temp=prog["temp_bytes"].map(common.fmt_bytes)).drop(columns=["temp_bytes"]),
             hide_index=True, width="stretch")
auto = prog.set_index("implementation").loc["sdpa_auto"]
if auto["runs"] == "yes":
    st.success(f"`implementation=None` at this shape and dtype compiled to: **{auto['what ran']}**.")

st.markdown("**Kernels and time per call**")
st.write(
    "Wall time (the codelab's `perf_counter` around one call and `block_until_ready`) includes Python "
    "dispatch; at small shapes that is most of it. Device time is the kernels' own time, read through CUPTI."
)
if st.button("Time naive and fused", key="p4_time"):
    cells = [(shape, n, False) for n in TIMED if common.supports(shape)[n][0]]
    st.session_state["p4_timing_result"] = (shape, common.run_cells(cells, "Timing"))
saved = st.session_state.get("p4_timing_result")
if saved and saved[0] == shape:
    rows = pd.DataFrame(saved[1])
    good = rows[rows.status == "ok"]
    if not good.empty and good["device_ms"].notna().any():
        parts = [f"{r.implementation}: {int(r.kernel_count or 0)} kernel{'s' if r.kernel_count != 1 else ''}, "
                 f"{micro(r.device_ms)}" for r in good.itertuples()]
        walls = ", ".join(f"{r.implementation} {micro(r.wall_ms)}" for r in good.itertuples())
        st.success("; ".join(parts) + f". Wall time per call: {walls}.")
    elif not good.empty:
        walls = ", ".join(f"{r.implementation} {micro(r.wall_ms)}" for r in good.itertuples())
        st.info(f"Wall time per call: {walls}. CUPTI device time and kernel names need an NVIDIA GPU "
                f"({good['device_note'].iloc[0]}), so only wall time is shown here.")
    cols = [c for c in ("implementation", "status", "wall_ms", "throughput_ms", "device_ms", "kernel_count", "kernels",
                        "reason") if c in rows.columns]
    common.table(rows[cols], hide_index=True, width="stretch")
    common.download(rows, f"naive_vs_fused_{shape.describe().replace(' ', '_')}")
if not common.supports(shape)["sdpa_cudnn"][0]:
    st.caption(f"cuDNN is not timed at this shape: {common.supports(shape)['sdpa_cudnn'][1]} (page 5 runs it in bfloat16).")

st.subheader("Memory: O(T²) against O(T)")
st.write(
    "Naive attention writes the (B, N, T, S) scores and weights to memory, so its scratch space grows as "
    "T². A fused kernel streams over the keys and keeps only running maxima and sums per query in fast "
    "on-chip memory: what it holds in device memory is the inputs and the output, O(T), plus a small "
    "workspace. XLA reports both when it compiles (`compiled.memory_analysis()`: `temp_size_in_bytes` for "
    "scratch, argument and output sizes for the rest), so each point below is a compile, not a run: "
    "nothing is allocated."
)
gpu = info.backend == "gpu"
options = [128, 256, 512, 1024, 2048, 4096, 8192, 16384] if gpu else [128, 256, 512, 1024, 2048, 4096]
c1, c2 = st.columns(2)
dtypes = ["float32", "bfloat16", "float16"]
mem_dtype = c1.selectbox("dtype for this chart", dtypes, index=dtypes.index(shape.dtype), key="p4_mem_dtype",
                         help="cuDNN takes bfloat16 or float16 only.")
longest = c2.select_slider("longest sequence T = S", options=options, value=8192 if gpu else 2048, key="p4_mem_max")
first = 256 if gpu else 128
lengths = tuple(t for t in options if first <= t <= longest)
mem_shape = shape.replace(dtype=mem_dtype)
measures = {"scratch (temp_bytes)": "temp_bytes", "everything the call holds (inputs + output + scratch)": "total_bytes"}
measure = st.radio("what to count", list(measures), horizontal=True, key="p4_mem_measure")
y = measures[measure]
if st.button("Compile across lengths", key="p4_memory"):
    with st.status(f"Compiling naive, XLA and cuDNN for T = {', '.join(map(str, lengths))} ...") as status:
        st.session_state["p4_memory_result"] = ((mem_shape, lengths), memory_across_lengths(mem_shape, lengths))
        status.update(label="Compiled", state="complete")
saved = st.session_state.get("p4_memory_result")
if saved and saved[0] == (mem_shape, lengths):
    mem = saved[1]
    if "temp_bytes" in mem.columns:
        mem = mem.assign(total_bytes=mem["temp_bytes"] + mem["argument_bytes"] + mem["output_bytes"])
        okm = mem[(mem.status == "ok") & (mem[y].fillna(0) > 0)]
    else:
        okm = mem.iloc[:0]
    if not okm.empty:
        scores = mem.drop_duplicates("q_len").assign(implementation="float32 scores B·N·T·S (for scale)")
        lines = alt.Chart(okm).mark_line(point=True).encode(
            x=alt.X("q_len:Q", scale=alt.Scale(type="log", base=2), title="sequence length T = S (log)"),
            y=alt.Y(f"{y}:Q", scale=alt.Scale(type="log"), axis=common.bytes_axis(f"{measure} (log)")),
            color="implementation:N", strokeDash="implementation:N", tooltip=["implementation", "q_len", "temp_bytes", "total_bytes", "what ran"])
        guide = alt.Chart(scores).mark_line(strokeDash=[4, 4], color="gray").encode(
            x="q_len:Q", y="score_bytes_float32:Q", tooltip=["q_len", "score_bytes_float32"])
        st.altair_chart((lines + guide).properties(title=f"{measure} at {mem_shape.describe()} with T = S varied"),
                        width="stretch")
        st.caption("Dashed: the bytes of one float32 (B, N, T, S) score matrix. A slope of 2 on this log-log chart "
                   "is O(T²), a slope of 1 is O(T), a flat line is a fixed workspace.")
        grew = layout.growth(okm, y=y)
        if not grew.empty:
            st.markdown("Measured here: " + "; ".join(
                f"**{r.implementation}** ×{r.ratio:,.0f} from T = {r[2]:,} to {r[3]:,} (slope {r.slope:.1f})"
                for r in grew.itertuples()) + ".")
            naive = grew[grew.implementation == "naive"]
            handed = okm[(okm.implementation == "naive") & okm["what ran"].str.contains("handed to a library", na=False)]
            if not naive.empty and naive.slope.iloc[0] < 1.5 and not handed.empty:
                st.info("Here naive's scratch does not grow as T²: on this CPU backend XLA hands naive's whole "
                        "matmul → softmax → matmul to one library fusion (`ynn_fusion`), which keeps the scores in "
                        "its own scratch, and `memory_analysis()` counts only XLA's buffers. What grows here is "
                        "the transposed copies of Q, K and V, O(T). On a GPU the naive program writes the "
                        "(B, N, T, S) scores between its kernels: the H200 chart below shows slope 2.")
    zero = mem[(mem.status == "ok") & (mem.get(y, pd.Series(dtype=float)).fillna(0) <= 0)]
    if not zero.empty:
        st.caption(f"{', '.join(zero['implementation'].unique())} reported no scratch bytes at some lengths "
                   "(not drawn on the log scale).")
    done = mem[mem.status == "ok"]
    if not done.empty:
        common.table(done.assign(scratch=done["temp_bytes"].map(common.fmt_bytes),
                                 total=done["total_bytes"].map(common.fmt_bytes),
                                 scores=done["score_bytes_float32"].map(common.fmt_bytes))
                     [["implementation", "q_len", "kv_len", "scratch", "total", "scores", "what ran"]],
                     hide_index=True, width="stretch",
                     column_config={"scores": "float32 scores (B·N·T·S·4)", "total": "inputs + output + scratch"})
    common.download(mem, f"compiled_memory_{mem_shape.describe().replace(' ', '_')}")
    missing = mem[mem.status != "ok"].drop_duplicates("implementation")
    for r in missing.itertuples():
        st.caption(f"{r.implementation} not compiled here: {r.reason}")

ref = common.reference_note("long_context")
if not ref.empty and {"temp_bytes", "q_len", "implementation"} <= set(ref.columns):
    keep = ref["temp_bytes"].fillna(0) > 0
    for column, wanted in (("status", "ok"), ("pass", "forward")):
        if column in ref.columns:
            keep &= ref[column] == wanted
    fwd = ref[keep]
    keys = [c for c in ("batch", "heads", "head_dim", "dtype", "causal") if c in fwd.columns]
    if keys and not fwd.empty:  # one configuration, so the lines differ only by T and implementation
        fwd = fwd[(fwd[keys] == fwd[keys].iloc[0]).all(axis=1)]
    if not fwd.empty:
        st.markdown("**Shipped reference: compiled scratch memory measured on the GPU named above (forward pass)**")
        st.altair_chart(alt.Chart(fwd).mark_line(point=True).encode(
            x=alt.X("q_len:Q", scale=alt.Scale(type="log", base=2, nice=False),
                    axis=alt.Axis(values=sorted(fwd["q_len"].unique().tolist())), title="T = S (log)"),
            y=alt.Y("temp_bytes:Q", scale=alt.Scale(type="log"), axis=common.bytes_axis("scratch memory (log)")),
            color="implementation:N", strokeDash="implementation:N",
            tooltip=[c for c in ("shape", "implementation", "temp_bytes") if c in fwd.columns]),
            width="stretch")
        wide = fwd.pivot_table(index="q_len", columns="implementation", values="temp_bytes")
        if {"naive", "sdpa_xla"} <= set(wide.columns) and (wide["naive"] == wide["sdpa_xla"]).all():
            st.caption("naive and sdpa_xla compile to the same scratch at every T (XLA makes the same program of "
                       "both), so their lines lie on top of each other (dashed apart here).")
        grew = layout.growth(fwd)
        if not grew.empty:
            st.caption("Growth: " + "; ".join(f"{r.implementation} ×{r.ratio:,.0f} from T = {r[2]:,} to {r[3]:,} "
                                              f"(slope {r.slope:.1f})" for r in grew.itertuples()) + ".")
        all_rows = ref[ref["pass"] == "forward"] if "pass" in ref.columns else ref
        if keys and not all_rows.empty:
            all_rows = all_rows[(all_rows[keys] == fwd[keys].iloc[0]).all(axis=1)]
        absent = all_rows[all_rows.get("status") != "ok"] if "status" in all_rows.columns else all_rows.iloc[:0]
        for r in absent.drop_duplicates("implementation").itertuples():
            st.caption(f"{r.implementation} has no point from T = {r.q_len:,}: {r.reason}")
        if keys:
            st.caption("Reference configuration: " + ", ".join(f"{k} {fwd[k].iloc[0]}" for k in keys) + ".")
