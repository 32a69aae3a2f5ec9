"""Lab step 5: cuDNN's fused attention asked for by name, in bfloat16, against XLA in bfloat16; why
the codelab has to name it (implementation=None runs XLA, which keeps the T × S scores)."""

import streamlit as st

from attnlab import backends
from attnlab.math.checks import TOLERANCES
from attnlab.measure import runs
from attnlab.shapes import AttentionShape
from attnlab.studies import clocks
from pages import codeblock, common, fused_ui, sections, tables, waiting, workers


def snippet(shape: AttentionShape) -> str:
    tol = TOLERANCES["bfloat16"]
    return f'''import jax
import jax.numpy as jnp

kq, kk, kv = jax.random.split(jax.random.key(0), 3)
q = jax.random.normal(kq, {shape.q_shape()}, dtype=jnp.bfloat16)  # (B, T, N, H)
k = jax.random.normal(kk, {shape.kv_shape()}, dtype=jnp.bfloat16)  # (B, S, K, H)
v = jax.random.normal(kv, {shape.kv_shape()}, dtype=jnp.bfloat16)

def attention(implementation):
    return jax.jit(lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, is_causal={shape.causal},
        implementation=implementation))

# as the codelab writes it: "cudnn" raises if cuDNN cannot run the call,
# so try it and remember the answer
HAS_CUDNN_SDPA = False
try:
    cudnn, xla = attention("cudnn"), attention("xla")
    out_cudnn = cudnn(q, k, v).astype(jnp.float32)
    HAS_CUDNN_SDPA = True
    out_xla = xla(q, k, v).astype(jnp.float32)
    print("max |cuDNN - XLA|:", jnp.abs(out_cudnn - out_xla).max())
    print("allclose:", jnp.allclose(out_cudnn, out_xla,
                                    rtol={tol['rtol']:g}, atol={tol['atol']:g}))
    hlo = cudnn.lower(q, k, v).compile().as_text()
    print("cuDNN calls:", hlo.count("__cudnn$fmha"))
except Exception as e:
    print(f"cuDNN SDPA not available on this GPU: {{e}}")
    print("Continuing with XLA backend only.")
'''


st.title("5 · cuDNN")
st.write(
    "`jax.nn.dot_product_attention(..., implementation=\"cudnn\")` asks for cuDNN's fused flash-attention kernel "
    "by name. For each block of queries it streams K and V through on-chip memory tile by tile (so K and V are "
    "read once per query block), keeps that block's scores on chip and writes only the output. Named explicitly, "
    "it never falls back silently: if cuDNN cannot take the call, JAX raises and says why. cuDNN's kernel takes "
    "half-precision inputs, so this page uses your shape in bfloat16."
)
shape = common.require_shape()
bf = shape.replace(dtype="bfloat16")
info = workers.device_info()
if shape.dtype != "bfloat16":
    st.caption(f"The sidebar's dtype is {shape.dtype}; this page uses bfloat16: **{bf.describe()}**.")
why_not = common.unmet(bf, ("sdpa_cudnn",))["sdpa_cudnn"]
names = ("sdpa_cudnn", "sdpa_xla") if not why_not else ("sdpa_xla",)
if sections.small(bf):  # the check below runs on opening: asked for now, it waits in line with the programs' table
    common.run(bf, names, ahead=True)

st.subheader("Why name cuDNN at all?")
st.write("Because `implementation=None` does not pick it. Here is what each call compiles to on this machine:")
fused_ui.none_is_xla(bf, ("sdpa_auto", "sdpa_xla", "sdpa_cudnn"))
st.write("XLA's attention is matmul → softmax → matmul with the (B, N, T, S) scores in memory between them, like "
         "naive attention: at long sequences that alone exceeds the GPU. Page 4 measures it as T grows.")
fused_ui.xla_at_scale()

st.subheader("What cuDNN needs")
tables.text_table(common.requirements_table(bf, info, ["sdpa_cudnn"]).drop(columns=["implementation"]))
if why_not:
    st.warning(f"cuDNN cannot run {bf.describe()} here: {why_not}.")
    error = common.on_device(backends.refusal, "sdpa_cudnn", bf)
    st.markdown("Tracing `jax.nn.dot_product_attention(..., implementation=\"cudnn\")` at this shape here "
                + ("raises (the library's own words):" if error else "raises nothing: the registry's check above "
                   "is what fails."))
    if error:
        codeblock.code(error, "text", wrap=True)

st.subheader("The code you would write")
codeblock.code(snippet(bf), wrap=True)
if why_not:  # what the except branch prints here: the error the device worker got tracing the call
    error = common.on_device(backends.refusal, "sdpa_cudnn", bf) or why_not
    st.markdown("On this machine `HAS_CUDNN_SDPA` stays `False`, and the `except` branch prints"
                + (":" if info.backend == "gpu" else " the codelab's words, though JAX runs on the CPU here and there is "
                   "no GPU (nor cuDNN) to fall back from:"))
    codeblock.code(f"cuDNN SDPA not available on this GPU: {error}\nContinuing with XLA backend only.", "text", wrap=True)
else:
    st.caption("On this machine the `try` succeeds: `HAS_CUDNN_SDPA` is `True`.")

st.subheader(f"cuDNN against XLA at {bf.describe()}")
if why_not:
    st.info("cuDNN cannot run here, so only XLA's bfloat16 side is checked live (against float64); the H200's "
            "shipped row for both is below.")
if sections.on_demand("p5_compare", "Run in bfloat16 against float64", bf, auto=sections.small(bf)):
    with waiting.fresh():
        acc = sections.guarded(common.frame, bf, names, what="Running in bfloat16")
        res = {r.implementation: r for r in common.run(bf, names)} if acc is not None else {}
        if len(res) == 2 and all(r.ok for r in res.values()):
            cudnn, xla = res["sdpa_cudnn"], res["sdpa_xla"]
            diff = runs.max_difference(cudnn, xla)
            c1, c2, c3 = st.columns(3)
            c1.metric("max |cuDNN − XLA|", f"{diff:.3g}")
            c2.metric("allclose, both", str(cudnn.accuracy.allclose and xla.accuracy.allclose),
                      help="each against float64 at the lab's bfloat16 tolerance")
            c3.metric("output", str(cudnn.output_shape), cudnn.output_dtype, delta_arrow="off", delta_color="off")
        if acc is not None:
            sections.results(acc, ["implementation", "output_shape", "output_dtype", "relative_error", "max_abs_error",
                                   "allclose"])
            note = acc["reference_note"].dropna()
            st.caption("Same bfloat16 inputs, each compared with a float64 NumPy reference (allclose at rtol "
                       f"{TOLERANCES['bfloat16']['rtol']:g}, atol {TOLERANCES['bfloat16']['atol']:g}). "
                       + (note.iloc[0] if len(note) else ""))

st.subheader("Time per call")
if why_not:
    st.info("Nothing to time here: cuDNN cannot run on this machine. On an NVIDIA GPU this section times cuDNN "
            "and XLA at this shape (wall time, and CUPTI device time with one cuDNN kernel against XLA's several).")
elif sections.on_demand("p5_time", "Time cuDNN and XLA", bf, timing=((bf,), 2)):
    with waiting.fresh():
        sections.queue_notice()
        rows = sections.guarded(common.frame, bf, ("sdpa_cudnn", "sdpa_xla"), accuracy=False, timed=True, what="Timing")
        if rows is not None:
            sections.results(rows, ["implementation", "wall_ms", "throughput_ms", "device_ms", "kernel_count", "kernels",
                                    "tflops", "device_tflops"])
            tables.download(rows, f"cudnn_vs_xla_{bf.describe().replace(' ', '_')}")
ref = sections.shipped_frame("default")
if len(ref):
    mine = ref[ref["implementation"].isin(["sdpa_cudnn", "sdpa_xla"]) & (ref["dtype"] == "bfloat16")]
    st.markdown("**📦 Shipped from the H200: the codelab's shape in bfloat16, cuDNN against XLA**")
    tables.text_table(mine[["implementation", "shape", "wall_ms", "throughput_ms", "device_ms", "kernel_count",
                            "kernels", "tflops", "device_tflops"]])
    st.caption("TFLOP/s is the matmul FLOPs over throughput time (many calls queued, one wait), so at a shape this small "
               "it ranks the launches more than the kernels; device TFLOP/s is the same FLOPs over device time "
               "(CUPTI: only the kernels), which ranks the kernels. " + clocks.NOTE)
    ok = mine[mine["status"] == "ok"].set_index("implementation")
    cu, xla = (ok.loc[n] if n in ok.index else None for n in ("sdpa_cudnn", "sdpa_xla"))
    if cu is not None and xla is not None and ok["device_ms"].notna().all() and cu["wall_ms"] >= 0.9 * xla["wall_ms"]:
        # said only when the walls hide the kernel's lead, as they did on the H200 at this shape
        n_cu = int(cu["kernel_count"])
        st.info(f"At the codelab's shape ({cu['shape']}, this table's; not necessarily yours) the GPU works for "
                f"microseconds: cuDNN's {'one kernel' if n_cu == 1 else f'{n_cu} kernels'} "
                f"took {cu['device_ms'] * 1e3:.1f} µs against XLA's {xla['device_ms'] * 1e3:.1f} µs in "
                f"{int(xla['kernel_count'])} kernels, but each call's wall time (cuDNN {cu['wall_ms']:.3f} ms, XLA "
                f"{xla['wall_ms']:.3f} ms) is mostly Python and the launch, so the walls tie or even favour XLA. "
                "Where the work is large, the kernel is what counts: page 7's *Long context on an H200*.")
