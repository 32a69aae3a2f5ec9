"""Lab step 6: causal masking seen in the weights, the first-vs-last table, and more masks
(sliding window, padding) through the fused API's own arguments."""

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from attnlab import implementations as impls
from attnlab import weights
from attnlab.shapes import AttentionShape
from pages import common

FVL_CAP = 512  # first-vs-last runs naive attention twice; beyond this the table uses a shorter sequence


@st.cache_data(max_entries=64, ttl=6 * 3600, show_spinner="Computing the weights ...")
def full_and_causal(view: AttentionShape, batch_index: int, head: int) -> tuple[np.ndarray, np.ndarray]:
    q, k, _ = impls.make_inputs(view)
    full = weights.attention_weights(q, k, causal=False)[batch_index, head]
    causal = weights.attention_weights(q, k, causal=True)[batch_index, head]
    return np.asarray(full), np.asarray(causal)


@st.cache_data(max_entries=32, ttl=6 * 3600, show_spinner="Naive attention with and without the mask ...")
def first_vs_last(shape: AttentionShape) -> pd.DataFrame:
    return weights.first_vs_last(shape)


@st.cache_data(max_entries=64, ttl=6 * 3600, show_spinner="The fused API against weights·V ...")
def masked(view: AttentionShape, window: tuple[int, int] | None, kv_lengths: tuple[int, ...] | None,
           implementation: str) -> tuple[dict | None, str]:
    try:
        return weights.masked_output_check(view, window=window, kv_lengths=None if kv_lengths is None else list(kv_lengths),
                                           implementation=implementation), ""
    except Exception as e:  # a backend that refuses these masks says so in its own words
        return None, f"{type(e).__name__}: {str(e).strip()[:400]}"


def heatmap(m: np.ndarray, title: str, vmax: float) -> alt.Chart:
    """Weights as a heatmap on a colour scale shared by both maps; masked cells (weight exactly 0) in grey."""
    df = weights.long_frame(m, "weight").assign(masked=lambda d: d["weight"] == 0)
    small = max(m.shape) <= 16
    ticks = lambda n: alt.Axis() if small else alt.Axis(values=list(range(0, n, 8)))  # noqa: E731
    base = alt.Chart(df, title=title).encode(x=alt.X("key:O", title="key position", axis=ticks(m.shape[1])),
                                             y=alt.Y("query:O", title="query position", axis=ticks(m.shape[0])))
    seen = base.transform_filter("!datum.masked").mark_rect().encode(
        color=alt.Color("weight:Q", scale=alt.Scale(scheme="blues", domain=[0, vmax])),
        tooltip=["query", "key", alt.Tooltip("weight:Q", format=".4f")])
    hidden = base.transform_filter("datum.masked").mark_rect(color="#d9d9d9").encode(
        tooltip=["query", "key", alt.Tooltip("weight:Q", format=".1f", title="weight (masked)")])
    chart = hidden + seen
    if small:
        chart = chart + base.mark_text(baseline="middle", fontSize=9).encode(text=alt.Text("weight:Q", format=".2f"))
    return chart.properties(width=340, height=340)


def clamp(key: str, high: int, default: int = 0) -> None:
    """Keep a widget's remembered value inside its current bounds (the shape may have shrunk)."""
    if key in st.session_state and not 0 <= st.session_state[key] <= high:
        st.session_state[key] = min(max(default, 0), high)


st.title("6 · Causal masking")
st.write(
    "A language model predicts each token from the ones before it, so query i must not see keys after i. "
    "A causal mask sets those scores to −∞ before the softmax: their weights become exactly 0 and each "
    "row's weight is shared among the keys it may see. `jax.nn.dot_product_attention(is_causal=True)` does "
    "it without building a mask; a fused kernel also skips the masked blocks, about half the work."
)

shape = common.require_shape()
view = weights.view_shape(shape)
if view != shape:
    st.caption(f"The heatmaps use the first {view.batch} batch element(s) and the first {view.q_len} × {view.kv_len} "
               f"positions of your shape ({shape.describe()}), so they stay readable and cheap; the table below "
               "uses the whole shape.")

c1, c2 = st.columns(2)
clamp("p6_batch", view.batch - 1)
clamp("p6_head", shape.heads - 1)
b = c1.selectbox("batch element", list(range(view.batch)), key="p6_batch")
h = c2.selectbox(f"head (of {shape.heads})", list(range(shape.heads)), key="p6_head")
if shape.group_size > 1:
    c2.caption(f"{shape.variant}: query head {h} reads key/value head {h // shape.group_size}.")
full, causal = full_and_causal(view, b, h)
vmax = float(max(np.nanmax(full), np.nanmax(causal))) or 1.0
c1.altair_chart(heatmap(full, "full: every query sees every key", vmax), width="content")
c2.altair_chart(heatmap(causal, "causal: query i sees keys 0..i", vmax), width="content")
st.caption("Grey cells are masked (weight exactly 0). Both maps share one colour scale, and each row sums to 1 in "
           "both: the causal rows share their weight among fewer keys, so their cells are darker.")

st.subheader("First position against last")
st.write(
    "How much does the mask change each query's output? Position 0 may see only key 0, so its output "
    "changes most; the last position sees every key either way when T = S, so its output does not change."
)
fvl_shape = shape
if not common.supports(shape)["naive"][0] or max(shape.q_len, shape.kv_len) > FVL_CAP:
    fvl_shape = shape.replace(batch=min(shape.batch, 2), q_len=min(shape.q_len, FVL_CAP), kv_len=min(shape.kv_len, FVL_CAP))
    st.caption(f"Computed at {fvl_shape.describe()} (sequences capped at {FVL_CAP}: naive attention runs twice here).")
fvl = first_vs_last(fvl_shape)
common.table(fvl, hide_index=True, width="stretch",
             column_config={"max |full − causal|": st.column_config.NumberColumn(format="%.3g")})
last = fvl.iloc[-1]
if fvl_shape.q_len == fvl_shape.kv_len:
    st.success(f"Last position ({int(last['position'])}): max |full − causal| = {last['max |full − causal|']:.3g}. "
               "It sees all keys with or without the mask.")
else:
    st.info(f"T ({fvl_shape.q_len}) ≠ S ({fvl_shape.kv_len}): with the top-left causal alignment JAX uses, the last "
            f"query sees {int(last['keys seen (causal)'])} of {fvl_shape.kv_len} keys, so its output can change too.")

st.subheader("More masks: sliding window and padding")
st.write(
    "The fused API takes two more masks as arguments, so it never needs a (T, S) boolean array: "
    "`local_window_size=(left, right)` lets query i see keys i−left … i+right (sliding-window attention), "
    "and `key_value_seq_lengths` marks, per batch element, how many keys are real (the rest is padding). "
    "The check below runs the fused call and the same masks applied by hand to the weights, then compares."
)
c1, c2, c3 = st.columns(3)
use_causal = c1.toggle("causal", value=shape.causal, key="p6_mask_causal")
use_window = c2.toggle("sliding window", value=True, key="p6_use_window")
use_padding = c3.toggle("padding (kv lengths)", value=False, key="p6_use_padding")
window = None
if use_window:
    clamp("p6_left", view.kv_len - 1, 4)
    clamp("p6_right", view.kv_len - 1)
    left = c2.number_input("left", min_value=0, max_value=view.kv_len - 1, value=min(4, view.kv_len - 1), key="p6_left")
    right = c2.number_input("right", min_value=0, max_value=view.kv_len - 1, value=0, key="p6_right")
    window = (int(left), int(right))
lengths = None
if use_padding:
    values = []
    for i in range(view.batch):
        clamp(f"p6_len_{i}", view.kv_len, view.kv_len)
        if st.session_state.get(f"p6_len_{i}") == 0:
            st.session_state[f"p6_len_{i}"] = 1
        values.append(int(c3.number_input(f"kv length, batch {i}", min_value=1, max_value=view.kv_len,
                                          value=max(1, view.kv_len - 8 * (i + 1)) if view.kv_len > 8 else view.kv_len,
                                          key=f"p6_len_{i}")))
    lengths = tuple(values)
fused_options = ["xla"] + (["cudnn"] if common.supports(view)["sdpa_cudnn"][0] else [])
implementation = c1.selectbox("fused implementation", fused_options, key="p6_impl",
                              help="cuDNN appears when it can run this shape here (a CUDA GPU, bfloat16 or float16).")
masked_view = view.replace(causal=use_causal)
result, error = masked(masked_view, window, lengths, implementation)
if result is None:
    st.error(f"`implementation=\"{implementation}\"` refused these masks: {error}")
else:
    tol = impls.TOLERANCES[view.dtype]
    diff = result["max_abs_diff"]
    c1, c2 = st.columns([3, 2])
    w = result["weights"][b, h]
    c1.altair_chart(heatmap(w, f"weights, batch {b}, head {h}", float(np.nanmax(w)) or 1.0), width="content")
    c2.metric("max |fused − weights·V|", f"{diff:.3g}")
    c2.metric(f"within the {view.dtype} tolerance (atol {tol['atol']:g})", str(diff <= tol["atol"]))
    c2.caption("The fused call got the masks as arguments; weights·V applied them by hand. "
               "The same numbers, up to rounding: the arguments mean what the heatmap shows.")
    args = [f"is_causal={use_causal}"]
    if window:
        args.append(f"local_window_size={window}")
    if lengths:
        args.append(f"key_value_seq_lengths=jnp.array({list(lengths)}, jnp.int32)")
    c2.code("jax.nn.dot_product_attention(\n    q, k, v,\n    " + ",\n    ".join(args)
            + f",\n    implementation=\"{implementation}\")", language="python")
