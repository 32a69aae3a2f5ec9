"""Lab step 3: the arrays of one attention call, their layout, their bytes, and where they live."""

import streamlit as st

from attnlab.studies import layout
from pages import codeblock, common, sections, tables, waiting, workers

st.title("3 · Q, K, V")
st.write(
    "`jax.nn.dot_product_attention` takes queries, keys and values as 4-D arrays whose axes are named "
    "by letters: Q is **BTNH** (batch, query positions, heads, head size) and K and V are **BSKH** "
    "(S key/value positions, K key/value heads). The output has Q's layout. Naive attention also "
    "builds a **BNTS** score matrix, one number per (query, key) pair for every head: that array, not "
    "Q, K or V, is what grows as the square of the sequence length."
)

shape = common.require_shape()
st.subheader(f"The arrays at {shape.describe()}")
table = layout.layout_table(shape)
tables.table(table.drop(columns=["role"]), hide_index=True, width="stretch")
tables.download(table, f"layout_{shape.describe().replace(' ', '_')}")

rows = table.set_index("array")
scores = rows.loc["scores Q·Kᵀ (naive only)"]
st.write(
    f"Q, K and V together are **{tables.fmt_bytes(shape.input_bytes())}** and the output "
    f"**{tables.fmt_bytes(shape.output_bytes())}**; the scores naive attention materialises are "
    f"**{scores['size']}** in float32, {scores['bytes'] / shape.input_bytes():.2f}× the inputs."
)

q, k = rows.loc["Q (query)"], rows.loc["K (key)"]
same = shape.kv_len == shape.q_len and shape.kv_heads == shape.heads
st.info(
    f"Worked out at {shape.describe()}: Q is {q['shape']} = {q['elements']:,} elements × {shape.itemsize} bytes "
    f"({shape.dtype}) = {q['bytes']:,} bytes = **{q['size']}**; the output has Q's shape, so the same size. "
    + ("K and V are the same size too, because S = T and K = N." if same else
       f"K and V are {k['shape']} each, **{k['size']}**: S = {shape.kv_len:,} keys and K = {shape.kv_heads} KV heads.")
)

st.subheader("The letters")
st.write("The same letters as `jax.nn.dot_product_attention`'s docstring; the sidebar's fields are named after them.")
tables.table(layout.letters(shape), hide_index=True, width="stretch")
st.caption(f"G = N // K = {shape.group_size}: query heads that share one key/value head ({shape.variant}).")

st.subheader("Where the arrays live")
st.write(
    "A `jax.Array` lives on a device. Arrays made without naming one go to the default device: the "
    "first GPU when JAX has one, else the CPU. `x.devices()` says where; `jax.device_put(x, device)` moves it."
)
info = workers.device_info()
if sections.on_demand("p3_placement", f"Make Q, K and V ({tables.fmt_bytes(shape.input_bytes())}) on the device",
                      shape, auto=sections.small(shape)):
    with waiting.fresh():  # the last shape's table goes as this one is made
        df = sections.guarded(common.on_device, layout.placement, shape, what="Making Q, K and V")
        if df is not None:
            tables.table(df, hide_index=True, width="stretch")
            live = df["nbytes"].sum()
            st.caption(f"Live arrays: {tables.fmt_bytes(live)} for Q, K and V, "
                       f"{'equal to' if live == shape.input_bytes() else 'NOT equal to'} the table's sum.")
if info.backend != "gpu":
    st.info("JAX is on its CPU backend here, so the arrays are in host memory. On a GPU the same code puts "
            "them in the GPU's memory (HBM): the table's devices() column then reads `cuda:0`, and "
            "`print(q.devices())` prints the set `{CudaDevice(id=0)}`.")
codeblock.code(
    "import jax\nimport jax.numpy as jnp\n\n"
    f"q = jax.random.normal(jax.random.key(0), {shape.q_shape()}, dtype=jnp.{shape.dtype})   # BTNH\n"
    f"k = jax.random.normal(jax.random.key(1), {shape.kv_shape()}, dtype=jnp.{shape.dtype})   # BSKH\n"
    f"v = jax.random.normal(jax.random.key(2), {shape.kv_shape()}, dtype=jnp.{shape.dtype})   # BSKH, like K\n"
    "print(q.devices())          # the device(s) holding q\n"
    "q_cpu = jax.device_put(q, jax.devices('cpu')[0])   # an explicit move\n",
    language="python",
)
