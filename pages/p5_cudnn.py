"""Lab step 5: cuDNN's fused attention asked for by name, in bfloat16, against XLA in bfloat16."""

import inspect

import pandas as pd
import streamlit as st

from attnlab import implementations as impls
from attnlab import layout
from attnlab.shapes import AttentionShape
from pages import common

RTOL = ATOL = 1e-2  # the codelab's tolerance for bfloat16 (8-bit mantissa: ~4e-3 relative rounding)


@st.cache_data(max_entries=64, ttl=6 * 3600, show_spinner="Running cuDNN and XLA on the same bfloat16 inputs ...")
def pair(shape: AttentionShape) -> tuple[layout.Pair | None, str]:
    try:
        return layout.compare_pair(shape, "sdpa_cudnn", "sdpa_xla", rtol=RTOL, atol=ATOL), ""
    except ValueError as e:
        return None, str(e)


@st.cache_data(max_entries=64, ttl=6 * 3600, show_spinner="XLA in bfloat16 against the float64 reference ...")
def xla_only(shape: AttentionShape) -> tuple[pd.DataFrame, str]:
    return layout.accuracy_table(shape, ["sdpa_xla"])


@st.cache_data(max_entries=64, ttl=6 * 3600, show_spinner=False)
def real_error(shape: AttentionShape) -> str | None:
    return impls.get("sdpa_cudnn").real_error(shape)


def snippet(shape: AttentionShape) -> str:
    return f'''import jax
import jax.numpy as jnp

kq, kk, kv = jax.random.split(jax.random.key(0), 3)
q = jax.random.normal(kq, {shape.q_shape()}, dtype=jnp.bfloat16)   # (B, T, N, H)
k = jax.random.normal(kk, {shape.kv_shape()}, dtype=jnp.bfloat16)   # (B, S, K, H)
v = jax.random.normal(kv, {shape.kv_shape()}, dtype=jnp.bfloat16)

def attention(implementation):
    return jax.jit(lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, is_causal={shape.causal}, implementation=implementation))

cudnn, xla = attention("cudnn"), attention("xla")   # "cudnn" raises if cuDNN cannot run it
out_cudnn, out_xla = cudnn(q, k, v), xla(q, k, v)
diff = jnp.abs(out_cudnn.astype(jnp.float32) - out_xla.astype(jnp.float32))
print("max |cuDNN - XLA|:", diff.max())
print("allclose:", jnp.allclose(out_cudnn.astype(jnp.float32), out_xla.astype(jnp.float32), rtol=1e-2, atol=1e-2))
print("cuDNN calls in the program:", cudnn.lower(q, k, v).compile().as_text().count("__cudnn$fmha"))
'''


st.title("5 · cuDNN")
st.write(
    "`jax.nn.dot_product_attention(..., implementation=\"cudnn\")` asks for cuDNN's fused flash-attention "
    "kernel by name: one kernel that reads Q, K and V once, keeps the scores on chip and writes only the "
    "output. Named explicitly, it never falls back silently: if cuDNN cannot take the call, JAX raises, and "
    "the error says why. cuDNN's kernel takes half-precision inputs, so this page runs your shape in bfloat16."
)

shape = common.require_shape()
bf = shape.replace(dtype="bfloat16")
info = common.device_info()
if shape.dtype != "bfloat16":
    st.caption(f"The sidebar's dtype is {shape.dtype}; this page uses bfloat16: **{bf.describe()}**.")
ok, reason = common.supports(bf)["sdpa_cudnn"]

st.subheader("What cuDNN needs")
checklist = layout.cudnn_checklist(bf, info)
common.table(checklist.assign(met=checklist["met"].map({True: "✅ yes", False: "❌ no"})), hide_index=True,
             width="stretch")
with st.expander("The registry's check, as code (`attnlab.implementations._cudnn_requirements`)"):
    st.code(inspect.getsource(impls._cudnn_requirements), language="python")

st.subheader("The code you would write")
st.code(snippet(bf), language="python")

st.subheader(f"cuDNN against XLA at {bf.describe()}")
if ok:
    p, why = pair(bf)
    if p is None:
        st.error(why)
    else:
        c1, c2, c3 = st.columns(3)
        c1.metric("max |cuDNN − XLA|", f"{p.max_abs_difference:.3g}")
        c2.metric(f"allclose (rtol {p.rtol:g}, atol {p.atol:g})", str(p.allclose))
        c3.metric("output shape, dtype", f"{p.a_shape}", p.a_dtype, delta_arrow="off", delta_color="off")
        common.table(p.vs_reference, hide_index=True, width="stretch",
                     column_config={"relative_error": st.column_config.NumberColumn("relative error vs float64", format="%.2e"),
                                    "max_abs_error": st.column_config.NumberColumn("max abs error vs float64", format="%.2e")})
        st.caption("Both read the same bfloat16 inputs; each is compared with a float64 NumPy reference "
                   f"(allclose at the lab's bfloat16 tolerance). {p.reference_note}")
else:
    st.warning(f"cuDNN cannot run {bf.describe()} here: {reason}")
    error = real_error(bf)
    st.markdown("What JAX itself raises when the call is traced with `implementation=\"cudnn\"`:")
    st.code(error or "(tracing raised nothing here: the registry's requirement check is what fails)", language="text")
    if info.backend != "gpu":
        st.info("cuDNN is NVIDIA's library: it needs a CUDA GPU (compute capability 8.0 or newer). Below, XLA's "
                "bfloat16 path is still checked here, and the shipped H200 measurements show cuDNN's side.")
    acc, note = xla_only(bf)
    common.table(acc.drop(columns=["reason"], errors="ignore"), hide_index=True, width="stretch")
    st.caption(f"XLA in bfloat16 against the float64 reference. {note}")

st.subheader("Time per call")
st.write("Both at the same bfloat16 shape. Device time (CUPTI, NVIDIA GPUs only) shows the single cuDNN kernel "
         "against XLA's several; wall time adds Python dispatch.")
if st.button("Time cuDNN and XLA", key="p5_time"):
    st.session_state["p5_timing_result"] = (bf, common.run_cells([(bf, "sdpa_cudnn", False), (bf, "sdpa_xla", False)],
                                                                  "Timing"))
saved = st.session_state.get("p5_timing_result")
if saved and saved[0] == bf:
    rows = pd.DataFrame(saved[1])
    cols = [c for c in ("implementation", "status", "wall_ms", "throughput_ms", "device_ms", "kernel_count",
                        "kernels", "tflops", "reason") if c in rows.columns]
    common.table(rows[cols], hide_index=True, width="stretch")
    notes = rows.get("device_note", pd.Series(dtype=str)).dropna()
    if not notes.empty and rows["device_ms"].isna().all():
        st.caption(f"Device time: {notes.iloc[0]}.")
    common.download(rows, f"cudnn_vs_xla_{bf.describe().replace(' ', '_')}")

ref = common.reference_note("default")
if not ref.empty and {"implementation", "dtype"} <= set(ref.columns):
    mine = ref[ref["implementation"].isin(["sdpa_cudnn", "sdpa_xla"]) & (ref["dtype"] == "bfloat16")]
    if not mine.empty:
        st.markdown("**Shipped reference: the codelab's shape in bfloat16, measured on the GPU named above**")
        cols = [c for c in ("shape", "implementation", "status", "wall_ms", "device_ms", "kernel_count", "kernels",
                            "tflops", "custom_calls") if c in mine.columns]
        common.table(mine[cols], hide_index=True, width="stretch")
