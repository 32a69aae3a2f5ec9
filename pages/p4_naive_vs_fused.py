"""Lab step 4: naive attention against jax.nn.dot_product_attention: same answer; what
implementation=None compiles to (XLA's own code, today); memory forward and backward."""

import inspect

import streamlit as st

from attnlab.backends import REGISTRY
from attnlab.math import attention
from attnlab.math.checks import TOLERANCES
from attnlab.measure import runs
from attnlab.studies import timing_demo
from pages import codeblock, common, fused_ui, memory_ui, sections, tables, waiting, workers, yourturn_ui

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
info = workers.device_info()

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
            same = fused_ui.same_program(shape, "naive", "sdpa_auto")
            st.caption(f"SDPA is `jax.nn.dot_product_attention(implementation=None)`. The difference is over the part "
                       f"of the outputs checked against float64{' (' + naive.reference_note + ')' if naive.reference_note else ''}. "
                       + ("The two compiled to the same program here, so they agree exactly." if same and diff == 0 else
                          "The two compiled to different programs here, yet they agree to the last bit: their "
                          "arithmetic rounds in the same order." if diff == 0 else
                          f"The two compiled to {'the same' if same else 'different'} programs here; they round in a "
                          "different order, so the last bits differ."))
        elif acc is not None:
            st.warning("naive or SDPA did not run: the reasons are below.")
        if acc is not None:
            st.markdown("**Each implementation against a float64 reference** (NumPy, same inputs)")
            sections.results(acc, ["implementation", "label", "output_shape", "output_dtype", "relative_error",
                                   "max_abs_error", "allclose"])
            st.caption(f"allclose at rtol {tol['rtol']:g}, atol {tol['atol']:g} (`checks.TOLERANCES['{shape.dtype}']`): "
                       "every element within atol + rtol·|reference|, so an error above atol passes where the reference "
                       "is large; "
                       "relative error is ‖out − ref‖ / ‖ref‖. FP8 misses a float tolerance by design (page 9).")

st.subheader("Time per call")
timed = common.runnable(shape, ["naive", "sdpa_auto", "sdpa_cudnn"])
st.write(f"Wall time (perf_counter around a call and `block_until_ready`) includes Python dispatch. Runs here: "
         f"{', '.join(timed)}. " + ("Device time (read through CUPTI, NVIDIA's profiling interface) is the kernels' own time." if info.backend == "gpu" else
                                     "Device time and kernel names (read through CUPTI, NVIDIA's profiling interface) need an NVIDIA GPU: page 7 shows the H200's."))
if sections.on_demand("p4_time", f"Time {', '.join(timed)}", shape, timing=((shape,), len(timed))):
    with waiting.fresh():
        sections.queue_notice()
        rows = sections.guarded(common.frame, shape, tuple(timed), timed=True, accuracy=False, what="Timing")
        if rows is not None:
            gpu_cols = ["device_ms", "kernel_count", "kernels"] if info.backend == "gpu" else []  # CUPTI's: blank on a CPU
            sections.results(rows, ["implementation", "wall_ms", "throughput_ms", *gpu_cols])
            if note := timing_demo.spread_note(rows, info.backend == "gpu"):  # how far to trust a difference
                st.caption(note)
            tables.download(rows, f"naive_vs_fused_{shape.describe().replace(' ', '_')}")

memory_ui.memory_sections(shape, info)
yourturn_ui.exercises_of(__file__, shape)
