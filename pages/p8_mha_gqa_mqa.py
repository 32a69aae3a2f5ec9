"""Lab step 8: MHA, GQA and MQA: the same output with fewer KV heads, a smaller KV cache, a faster decode."""

import altair as alt
import pandas as pd
import streamlit as st

from attnlab import bench, kvcache
from pages import common

st.title("8 · MHA, GQA, MQA")
st.write(
    "Multi-head attention (MHA) gives each of the N query heads its own keys and values. Grouped-query "
    "attention (GQA) lets N/K query heads share each of K key/value heads, and multi-query attention (MQA) "
    "shares one among all. The output keeps its shape (B, T, N, H); only K and V shrink. That matters when "
    "a model generates text: every past token's K and V stay in memory (the KV cache), and each new token "
    "reads all of them."
)

info = common.device_info_static()
on_gpu = info.backend == "gpu"
shape = common.require_shape()
support = common.supports(shape)
variants = kvcache.variants(shape)
CANDIDATES = ["naive", "sdpa_xla", "sdpa_cudnn"]
st.caption("The three variants of the sidebar's shape: "
           + ", ".join(f"**{v.variant}** kv_heads = {v.kv_heads}" for v in variants)
           + ("" if any(v.variant == "GQA" for v in variants) else
              f". No GQA: heads ({shape.heads}) has no divisor between 1 and itself."))




@st.cache_data(max_entries=256, ttl=6 * 3600, show_spinner=False)
def output_check(shape, name: str) -> dict:
    return kvcache.output_check(shape, name)


# --------------------------------------------------------------------------------------------
# 1. same output shape, same answer
# --------------------------------------------------------------------------------------------
st.header("Same output, fewer KV heads")
names = [n for n in CANDIDATES if support[n][0]] or ["naive"]
st.write(f"Each variant through {', '.join(f'`{n}`' for n in names)}, compared with a float64 NumPy reference "
         "of the same attention. " + ("" if on_gpu else "cuDNN needs an NVIDIA GPU, so on this CPU backend the "
                                      "naive code and XLA's SDPA answer."))
with st.spinner("Running each variant and checking it against float64 ..."):
    checks = pd.DataFrame([output_check(v, n) for v in variants for n in names])
cols = [c for c in ("variant", "kv_heads", "implementation", "q shape", "k, v shape", "output shape",
                    "matches reference", "max_abs_error", "relative_error", "status", "reason")
        if c in checks.columns]
common.table(checks[cols], hide_index=True, width="stretch",
             column_config={"max_abs_error": st.column_config.NumberColumn(format="%.2e"),
                            "relative_error": st.column_config.NumberColumn(format="%.2e")})
ok = checks[checks["status"] == bench.STATUS_OK]
if not ok.empty and ok["output shape"].nunique() == 1 and ok["matches reference"].all():
    st.success(f"Every variant returns {ok['output shape'].iloc[0]} and matches the float64 reference "
               "within its dtype's tolerance.")
elif not ok.empty and not ok["matches reference"].all():
    st.warning("Some outputs differ from the reference beyond the tolerance; see the table.")
notes = sorted({n for n in ok.get("reference note", pd.Series(dtype=str)).dropna() if n})
for note in notes:
    st.caption(f"float64 reference: {note} (heads and batch entries are independent, so a slice checks them exactly).")


# --------------------------------------------------------------------------------------------
# 2. the KV cache
# --------------------------------------------------------------------------------------------
st.header("The KV cache")
st.latex(r"\text{bytes per token} = 2\,(K\text{ and }V)\cdot \text{kv\_heads}\cdot \text{head\_dim}"
         r"\cdot \text{itemsize}\cdot \text{layers}")
c1, c2 = st.columns(2)
context_len = c1.number_input("context length (tokens)", min_value=1, max_value=10_000_000, value=8192, step=1024,
                              key="p8_context")
layers = c2.number_input("layers", min_value=1, max_value=1000, value=32, step=1, key="p8_layers")
cache = kvcache.cache_table(shape, int(context_len), int(layers))
show = cache.assign(**{
    "bytes per token": cache["bytes_per_token"].map(common.fmt_bytes),
    "cache per sequence": cache["cache_bytes_per_sequence"].map(common.fmt_bytes),
    f"cache for the batch of {shape.batch}": cache["cache_bytes_for_batch"].map(common.fmt_bytes),
    "of MHA's cache": cache["fraction_of_mha"].map("{:.1%}".format),
})
common.table(show[["variant", "kv_heads", "query heads per KV head", "bytes per token",
                   "cache per sequence", f"cache for the batch of {shape.batch}", "of MHA's cache"]],
             hide_index=True, width="stretch")
metrics = st.columns(len(cache))
for col, (_, r) in zip(metrics, cache.iterrows(), strict=True):
    col.metric(f"{r['variant']}: bytes per token", f"{int(r['bytes_per_token']):,} B",
               help=f"2 · {r['kv_heads']} · {shape.head_dim} · {shape.itemsize} · {int(layers)}")
st.altair_chart(
    alt.Chart(cache.assign(GiB=cache["cache_bytes_per_sequence"] / 2**30), title=(
        f"KV cache per sequence: {int(context_len):,} tokens, {int(layers)} layers, {shape.dtype}"))
    .mark_bar().encode(x=alt.X("variant:N", sort=None, axis=alt.Axis(labelAngle=0)),
                       y=alt.Y("GiB:Q", title="GiB per sequence"), color=alt.Color("variant:N", sort=None),
                       tooltip=["variant", "kv_heads", "bytes_per_token", alt.Tooltip("GiB:Q", format=".3f")]),
    width="stretch")
common.download(cache, "kv_cache", "Download the KV-cache table (CSV)")


# --------------------------------------------------------------------------------------------
# 3. a decode step
# --------------------------------------------------------------------------------------------
st.header("One decode step")
st.write("Generating a token is attention with one query (q_len = 1) over the whole cache (kv_len = S): little "
         "arithmetic and a full read of K and V, so its time follows the KV bytes, and fewer KV heads read fewer "
         "bytes. The mask is off: the newest token may see every cached one. The naive version gains nothing "
         "from fewer KV heads: it `jnp.repeat`s K and V back to N heads before the matmul, so it reads and "
         "writes the full-size copies; a kernel that indexes the shared head (XLA's SDPA, cuDNN) reads only K·S·H.")
c1, c2 = st.columns([1, 2])
kv_len = c1.number_input("cache length kv_len (tokens)", min_value=1, max_value=262_144, value=4096, step=1024,
                         key="p8_kv_len")
decode = [kvcache.decode_shape(v, int(kv_len)) for v in variants]
decode_support = [common.supports(d) for d in decode]
runnable = [n for n in CANDIDATES if any(s[n][0] for s in decode_support)]
chosen = c2.multiselect("implementations", CANDIDATES, default=runnable, key="p8_decode_impls")
cells = [(d, n, False) for d in decode for n in chosen]
if st.button(f"Time a decode step for each variant ({len(cells)} cells)", key="p8_decode_run", type="primary",
             disabled=not cells):
    st.session_state["p8_decode"] = common.run_cells(cells, "Decode step")
rows = st.session_state.get("p8_decode")
if rows:
    df = pd.DataFrame([kvcache.decode_row(r) for r in rows])
    st.caption("Last run: " + ", ".join(df["shape"].unique()))
    good = df[df["status"] == bench.STATUS_OK]
    if not good.empty:
        present = [c for c in ("device_ms", "throughput_ms", "wall_ms") if good[c].notna().any()]
        y = st.selectbox("time", present, key="p8_decode_y", format_func=common.label)
        st.altair_chart(
            alt.Chart(good, title=f"Decode step: {common.label(y)} by variant").mark_bar()
            .encode(x=alt.X("variant:N", sort=None, axis=alt.Axis(labelAngle=0)), xOffset="implementation:N",
                    y=alt.Y(f"{y}:Q", title=common.label(y)),
                    color=common.impl_color(good),
                    tooltip=["variant", "kv_heads", "implementation", alt.Tooltip(f"{y}:Q", format=".4f"),
                             "kv_read_bytes", alt.Tooltip("kv_read_gb_per_s:Q", format=".1f")]),
            width="stretch")
        if not on_gpu:
            st.caption("On the CPU backend, dispatch and the CPU's caches blur the picture; on a GPU, device_ms "
                       "tracks the KV bytes read.")
    show = df.assign(**{"KV bytes read": df["kv_read_bytes"].map(common.fmt_bytes)})
    common.table(show[[c for c in ("variant", "kv_heads", "implementation", "status", "wall_ms", "throughput_ms",
                                   "device_ms", "KV bytes read", "kv_read_gb_per_s", "reason") if c in show]],
                 hide_index=True, width="stretch",
                 column_config={"kv_read_gb_per_s": st.column_config.NumberColumn("GB/s of K and V", format="%.1f")})
    common.download(df, "decode_step", "Download the decode timings (CSV)")
else:
    st.caption("Not run yet in this session.")
