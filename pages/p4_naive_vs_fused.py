"""Lab step 4: naive attention against jax.nn.dot_product_attention: same answer; what
implementation=None compiles to (XLA's own code, today); memory forward and backward."""

import inspect

import streamlit as st

from attnlab.backends import REGISTRY
from attnlab.math import attention
from attnlab.math.checks import TOLERANCES
from attnlab.measure import runs
from attnlab.studies import memory
from pages import codeblock, common, fused_ui, sections, waiting, yourturn_ui

PAGE_NAMES = ("naive", "sdpa_auto", "sdpa_xla", "sdpa_cudnn")  # this page's subject

st.title("4 · Naive vs fused")
st.write(
    "Attention from scratch is four stages in `jax.numpy` (scores, scale, softmax, attend). "
    "`jax.nn.dot_product_attention` computes the same function, and it can hand the whole computation to one "
    "fused kernel (cuDNN's flash attention) that never writes the T × S scores to memory. But with "
    "`implementation=None` it does not: today JAX picks **XLA's own code**, which keeps the whole T × S score "
    "matrix just as naive does. This page shows both facts from the programs compiled on this machine."
)
codeblock.code("import jax.numpy as jnp\n\n" + inspect.getsource(attention.naive_attention))
with st.expander("The lab's own naive attention (masks, GQA, the float64 reference): `attnlab.math.attention`"):
    codeblock.code(inspect.getsource(attention.weights) + "\n\n" + inspect.getsource(attention.attention))

shape = common.require_shape()
info = common.device_info()

st.subheader("What does `implementation=None` run?")
st.write(f"Each call compiled (not run) at {shape.describe()}; the optimised program says which kernels it calls.")
fused_ui.none_is_xla(shape)

st.subheader("Same answer?")
tol = TOLERANCES[shape.dtype]
every = st.toggle("every implementation in the registry, not only this page's four", key="p4_every",
                  help="Adds the plain-JAX flash attention, tokamax's kernels, TransformerEngine and FP8 where they run.")
compared = tuple(REGISTRY) if every else PAGE_NAMES
if sections.on_demand("p4_same", "Run naive, SDPA and the float64 reference", (shape, compared),
                      auto=sections.small(shape) and not every):
    with waiting.fresh():
        # program=True: the programs described above and compared below are the ones checked here
        acc = sections.guarded(common.frame, shape, compared, program=True, what="Running the implementations")
        res = {r.implementation: r for r in common.run(shape, compared, program=True)} if acc is not None else {}
        naive, auto = res.get("naive"), res.get("sdpa_auto")
        if naive and auto and naive.ok and auto.ok:
            diff = runs.max_difference(naive, auto)
            c1, c2, c3, c4 = st.columns(4)
            c1.metric(f"naive output ({naive.output_dtype})", str(naive.output_shape))
            c2.metric(f"SDPA output ({auto.output_dtype})", str(auto.output_shape))
            c3.metric("max |naive − SDPA|", f"{diff:.3g}")
            c4.metric("allclose, both", str(naive.accuracy.allclose and auto.accuracy.allclose),
                      help=f"each against float64 at rtol {tol['rtol']:g}, atol {tol['atol']:g}")
            same = "the same" if fused_ui.same_program(shape, "naive", "sdpa_auto") else "different"
            st.caption(f"SDPA is `jax.nn.dot_product_attention(implementation=None)`. The difference is over the part "
                       f"of the outputs checked against float64{' (' + naive.reference_note + ')' if naive.reference_note else ''}. "
                       f"The two compiled to {same} programs here"
                       + (": exactly 0 means every rounding happened the same way, in the same order."
                          if diff == 0 else ": they round in a different order, so the last bits differ."))
        elif acc is not None:
            st.warning("naive or SDPA did not run: the reasons are below.")
        if acc is not None:
            st.markdown("**Each implementation against a float64 reference** (NumPy, same inputs)")
            sections.results(acc, ["implementation", "label", "output_shape", "output_dtype", "relative_error",
                                   "max_abs_error", "allclose"])
            st.caption(f"allclose at rtol {tol['rtol']:g}, atol {tol['atol']:g} (`checks.TOLERANCES['{shape.dtype}']`); "
                       "relative error is ‖out − ref‖ / ‖ref‖. FP8 misses a float tolerance by design (page 9).")

st.subheader("Time per call")
timed = common.runnable(shape, ["naive", "sdpa_auto", "sdpa_cudnn"])
st.write(f"Wall time (perf_counter around a call and `block_until_ready`) includes Python dispatch. Runs here: "
         f"{', '.join(timed)}. " + ("Device time (read through CUPTI, NVIDIA's profiling interface) is the kernels' own time." if info.backend == "gpu" else
                                     "Device time and kernel names (read through CUPTI, NVIDIA's profiling interface) need an NVIDIA GPU: page 7 shows the H200's."))
if sections.on_demand("p4_time", f"Time {', '.join(timed)}", shape):
    with waiting.fresh():
        sections.queue_notice()
        rows = sections.guarded(common.frame, shape, tuple(timed), timed=True, accuracy=False, what="Timing")
        if rows is not None:
            gpu_cols = ["device_ms", "kernel_count", "kernels"] if info.backend == "gpu" else []  # CUPTI's: blank on a CPU
            sections.results(rows, ["implementation", "wall_ms", "throughput_ms", *gpu_cols])
            common.download(rows, f"naive_vs_fused_{shape.describe().replace(' ', '_')}")

st.subheader("Memory: who keeps the T × S scores")
st.write(
    "XLA reports what a program needs when it compiles it (`compiled.memory_analysis()`: `temp_size_in_bytes` "
    "is the scratch beyond inputs and output), so each point below is a compile, not a run: nothing is "
    "allocated. Naive and XLA's attention hold (B, N, T, S) matrices, O(T²); a flash kernel streams over the "
    "keys and holds O(T)."
)
gpu = info.backend == "gpu"
options = [128, 256, 512, 1024, 2048, 4096, 8192, 16384] if gpu else [128, 256, 512, 1024, 2048, 4096]
c1, c2, c3 = st.columns(3)
dtypes = ["float32", "bfloat16", "float16"]
mem_dtype = c1.selectbox("dtype", dtypes, index=dtypes.index(shape.dtype), key="p4_mem_dtype",
                         help="cuDNN takes bfloat16 or float16 only.")
longest = c2.select_slider("longest T = S", options=options, value=8192 if gpu else 1024, key="p4_mem_max")
measures = {"scratch (temp_bytes)": "temp_bytes", "inputs + output + scratch": "total_bytes"}
measure = c3.radio("count", list(measures), key="p4_mem_measure")
lengths = tuple(t for t in options if (256 if gpu else 128) <= t <= longest)
mem_shape, names = shape.replace(dtype=mem_dtype), ("naive", "sdpa_xla", "sdpa_cudnn")
if sections.on_demand("p4_memory", "Compile across lengths", (mem_shape, lengths)):
    with waiting.fresh():
        mem = sections.guarded(fused_ui.compiled_memory, mem_shape, names, lengths,
                               what="Compiling across lengths")
        if mem is not None:
            fused_ui.memory_chart(mem, measures[measure], f"{measure}, {mem_shape.describe()}, T = S varied",
                                  f"{measure} (log)")
            fused_ui.growth(mem, measures[measure])
            ok = mem[mem["status"] == runs.OK]
            common.text_table(ok.assign(total=ok["total_bytes"].map(common.fmt_bytes),
                                          scratch=ok["temp_bytes"].map(common.fmt_bytes))
                                [["implementation", "q_len", "scratch", "total", "what_ran"]])
            fused_ui.not_run(mem)
            common.download(mem, f"compiled_memory_{mem_shape.describe().replace(' ', '_')}")
lc = memory.shipped_configuration(sections.shipped_frame("long_context", caption=False))
fwd = lc[lc["pass"] == "forward"] if len(lc) else lc
if len(fwd):
    st.markdown(f"**📦 Shipped from the H200: compiled scratch, forward pass, {fwd['shape'].iloc[0]} with T varied**")
    fused_ui.memory_chart(fwd, "temp_bytes", "H200, forward pass (shipped)", "scratch, temp_bytes (log)")
    if "cudnn_fp8" in set(fwd["implementation"]):
        st.caption("`cudnn_fp8` is cuDNN's attention with Q, K and V in 8-bit floats (FP8); page 9 introduces it.")
    fused_ui.growth(fwd, where="📦 On the H200 (shipped)")
    fused_ui.not_run(fwd)

st.subheader("The backward pass")
keep = memory.kept_for_backward(shape)
st.write(
    "Training needs gradients, and the gradient of softmax needs the softmax's output. Naive attention (and XLA's "
    "path) keeps the whole (B, N, T, S) weights from the forward pass for it; a flash kernel keeps only one "
    "log-sum-exp per query row (log Σ exp of the row's scores: the softmax's denominator in one number), O(T), and in the backward pass **recomputes the scores tile by tile** from Q and K, "
    "trading a little compute for memory. At this page's shape the model (`memory.kept_for_backward`) gives "
    + " against ".join(f"**{common.fmt_bytes(v)}** ({k})" for k, v in keep.items()) + ".")
bw_lengths = tuple(t for t in (128, 256, 512, 1024) if t <= longest)
if sections.on_demand("p4_backward", "Compile forward + backward", (mem_shape, bw_lengths)):
    with waiting.fresh():
        both = sections.guarded(fused_ui.compiled_memory, mem_shape, names, bw_lengths,
                                True, what="Compiling forward + backward")
        if both is not None:
            fused_ui.memory_chart(both, "temp_bytes", f"forward+backward scratch here, {mem_shape.describe()}",
                                  "scratch, temp_bytes (log)")
            fused_ui.growth(both)
            fused_ui.not_run(both)
bwd = lc[lc["pass"] == "forward+backward"] if len(lc) else lc
if len(bwd):
    st.markdown(f"**📦 Shipped from the H200: forward+backward scratch, {bwd['shape'].iloc[0]} with T varied**")
    fused_ui.memory_chart(bwd, "temp_bytes", "H200, forward+backward (shipped)", "scratch, temp_bytes (log)")
    fused_ui.not_run(bwd)
    if (bwd["status"] == runs.OOM).any():
        st.caption("Out of memory on the H200: naive's backward holds the (B, N, T, S) weights kept from the "
                   "forward pass and their gradient, several float32 T × S matrices at once (the H200's own words).")
yourturn_ui.exercises_of(__file__, shape)
