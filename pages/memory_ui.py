"""Page 4's memory sections: what the compiled programs hold forward (T varied, compiled here and shipped from the
H200) and forward + backward, and what a flash kernel keeps for the backward pass instead of the weights."""

import streamlit as st

from attnlab.measure import runs
from attnlab.studies import memory
from pages import fused_ui, sections, tables, waiting


def memory_sections(shape, info) -> None:
    """"Memory: who keeps the T × S scores" and "The backward pass", at the sidebar's `shape` on `info`'s device."""
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
                tables.text_table(ok.assign(total=ok["total_bytes"].map(tables.fmt_bytes),
                                              scratch=ok["temp_bytes"].map(tables.fmt_bytes))
                                    [["implementation", "q_len", "scratch", "total", "what_ran"]])
                fused_ui.not_run(mem)
                tables.download(mem, f"compiled_memory_{mem_shape.describe().replace(' ', '_')}")
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
        + " against ".join(f"**{tables.fmt_bytes(v)}** ({k})" for k, v in keep.items()) + ".")
    bw_lengths = tuple(t for t in (128, 256, 512, 1024) if t <= longest)
    if sections.on_demand("p4_backward", "Compile forward + backward", (mem_shape, bw_lengths)):
        with waiting.fresh():
            both = sections.guarded(fused_ui.compiled_memory, mem_shape, names, bw_lengths,
                                    True, what="Compiling forward + backward")
            if both is not None:
                fused_ui.memory_chart(both, "temp_bytes", f"forward+backward scratch here, {mem_shape.describe()}, T = S varied",
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
                       "forward pass and their gradient, several float32 T × S matrices at once (XLA's own message is in the table above).")
