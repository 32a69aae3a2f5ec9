"""Lab step 6: causal masking seen in the weights, the first-vs-last table, and more masks
(sliding window, padding) through the fused API's own arguments, checked by the run layer."""

import streamlit as st

from attnlab.studies import weights
from pages import charts, codeblock, common, sections, waiting, weights_ui, yourturn_ui

FUSED = {"sdpa_xla": "xla", "sdpa_cudnn": "cudnn"}  # backend -> jax.nn.dot_product_attention(implementation=...)


# (T, S) weights of one sequence and head, and the cells allowed: exact (float64 NumPy) on a small view, computed
# here in the page's process, with no GPU and no turn on the device (weights.heatmap_weights says why)
weights_of = st.cache_data(max_entries=256, ttl=6 * 3600, show_spinner=False)(weights.heatmap)
first_vs_last = common.cached(weights.first_vs_last)


st.title("6 · Causal masking")
st.write(
    "A language model predicts each token from the ones before it, so query i must not see keys after i. "
    "A causal mask sets those scores to −∞ before the softmax: their weights become exactly 0 and each "
    "row's weight is shared among the keys it may see. `jax.nn.dot_product_attention(is_causal=True)` does "
    "it without building a mask; a fused kernel also skips the masked blocks, about half the work."
)

shape = common.require_shape()
view = weights.view_shape(shape).replace(causal=False, window=None, kv_lengths=())
if view.batch != shape.batch or (view.q_len, view.kv_len) != (shape.q_len, shape.kv_len):
    st.caption(f"The heatmaps are computed on a smaller copy of your shape ({shape.describe()}), so they stay "
               f"readable and cheap: {view.describe()}, the same heads, head_dim and dtype. Each row's softmax is "
               f"over these {view.kv_len} keys, not your {shape.kv_len}.")

c1, c2 = st.columns(2)
sections.clamp("p6_batch", view.batch - 1)
sections.clamp("p6_head", shape.heads - 1)
b = c1.selectbox("batch element", list(range(view.batch)), key="p6_batch")
h = c2.selectbox(f"head (of {shape.heads})", list(range(shape.heads)), key="p6_head")
if sections.on_demand("p6_maps", "Compute the heatmaps", (view, b, h), auto=sections.small(view)):
    with waiting.fresh():
        pair = [sections.guarded(weights_of, view.replace(causal=c), b, h, what="The weights") for c in (False, True)]
        if None not in pair:
            (full, _), (causal, allowed) = pair
            m1, m2 = st.columns(2)  # under the pickers, inside the area that empties when new maps are computed
            charts.draw(m1, weights_ui.heatmap, full, "full: every query sees every key", vmax=float(full.max()) or 1.0,
                        size=420, width="content")
            charts.draw(m2, weights_ui.heatmap, causal, "causal: query i sees keys 0..i", allowed=allowed,
                        vmax=float(causal.max()) or 1.0, size=420, width="content")
            st.caption(f"The weights are exact: computed in float64 (NumPy, the lab's reference code) from the same Q and K "
                       f"a run on the device draws, here in the page's process, since a {view.q_len} × {view.kv_len} "
                       f"example needs no GPU. "
                       f"Grey cells are masked (weight exactly 0). Each map has its own colour scale, darkest at its "
                       f"largest weight ({full.max():.3f} full, {causal.max():.3f} causal): on one 0–1 scale the full "
                       f"map would look blank, since its {view.kv_len} weights per row all sit near 1/{view.kv_len} = "
                       f"{1 / view.kv_len:.3f}. Each row sums to 1 in both; a causal row shares its weight among "
                       f"fewer keys (row 0 puts all of it on key 0).")
if shape.group_size > 1:
    st.caption(f"{shape.variant}: query head {h} reads key/value head {h // shape.group_size}.")

st.subheader("First position against last")
st.write(
    "How much does the mask change each query's output? Position 0 may see only key 0 and the first "
    "positions only a few keys, so their outputs change a lot (how much exactly depends on the values); the "
    "last position sees every key either way when T = S, so its output does not change."
)
fvl_shape = weights.first_vs_last_shape(shape)
if fvl_shape != shape:
    st.caption(f"Computed at {fvl_shape.describe()}: causal against no mask at all (sequences capped at "
               f"{weights.FIRST_VS_LAST_CAP}; naive attention runs twice here; a sliding window or padding of your "
               "shape is left out).")
if sections.small(fvl_shape):  # computed on opening: asked for now, so it waits in line with the masked check below
    first_vs_last.ahead(fvl_shape)
fvl_box = st.container()  # filled once the masked check below is asked for too

st.subheader("More masks: sliding window and padding")
st.write(
    "The fused API takes two more masks as arguments, so it never needs a (T, S) boolean array: "
    "`local_window_size=(left, right)` lets query i see keys i−left … i+right (sliding-window attention), "
    "and `key_value_seq_lengths` marks, per batch element, how many keys are real (the rest is padding). "
    "The check below runs the fused call with these arguments and compares it with weights·V computed in "
    "float64, the masks applied by hand. The sidebar's *More masks* set the starting values here."
)
masked_view = weights.view_shape(shape)
c1, c2, c3 = st.columns(3)
use_causal = c1.toggle("causal", value=shape.causal, key="p6_mask_causal")
use_window = c2.toggle("sliding window", value=True, key="p6_use_window")
use_padding = c3.toggle("padding (kv lengths)", value=bool(shape.kv_lengths), key="p6_use_padding")
window = None
if use_window:
    left0, right0 = shape.window or (4, 0)
    sections.clamp("p6_left", view.kv_len - 1, left0)
    sections.clamp("p6_right", view.kv_len - 1, right0)
    left = c2.number_input("left", 0, view.kv_len - 1, min(left0, view.kv_len - 1), key="p6_left")
    right = c2.number_input("right", 0, view.kv_len - 1, min(right0, view.kv_len - 1), key="p6_right")
    window = (int(left), int(right))
lengths = ()
if use_padding:
    start = masked_view.kv_lengths_per_batch() or [max(1, view.kv_len - 8 * (i + 1)) for i in range(view.batch)]
    for i in range(view.batch):
        sections.clamp(f"p6_len_{i}", view.kv_len, start[i])
        lengths += (int(c3.number_input(f"kv length, batch {i}", 0, view.kv_len, min(start[i], view.kv_len),
                                        key=f"p6_len_{i}")),)
masked_view = masked_view.replace(causal=use_causal, window=window, kv_lengths=lengths)
can = common.runnable(masked_view, list(FUSED))
name = c1.selectbox("fused implementation", can, format_func=lambda n: f"{n} ({FUSED[n]})", key="p6_impl",
                    help="cuDNN appears when it can run this shape here (a CUDA GPU, bfloat16 or float16).")
if name and sections.small(masked_view):
    common.run(masked_view, (name,), ahead=True)
with fvl_box:
    weights_ui.first_vs_last_section(fvl_shape, first_vs_last)
if name and sections.on_demand("p6_masks", "Run the masked check", (masked_view, name, b, h),
                               auto=sections.small(masked_view)):
    with waiting.fresh():
        result = common.run(masked_view, (name,))[0]
        if not result.ok:
            st.error(f"`implementation=\"{FUSED[name]}\"` with these masks: {result.status}. "
                     f"{common.literal(result.reason)}")
        else:
            a = result.accuracy
            c1, c2 = st.columns([3, 2])
            pair = sections.guarded(weights_of, masked_view, b, h, what="The weights")
            if pair is not None:
                w, allowed = pair
                charts.draw(c1, weights_ui.heatmap, w, f"weights, batch {b}, head {h}", allowed=allowed,
                            vmax=float(w.max()) or 1.0, size=420, width="content")
            c2.metric("max |fused − weights·V|", f"{a.max_abs_error:.3g}",
                      help="weights·V: the four stages in float64 NumPy, the masks applied by hand (attnlab.math.checks)")
            c2.metric(f"allclose at the {shape.dtype} tolerance (rtol {a.rtol:g}, atol {a.atol:g})",
                      "yes" if a.allclose else "no",
                      help="Every element within atol + rtol·|reference|: an error above atol passes where the "
                           "reference is large.")
            if a.allclose and a.max_abs_error > a.atol:  # reads like a failure passed, unless it is said
                c2.caption(f"The error {a.max_abs_error:.3g} is above atol {a.atol:g} and still passes: allclose allows "
                           f"atol + rtol·|reference| at each element, and where this error is the reference is large.")
            if result.reference_note:
                c2.caption(result.reference_note)
            args = [f"is_causal={use_causal}"] + ([f"local_window_size={window}"] if window else []) + (
                [f"key_value_seq_lengths=jnp.array(\n        {list(lengths)}, jnp.int32)"] if lengths else [])
            codeblock.code("jax.nn.dot_product_attention(\n    q, k, v,\n    " + ",\n    ".join(args)
                           + f",\n    implementation=\"{FUSED[name]}\")", where=c2, wrap=True)  # a narrow column: wrap, never clip
for n, why in common.unmet(masked_view, tuple(FUSED)).items():
    if why:
        st.caption(f"{n} cannot run this here: {common.literal(why)}")
yourturn_ui.exercises_of(__file__, shape)
