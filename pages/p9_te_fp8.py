"""Lab step 9: NVIDIA TransformerEngine's attention, FP8 where it really acts, and cleaning up the GPU."""

import streamlit as st

from attnlab import device
from attnlab.backends import fp8, te
from attnlab.studies import fp8_study
from pages import common, fp8_ui, sections, tables, te_ui, waiting, workers

st.title("9 · TransformerEngine and FP8")
st.write(
    "TransformerEngine (TE) is NVIDIA's library of fused transformer layers; its JAX `DotProductAttention` "
    "calls cuDNN's fused attention underneath. FP8 (8-bit floats) doubles the tensor cores' rate on Hopper, "
    "but only where a kernel actually computes in FP8, and each tensor needs a scale so that its values land "
    "in FP8's narrow range. There are two FP8 formats:"
)
formats = fp8_study.formats()
tables.text_table(formats.assign(**{"largest value": formats["largest value"].map("{:,.0f}".format),
                                    "smallest value": formats["smallest value"].map("{:.2g}".format)})
                  .rename(columns={"smallest value": "smallest value (subnormal)"}))
st.caption("HYBRID, TransformerEngine's recipe format, uses both: E4M3 forward, E5M2 backward; TE's DelayedScaling "
           "recipe (used in (a) and (b) below) takes it.")
info = workers.device_info()
shape = common.require_shape()
half = shape if shape.dtype in ("bfloat16", "float16") else shape.replace(dtype="bfloat16")

st.header("What can run here")
st.caption("Each row is a requirement that TE's DotProductAttention (`te_dpa`) or cuDNN's FP8 attention "
           f"(`cudnn_fp8`) declares, checked at the sidebar's shape ({shape.describe()}) on this device.")
tables.text_table(common.requirements_table(shape, info, ["te_dpa", "cudnn_fp8"]))
if shape is not half:
    st.caption(f"TE and FP8 take bfloat16 or float16 inputs; the sections below use your shape in bfloat16 "
               f"({half.describe()}).")

te_ui.sweep_section(shape, half)

st.header("FP8, told truthfully")
st.write(
    "Three questions, each answered by a measurement, one per tab. (a) Does wrapping TE's DotProductAttention "
    "in `te.autocast(enabled=True)` make attention FP8? (b) Where does TE's FP8 act? (c) What does real FP8 "
    "attention (cuDNN's FP8 flash-attention kernel, E4M3 inputs) gain, and what does it cost in accuracy?"
)
st.markdown(
    "- `jax.nn.dot_product_attention` refuses FP8 inputs for its cuDNN implementation (its dtype table has no FP8 "
    "entry), so the lab reaches cuDNN's FP8 kernel through JAX's internal "
    "`jax._src.cudnn.fused_attention_stablehlo.dot_product_attention(..., use_fp8=True)`, with Q, K and V in E4M3.\n"
    "- TE 2.x for JAX has no FP8 path in its attention: `te.autocast` with the `DelayedScaling` recipe (format "
    "HYBRID: E4M3 forward, E5M2 for gradients) changes TE's GEMM layers (GEMM: general matrix multiply; "
    "DenseGeneral, LayerNormMLP, ...), and DotProductAttention runs the same bf16 kernel either way; (a) is the evidence."
)
cc = device.FP8_MATMUL_MIN_CC
why_a = common.unmet(half, ("te_dpa",))["te_dpa"] or (None if info.at_least(cc) else
                                              f"FP8 autocast needs compute capability {cc[0]}.{cc[1]} or newer")
tab_a, tab_b, tab_c = sections.tabs("p9_tab", ["(a) autocast around attention", "(b) FP8 in TE's dense layers",
                                               "(c) cuDNN's FP8 attention"])
if tab_a.open:
    with tab_a:
        st.caption("What to look at: the two kernel lists are the same, and the outputs do not differ.")
        with waiting.fresh():  # the last measurement goes as a new one runs
            result = fp8_ui.study("p9_autocast", why_a, f"Compare with and without autocast at {half.describe()}", half,
                                  lambda: fp8_ui.autocast_study(half), "te_autocast", te.TE_SNIPPET)
            if result is not None:
                fp8_ui.autocast(result)
if tab_b.open:
    with tab_b:
        st.write("A block of QKV projection, DotProductAttention and output projection built from TE layers, in bf16 "
                 "and under FP8 autocast with delayed scaling (HYBRID format; the scale from past steps' amax, a "
                 "tensor's largest |value|) and current scaling (this step's amax). What to look at: the projections' GEMMs become FP8 and the block gets "
                 "faster; the error is the block's output against bf16.")
        with waiting.fresh():
            result = fp8_ui.study("p9_block", why_a, f"Time the block at {half.describe()}", half,
                                  lambda: fp8_ui.block_study(half), "te_block", te.TE_SNIPPET)
            if result is not None:
                fp8_ui.block(result)
if tab_c.open:
    with tab_c:
        st.write("Q, K and V are stored in FP8 E4M3 with per-tensor scales (448 / amax, so the largest value lands on "
                 "E4M3's largest); inside the kernel the softmax probabilities P (scale 448: each tile's largest value "
                 "is exactly 1 before normalising) and the output O (scale calibrated from one run) are E4M3 too. Speed "
                 "is the GPU's own kernel time (CUPTI), for the FP8 kernel alone and end to end (amax, casts, O back to "
                 "bf16), each at boost clock after 1 s idle and sustained after 1.5 s of calls, with the SM clock read. "
                 "What to look at: the speed-up at each clock, and which scaling keeps the error small on x/64 inputs "
                 "(E4M3's smallest value is 2⁻⁹ ≈ 0.002: an O left at unit scale rounds to zero).")
        mha = half.replace(kv_heads=half.heads)
        why_c = common.unmet(mha, ("cudnn_fp8",))["cudnn_fp8"]
        shapes = ()
        if why_c is None:
            c1, c2 = st.columns(2)
            ts = c1.multiselect("q_len = kv_len", [1024, 2048, 4096, 8192, 16384], default=[2048, 8192], key="p9_fp8_t")
            hs = c2.multiselect("head_dim", [64, 128, 256], default=[64, 128], key="p9_fp8_h")
            shapes = tuple(mha.replace(q_len=t, kv_len=t, head_dim=h) for t in sorted(ts) for h in sorted(hs))
        if why_c is None and not shapes:
            st.info("Choose at least one q_len and one head_dim.")
        else:
            with waiting.fresh():
                result = fp8_ui.study("p9_fp8", why_c, f"Run FP8 vs bf16 at {len(shapes)} shapes", shapes,
                                      lambda: fp8_ui.attention_study(shapes), "fp8_attention", fp8.HOPPER_SNIPPET)
                if result is not None:
                    fp8_ui.fp8_attention(result)

st.header("Clean up")
st.write("The codelab's last step on one GPU (page 10 goes on to several). On your own GPU, give it back when done:")
st.markdown(
    "1. Stop the Streamlit server (Ctrl+C in its terminal) or shut down the notebook kernel: JAX holds most of "
    "the GPU's memory for as long as its process lives.\n"
    "2. Check that nothing holds the GPU any more: `nvidia-smi` should list no process under *Processes*.\n"
    "3. If you created a GKE node pool or cluster for the lab, delete it so that it stops costing money. "
    "Instructors: `deploy/README.md` describes the steps and `deploy/teardown.sh` removes what the deploy "
    "created."
)
