"""Lab step 1: the formula, its four stages on a tiny live example, and what 1/sqrt(d) is for."""

import numpy as np
import pandas as pd
import streamlit as st

from attnlab.shapes import AttentionShape
from attnlab.studies import weights
from pages import charts, sections, tables
from pages.weights_ui import heatmap, matrix_table, scale_chart

EXAMPLE_LEN = weights.EXAMPLE_LEN


@st.cache_data(max_entries=64, ttl=6 * 3600, show_spinner=False)
def stages(shape: AttentionShape, seed: int, scaled: bool) -> dict:
    return weights.four_stages(shape, seed=seed, scaled=scaled)


@st.cache_data(max_entries=4, ttl=6 * 3600, show_spinner="Softmax with and without the scale, for each head_dim ...")
def scale_study(seq_len: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    return weights.scale_effect(seq_len=seq_len), weights.score_spread(seq_len=seq_len)


st.title("1 · How attention works")
st.write(
    "Every query position asks \"which key positions matter to me?\". It scores each key by a dot product "
    "with its query, scales the scores, turns each row of scores into weights that sum to 1 with a "
    "softmax, and returns the weighted average of the values. That is the whole formula:"
)
st.latex(r"\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^{\top}}{\sqrt{d}}\right)V")
st.caption("Q: queries (T × d), K: keys (S × d), V: values (S × d), d = head_dim (H). "
           "Vaswani et al. 2017, *Attention Is All You Need*, eq. 1.")

st.caption("Following the codelab (Lesson 5, attention on GPU)? The sidebar's 📓 *The codelab, step by step* "
           "links each of its steps to the page, tab and button here; 📖 *Glossary* explains the words the pages use.")
st.subheader(f"The four stages on a tiny example (T = S = {EXAMPLE_LEN}, one head)")
st.caption("A float32 example of its own, small enough to read every number; the sidebar's shape is used "
           "from page 2 on.")
c1, c2, c3, c4 = st.columns(4)
head_dim = c1.select_slider("head_dim d of the example", options=[4, 16, 64, 256], value=4, key="p1_head_dim")
seed = c2.number_input("random seed for Q, K, V", min_value=0, max_value=10_000, value=0, step=1, key="p1_seed")
scaled = c3.toggle("scale by 1/√d", value=True, key="p1_scaled",
                   help="Turn off to see what the softmax does to raw dot products.")
causal = c4.toggle("causal mask", value=False, key="p1_causal", help="Query i may only see keys 0..i (page 6).")

tiny = weights.example_shape(int(head_dim), causal)
s = sections.guarded(stages, tiny, int(seed), scaled, what="The tiny example")
if s is None:
    st.stop()
shown = min(head_dim, 8)
cut = f" (first {shown} of {head_dim} columns)" if head_dim > shown else ""

with st.expander(f"The inputs: Q, K, V are {EXAMPLE_LEN} × {head_dim} random normal matrices{cut}"):
    for name in ("q", "k", "v"):
        st.caption(name.upper())
        matrix_table(s[name][:, :shown], "position", "d")

left, right = st.columns(2)
with left:
    st.markdown("**1 · Scores** `Q @ K.T` (T × S)")
    st.caption("Entry (i, j) is the dot product of query i with key j: large when they point the same way.")
    matrix_table(s["scores"], "query", "key")
with right:
    st.markdown("**2 · Scaled scores** " + ("`scores / sqrt(d)`" if scaled else "(scale turned off)"))
    st.caption(f"Divided by √{head_dim} so their spread no longer grows with d."
               if scaled else "Unscaled: the logits keep the spread of the dot products, which grows as √d.")
    matrix_table(s["scaled"], "query", "key")
    if causal:
        st.caption("Masked entries (key after query) are −∞ before the softmax, so they get weight 0.")

left, right = st.columns(2)
with left:
    st.markdown("**3 · Weights** `softmax(scaled, axis=-1)`")
    st.caption("Each row is a probability distribution over the keys: non-negative, summing to 1.")
    charts.draw(st, heatmap, s["weights"], "attention weights (rows sum to 1)", allowed=np.isfinite(s["scaled"]),
                width="content")
    if causal:
        st.caption("Grey cells are masked: their weight is exactly 0.")
with right:
    st.markdown("**4 · Output** `weights @ V` (T × d)")
    st.caption(f"Row i is the weights-averaged value vectors: what query i takes from the sequence{cut}.")
    matrix_table(s["out"][:, :shown], "query", "d")

st.subheader("Why divide by √d?")
st.write(
    "Entries of q and k are roughly unit-variance, so the dot product q·k is a sum of d terms of "
    "variance 1: its variance is d and its spread √d. Without the scale, larger heads give larger "
    "logits, the softmax saturates towards one-hot (one weight near 1, the rest near 0), the entropy "
    "of each row collapses, and the gradients through the softmax vanish. Dividing by √d keeps the "
    "logits' spread near 1 for every head size."
)
seq_len = 64
study = sections.guarded(scale_study, seq_len, what="The head_dim study")
if study is None:
    st.stop()
effect, spread = study
tables.table(spread.rename(columns={"sqrt_head_dim": "√d", "std_unscaled": "spread of q·k",
                                    "std_scaled": "spread of q·k / √d"}),
             hide_index=True, width="stretch",
             column_config={c: st.column_config.NumberColumn(format="%.2f")
                            for c in ("√d", "spread of q·k", "spread of q·k / √d")})
st.caption(f"Measured on random normal Q and K of {seq_len} positions and 4 heads per head_dim.")

c1, c2 = st.columns(2)
charts.draw(c1, scale_chart, effect, "max_weight", seq_len, width="stretch")
charts.draw(c2, scale_chart, effect, "entropy", seq_len, width="stretch")
tables.table(effect, hide_index=True, width="stretch")
tables.download(effect, "scale_effect")
