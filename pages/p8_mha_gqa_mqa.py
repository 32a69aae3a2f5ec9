"""Lab step 8: MHA, GQA and MQA: the same output with fewer KV heads, a smaller KV cache, a faster decode."""

import pandas as pd
import streamlit as st

from attnlab.measure import cost, runs, timing
from attnlab.shapes import AttentionShape
from attnlab.studies import kvcache, timing_demo
from pages import charts, common, decode_ui, opening, sections, tables, waiting, workers, yourturn_ui

CANDIDATES = opening.P8_CANDIDATES  # fixed: the decode multiselect's options never change
WORDS = {"naive": "the naive code", "sdpa_xla": "XLA's SDPA", "sdpa_cudnn": "cuDNN"}
KV_LEN = 4096  # the decode step's cache length until the learner changes it
GBS_HELP = "K and V bytes read over the device time on a GPU, else over the throughput time"


output_checks = common.cached(kvcache.output_checks)


def decode_steps(shapes: list[AttentionShape], names: tuple[str, ...]) -> pd.DataFrame:
    """One timed decode step per (variant, implementation); each shape's run is cached by common.run."""
    results = []
    for d in shapes:
        results += common.run(d, names, accuracy=False, timed=True)  # a busy GPU's answer is not kept
    return kvcache.decode_table(results)


def decode_shapes(variants: list[AttentionShape], kv_len: int | None = None) -> list[AttentionShape]:
    """Each variant's decode step over a cache of kv_len tokens (default: the cache length the learner chose)."""
    kv_len = kv_len or int(st.session_state.get("p8_kv_len", KV_LEN))
    return [kvcache.decode_shape(v, kv_len) for v in variants]


st.title("8 · MHA, GQA, MQA")
st.write(
    "Multi-head attention (MHA) gives each of the N query heads its own keys and values. Grouped-query "
    "attention (GQA) lets N/K query heads share each of K key/value heads, and multi-query attention (MQA) "
    "shares one among all. The output keeps its shape (B, T, N, H); only K and V shrink. That matters when "
    "a model generates text: every past token's K and V stay in memory (the KV cache), and each new token "
    "reads all of them."
)
info = workers.device_info()
on_gpu = info.backend == "gpu"
shape = common.require_shape()
variants = kvcache.variants(shape)
st.caption("The variants of the sidebar's shape: "
           + ", ".join(f"**{v.variant}** kv_heads = {v.kv_heads}" for v in variants)
           + ("" if any(v.variant == "GQA" for v in variants) else
              f". No GQA: heads ({shape.heads}) has no divisor between 1 and itself."))

st.header("Same output, fewer KV heads")
# the page's checks of its six shapes (three variants, their three decode steps) asked together, not one after another
for v in variants + decode_shapes(variants):
    common.unmet(v, CANDIDATES, ahead=True)
names = opening.p8_names([common.unmet(v, CANDIDATES) for v in variants])
answering = " and ".join(WORDS[n] for n in names)  # what runs here, not what a CPU usually runs
st.write(f"Each variant through {', '.join(f'`{n}`' for n in names)}, compared with a float64 NumPy reference "
         "of the same attention. " + ("" if on_gpu else f"cuDNN needs an NVIDIA GPU, so on this CPU backend "
                                      f"{answering} answer{'s' * (len(names) == 1)}."))
if sections.on_demand("p8_checks", f"Run the {len(variants)} variants and check them", (shape, names),
                      auto=all(sections.small(v) for v in variants)):
    with waiting.fresh():  # the last shape's checks go as these run
        decode_ui.output_checks_section(sections.guarded(output_checks, shape, names, what="The output check"))
else:
    st.caption(f"At {shape.describe()} the variants are too big to run on page load; the button runs them.")

decode_ui.forward_section(variants, names)

st.header("The KV cache")
st.latex(r"\text{bytes per token} = 2\,(K\text{ and }V)\cdot \text{kv\_heads}\cdot \text{head\_dim}"
         r"\cdot \text{itemsize}\cdot \text{layers}")
c1, c2 = st.columns(2)
context_len = c1.number_input("context length (tokens)", min_value=1, max_value=10_000_000, value=8192, step=1024,
                              key="p8_context")
layers = c2.number_input("layers", min_value=1, max_value=1000, value=32, step=1, key="p8_layers")
cache = kvcache.cache_table(shape, int(context_len), int(layers))
batch_col = f"cache for the batch of {shape.batch}"
tables.table(cache.assign(**{
    "cache per sequence": cache["cache_bytes_per_sequence"].map(tables.fmt_bytes),
    batch_col: cache["cache_bytes_for_batch"].map(tables.fmt_bytes),
    "of MHA's cache": cache["fraction_of_mha"].map("{:.1%}".format),
})[["variant", "kv_heads", "query heads per KV head", "bytes_per_token", "cache per sequence", batch_col,
    "of MHA's cache"]])
for col, (_, r) in zip(st.columns(len(cache)), cache.iterrows(), strict=True):
    col.metric(f"{r['variant']}: bytes per token", f"{int(r['bytes_per_token']):,} B",
               help=f"2 · {r['kv_heads']} · {shape.head_dim} · {shape.itemsize} · {int(layers)}")
charts.draw(st, decode_ui.cache_chart, cache,
            f"KV cache per sequence: {int(context_len):,} tokens, {int(layers)} layers, {shape.dtype}", width="stretch")
tables.download(cache, "kv_cache", "Download the KV-cache table (CSV)")

st.header("One decode step")
st.write("Generating a token is attention with one query (q_len = 1) over the whole cache (kv_len = S): little "
         "arithmetic and a full read of K and V, so its time should follow the KV bytes, and fewer KV heads read "
         "fewer bytes. The mask is off: the newest token may see every cached one. The code copies neither K nor V: "
         "the naive code and XLA's SDPA view the N query heads as K groups of N/K and multiply each group with its "
         "one KV head in a single einsum (`attnlab/math/attention.py`), and cuDNN indexes the shared head, so each needs "
         "kv_heads·S·H values per sequence for the keys and again for the values. Whether the compiled program "
         "keeps to that, the H200's measurement at the end of the page shows.")
c1, c2 = st.columns([1, 2])
kv_len = c1.number_input("cache length kv_len (tokens)", min_value=1, max_value=262_144, value=KV_LEN, step=1024,
                         key="p8_kv_len")
chosen = c2.multiselect("implementations", CANDIDATES, default=list(CANDIDATES), key="p8_decode_impls",
                        help="One that cannot run here becomes a row saying why.")
decode = decode_shapes(variants, int(kv_len))
cells = sum(len(common.runnable(d, chosen)) for d in decode) if chosen else 0
cannot = len(decode) * len(chosen) - cells
slow = common.on_device(cost.too_slow_plan, tuple(decode), tuple(len(common.runnable(d, chosen)) for d in decode),
                        timing.MIN_CALLS) if cells else None  # refused up front: a native call cannot be stopped
if slow:
    st.warning(slow)
elif chosen and sections.on_demand("p8_decode", f"Time a decode step for each variant ({cells} cells"
                                 + (f" of {cells + cannot}: {cannot} cannot run here" if cannot else "") + ")", (tuple(decode), tuple(chosen))):
    with waiting.fresh():
        sections.queue_notice()
        with st.spinner("Timing one decode step per variant ..."):
            df = sections.guarded(decode_steps, decode, tuple(chosen), what="The decode step")
        if df is not None:
            good = df[df["status"] == runs.OK]
            st.caption("Timed at " + ", ".join(d.describe() for d in decode) + ". What to look at: the bar of each "
                       "implementation shrinks from MHA to MQA as the K and V bytes it reads shrink.")
            present = [c for c in ("device_ms", "throughput_ms", "wall_ms") if good[c].notna().any()]
            if present:
                y = st.selectbox("time", present, key="p8_decode_y", format_func=tables.label)
                charts.draw(st, decode_ui.step_chart, good, y, width="stretch")
                if not on_gpu:
                    st.caption("On the CPU backend, dispatch and the CPU's caches blur the picture; on a GPU, the "
                               "device time tracks the K and V bytes read.")
            if not good.empty:
                tables.table(good.assign(**{"K and V bytes read": good["kv_read_bytes"].map(tables.fmt_bytes)})[
                    ["variant", "kv_heads", "implementation", "wall_ms", "throughput_ms", "device_ms",
                     "K and V bytes read", "kv_read_gb_per_s"]], column_config={"kv_read_gb_per_s": st.column_config.
                             NumberColumn("GB/s of K and V", format="%.1f", help=GBS_HELP)})
                if note := timing_demo.spread_note(good, on_gpu):  # how far to trust a difference between variants
                    st.caption(note)
            sections.not_run(df, keys=("variant", "implementation"))
            tables.download(df, "decode_step", "Download the decode timings (CSV)")

decode_ui.measured_on_h200(int(kv_len))
yourturn_ui.exercises_of(__file__, shape)
