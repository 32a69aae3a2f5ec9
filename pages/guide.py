"""Two things a learner with the codelab open beside the lab wants a click away, on every page:
the codelab's steps, each with the page, tab and button where it is, and a glossary of the words the
pages use. Plain data and one function each; app.py puts both in the sidebar."""

from __future__ import annotations

import streamlit as st

# (the codelab's heading, the page file, where on the page: a heading, a tab, the button to press)
CODELAB = [
    ("How attention works", "pages/p1_attention.py", "the four stages on a tiny example"),
    ("Setup: is the default backend a GPU?", "pages/p2_gpu_check.py", "*This machine*"),
    ("Build Q, K, V test arrays", "pages/p3_qkv.py", "*Where the arrays live* (made as the page opens; at large shapes, button **Make Q, K and V … on the device**)"),
    ("Naive attention", "pages/p4_naive_vs_fused.py",
     "*Same answer?* (run as the page opens; a button at large shapes); ✍️ write it yourself at the end"),
    ("JAX native SDPA (`implementation=None`)", "pages/p4_naive_vs_fused.py", "*What does `implementation=None` run?*"),
    ("cuDNN fused attention (`HAS_CUDNN_SDPA`)", "pages/p5_cudnn.py",
     "*The code you would write*, then bfloat16 against float64 (run as the page opens; a button at large shapes)"),
    ("Causal masking", "pages/p6_causal.py",
     "the heatmaps and *First position against last* (computed as the page opens up to T 512; buttons above)"),
    ("Timing attention variants (`benchmark_attention`)", "pages/p7_benchmarks.py",
     "tab *At your shape* (timed on load); tab *How it is timed*"),
    ("Sequence-length sweep", "pages/p7_benchmarks.py", "tab *Sweeps*, button **Run the sequence sweep**"),
    ("Batch-size sweep", "pages/p7_benchmarks.py", "tab *Sweeps*, button **Run the batch sweep**"),
    ("Multi-head attention shapes: MHA, GQA, MQA", "pages/p8_mha_gqa_mqa.py",
     "*Same output, fewer KV heads* (run as the page opens; a button at large shapes), then "
     "button **Time the … variants' forward pass**"),
    ("TransformerEngine attention", "pages/p9_te_fp8.py",
     "*TE's DotProductAttention vs SDPA*, button **Run the TE sweep** (on a GPU with TE; elsewhere the H200's sweep)"),
    ("FP8 precision with TransformerEngine", "pages/p9_te_fp8.py", "*FP8, told truthfully*, tab *(a) autocast around attention*"),
]
BEYOND = [  # not in the codelab: what the lab adds
    ("How a fused kernel works inside (tiles, the online softmax)", "pages/p5b_fused_kernel.py"),
    ("One sequence across two GPUs (ring attention)", "pages/p10_across_gpus.py"),
]

# (the word, what it means here): explained where it first appears too; this is the one place for all
GLOSSARY = [
    ("SDPA", "scaled dot-product attention: softmax(Q·Kᵀ/√d)·V, and JAX's `jax.nn.dot_product_attention` that computes it"),
    ("BTNH", "the order of Q's axes: batch B, sequence T, heads N, head size H (K and V: B, S, K heads, H)"),
    ("XLA", "the compiler JAX hands every jitted function to; on a GPU it writes and picks the kernels"),
    ("HLO", "XLA's program text: what `jax.jit(f).lower(...).compile().as_text()` prints"),
    ("kernel", "one program the GPU runs over many threads at once; a jitted call launches one or more"),
    ("fused kernel", "one kernel doing several steps (scores, softmax, weights·V) without writing the steps between them to memory"),
    ("cuDNN", "NVIDIA's library of deep-learning kernels; its flash attention is what `implementation=\"cudnn\"` calls"),
    ("flash attention", "attention computed tile by tile with an online softmax, so the T × S scores never reach memory"),
    ("online softmax", "a softmax over a row read in pieces: a running maximum and a running sum, rescaled as each piece arrives"),
    ("log-sum-exp", "log Σ exp(xᵢ): the one number per row a fused kernel keeps so the backward pass can rebuild the softmax"),
    ("HBM", "the GPU's main memory (141 GB on an H200); fast, but far slower than the on-chip memory a tile lives in"),
    ("GEMM", "general matrix multiply: the operation tensor cores run; attention is two of them around a softmax"),
    ("TFLOP/s", "10¹² floating-point operations a second: attention's 4·B·N·T·S·H FLOPs (half when causal) over the time"),
    ("roofline", "the most a kernel can reach at a given FLOPs-per-byte: memory bandwidth × intensity, up to the compute peak"),
    ("TMA", "Hopper's tensor memory accelerator: copies a whole tile from HBM to on-chip memory in one instruction"),
    ("CUPTI", "NVIDIA's profiling interface: the lab reads each kernel's name and GPU time through it"),
    ("IQR", "interquartile range: the spread of the middle half of the repeated timings, shown beside each median"),
    ("bfloat16", "a 16-bit float with float32's range and 8 bits of precision: what fused attention kernels take"),
    ("FP8 (E4M3, E5M2)", "8-bit floats: E4M3 (more precision) for the forward pass, E5M2 (more range) for gradients"),
    ("amax", "the largest |value| of a tensor: FP8 scales a tensor by it (or by its recent history) to fit 8 bits"),
    ("MHA / GQA / MQA", "multi-head attention (one K/V head per query head), grouped-query (a K/V head per group), multi-query (one K/V head)"),
    ("KV cache", "the keys and values of the tokens generated so far, kept so a decode step reads them instead of recomputing"),
    ("`ynn_fusion`", "a fusion kernel of XLA's CPU backend (its YNNPACK path): what the CPU runs where a GPU would run cuDNN or XLA's GPU kernels"),
    ("compile", "the first call of a jitted function at a shape: XLA builds the program; later calls reuse it (cached)"),
]


# a page link's label is one line cut with "…" (Streamlit's style): in the sidebar the steps' names wrap instead
# ("2. Setup: is the default backend a" cut mid-word)
WRAP_LINKS = ('[data-testid="stSidebar"] [data-testid="stPageLink"] span, '
              '[data-testid="stSidebar"] [data-testid="stPageLink"] p '
              '{white-space: normal; overflow: visible; text-overflow: clip;}')


def codelab_path(pages: dict) -> None:
    """The codelab's steps, in its order, each a link to its page with where to look there (`pages`: each page
    file's st.Page: a link to a file path would resolve the file on the disk at every run)."""
    st.caption("The codelab's Lesson 5 (attention on GPU), step by step: the page, then where on it.")
    st.html(f"<style>{WRAP_LINKS}</style>")
    # one element a step, where to look in its label: every element a run sends takes a lock in Streamlit (its
    # config), and with a class on one UI process the page threads queue for it
    for i, (step, page, where) in enumerate(CODELAB, 1):
        st.page_link(pages[page], label=f"**{i}. {step}** · {where}")
    st.caption("Beyond the codelab:")
    for step, page in BEYOND:
        st.page_link(pages[page], label=step)


def steps_on(page: str) -> list[int]:
    """The codelab's step numbers (1-based) that `page` (its file) covers."""
    return [i for i, (_, p, _) in enumerate(CODELAB, 1) if p == page]


def step_footer(page: str, pages: dict) -> None:
    """Under a page: which codelab steps it covers, and a link to the page of the next step (or beyond the codelab)."""
    mine = steps_on(page)
    if not mine:
        return
    st.divider()
    names = "; ".join(f"{i}. {CODELAB[i - 1][0]}" for i in mine)
    st.caption(f"📓 The codelab's Lesson 5, step{'s' * (len(mine) > 1)} on this page: {names}.")
    following = [(i, step, p) for i, (step, p, _) in enumerate(CODELAB, 1) if i > mine[-1] and p != page]
    if following:
        i, step, p = following[0]
        st.page_link(pages[p], label=f"Next: codelab step {i}. {step}", icon="➡️")
    else:
        st.page_link(pages[BEYOND[0][1]], label=f"Beyond the codelab: {BEYOND[0][0]}", icon="➡️")


def glossary() -> None:
    """The words the pages use, each in one line."""
    st.markdown("\n".join(f"- **{word}**: {meaning}" for word, meaning in GLOSSARY))
