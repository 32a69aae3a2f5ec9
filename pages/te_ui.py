"""Page 9's TE sweep: TransformerEngine's DotProductAttention against SDPA (XLA, cuDNN) across lengths, measured
where TE runs, else the H200's shipped sweep."""

import streamlit as st

from attnlab.backends import te
from attnlab.studies import clocks
from pages import codeblock, common, sections, tables, waiting

TE_NAMES = ["sdpa_xla", "sdpa_cudnn", "te_dpa"]


def te_results(df) -> None:
    """The TE sweep's chart and tables (measured here, or shipped)."""
    if df is None:
        return
    sections.sweep_chart(df, "q_len", "p9_te", first="device_ms")
    sections.results(df, ["q_len", "implementation", "wall_ms", "throughput_ms", "device_ms", "tflops",
                          "device_tflops", "pct_of_peak", "kernel_count"], failed=False)
    sections.not_run(df, keys=("q_len", "implementation"))
    st.caption("Two TFLOP/s columns, two questions. **device TFLOP/s** is the kernels' own speed (FLOPs over CUPTI "
               "kernel time): read it to compare kernels. **TFLOP/s** is over the throughput time, which at short "
               "sequences is mostly launching the call: a few microseconds of Python and driver work per call swamp "
               "a kernel of a few microseconds, so there a one-kernel cuDNN call can look slower than XLA's and even "
               "slower than at twice the length. In the shipped H200 sweep cuDNN and TE stay near 0.07 ms a call up to T 1,024 whatever the "
               "length (launch-bound); at T 2,048 the two columns come close. XLA's kernels are slower, so its "
               "columns meet from T 512.")
    tables.download(df, "te_sweep", "Download the TE sweep (CSV)")


def sweep_section(shape, half) -> None:
    """The codelab's TE sweep at the sidebar's B, N, K and H (`half`: the shape in a 16-bit dtype)."""
    st.header("TE's DotProductAttention vs SDPA (XLA, cuDNN)")
    sweep_base = half.replace(causal=True)
    st.write(f"The codelab's TE sweep: causal, bfloat16, T from 128 to 2,048, at the sidebar's B, N, K and H "
             f"({sweep_base.describe()}). kv_heads ({shape.kv_heads}) is TE's `num_gqa_groups`: fewer than heads "
             "makes it grouped-query attention. What to look at, in device time (the GPU's own kernel time): TE's "
             "line runs a few microseconds above cuDNN's, because TE calls the same cuDNN attention kernel and adds "
             "small kernels of its own around it (see the kernel counts), while XLA's climbs away as T grows. Wall "
             "time adds each library's Python and dispatch on top.")


    why_te = common.unmet(sweep_base, ("te_dpa",))["te_dpa"]  # checked by the device worker: pages never import TE
    if why_te is None:
        lengths = st.multiselect("q_len = kv_len", [128, 256, 512, 1024, 2048, 4096, 8192],
                                 default=[128, 256, 512, 1024, 2048], key="p9_te_lengths")
        shapes = [sweep_base.replace(q_len=t, kv_len=t) for t in sorted(lengths)]
        with waiting.fresh():  # the last sweep's chart and tables go as a new sweep runs
            if shapes and sections.on_demand("p9_te", f"Run the TE sweep ({len(shapes) * len(TE_NAMES)} cells)",
                                             tuple(shapes)):
                te_results(sections.sweep("p9_te", shapes, TE_NAMES, "TE sweep", timed=True))
    else:
        st.info(f"Cannot run here: {why_te}")
        with st.expander("The code to run it on a GPU with TE"):
            codeblock.code(te.TE_SNIPPET)
        df = sections.shipped_frame("te_sweep")
        if df.empty:
            st.info("No H200 results ship with this version, so there is no TE sweep to show.")
        else:
            ends = df.sort_values("q_len")["shape"]
            st.caption(f"The shipped sweep ran at its own shapes, whatever the sidebar says: {ends.iloc[0]} … {ends.iloc[-1]}. "
                       f"Clock: {clocks.WARM}, unlike the FP8 study below, which reads it.")
            te_results(df)
