"""Lab step 9: NVIDIA TransformerEngine's attention, and FP8 where it really acts."""

import altair as alt
import pandas as pd
import streamlit as st

from attnlab import bench, device, fp8, kernels, reference, suite, te
from pages import common

st.title("9 · TransformerEngine and FP8")
st.write(
    "TransformerEngine (TE) is NVIDIA's library of fused transformer layers; its JAX `DotProductAttention` "
    "calls cuDNN's fused attention underneath. FP8 (8-bit floats, E4M3: 3 mantissa bits, largest value 448) "
    "doubles the tensor cores' rate on Hopper, but only where a kernel actually computes in FP8, and each tensor "
    "needs a scale so that its values land in FP8's narrow range. This page shows what runs here, and what FP8 "
    "changes and what it does not."
)

info = common.device_info_static()
on_gpu = info.backend == "gpu"
shape = common.require_shape()
te_error = te.import_error()
half = shape if shape.dtype in ("bfloat16", "float16") else shape.replace(dtype="bfloat16")
te_ok, te_reason = common.supports(half)["te_dpa"]
fp8_matmul_ok = info.at_least(device.FP8_MATMUL_MIN_CC)
fp8_attention_ok, fp8_reason = common.supports(half.replace(kv_heads=half.heads))["cudnn_fp8"]




def cc(t: tuple[int, int]) -> str:
    return f"compute capability ≥ {t[0]}.{t[1]}"


def yes(ok: bool) -> str:
    return "✅ yes" if ok else "❌ no"


# --------------------------------------------------------------------------------------------
# what is here
# --------------------------------------------------------------------------------------------
st.header("What is available here")
here = f"{info.device_kind}, compute capability {info.compute_capability_str}" if on_gpu else f"{info.backend} backend"
sidebar = common.supports(shape)
common.table(pd.DataFrame([
    {"what": "TransformerEngine for JAX imports", "needs": "transformer-engine[jax] and a CUDA GPU",
     "here": yes(te_error is None), "detail": te_error or f"version {info.te_version}"},
    {"what": "fused attention (cuDNN, TE)", "needs": cc(device.FUSED_ATTENTION_MIN_CC),
     "here": yes(info.at_least(device.FUSED_ATTENTION_MIN_CC)), "detail": here},
    {"what": "FP8 matmuls (TE's dense layers)", "needs": cc(device.FP8_MATMUL_MIN_CC) + " (Ada, Hopper)",
     "here": yes(fp8_matmul_ok), "detail": here},
    {"what": "FP8 attention (cuDNN)", "needs": cc(device.FP8_ATTENTION_MIN_CC) + " (Hopper)",
     "here": yes(info.at_least(device.FP8_ATTENTION_MIN_CC)), "detail": here},
    {"what": f"te_dpa at {shape.describe()}", "needs": "the registry's check",
     "here": yes(sidebar["te_dpa"][0]), "detail": "" if sidebar["te_dpa"][0] else sidebar["te_dpa"][1]},
    {"what": f"cudnn_fp8 at {shape.describe()}", "needs": "the registry's check",
     "here": yes(sidebar["cudnn_fp8"][0]), "detail": "" if sidebar["cudnn_fp8"][0] else sidebar["cudnn_fp8"][1]},
]), hide_index=True, width="stretch")
if shape is not half:
    st.caption(f"TE and FP8 take bfloat16 or float16 inputs; the sections below use your shape in bfloat16 "
               f"({half.describe()}).")


@st.cache_data(max_entries=32, ttl=6 * 3600, show_spinner=False)
def autocast_study(shape) -> dict:
    return suite.te_autocast_study(shape)


@st.cache_data(max_entries=32, ttl=6 * 3600, show_spinner=False)
def block_study(shape) -> list[dict]:
    return suite.te_block_study(shape)


@st.cache_data(max_entries=32, ttl=6 * 3600, show_spinner=False)
def fp8_study(shapes: tuple) -> list[dict]:
    return suite.fp8_attention_study(list(shapes))


def live_or_reference(key: str, can_run: bool, why_not: str, button: str, run, token, ref_key: str, *,
                      snippet: str):
    """(result, source) from a live run on a button where possible, else the shipped reference, else (None, None).

    A live result is kept in the session with `token` (what it was measured at) and shown only
    while the controls still ask for the same thing.
    """
    if can_run:
        if st.button(button, key=f"{key}_run", type="primary"):
            common.queue_notice()
            with st.spinner("Measuring on the GPU ..."):
                st.session_state[key] = {"token": token, "result": run()}
        kept = st.session_state.get(key)
        if kept and kept["token"] == token:
            return kept["result"], f"Measured here, on this {info.device_kind} (cached for these shapes)."
        st.caption("Not run yet for these settings in this session.")
        return None, None
    st.info(f"Cannot run here: {why_not}")
    with st.expander("The code to run it on a GPU"):
        st.code(snippet, language="python")
    data = (reference.load() or {}).get(ref_key)
    if not data:
        st.info("No H200 reference results ship with this version, so there is nothing measured to show.")
        return None, None
    return data, f"📦 {reference.label()}"


# --------------------------------------------------------------------------------------------
# 1. TE's DotProductAttention vs SDPA
# --------------------------------------------------------------------------------------------
st.header("TE's DotProductAttention vs SDPA (XLA, cuDNN)")
sweep_base = half.replace(causal=True)
st.write(f"The codelab's TE sweep: causal, bfloat16, T from 128 to 2,048, at the sidebar's B, N, K and H "
         f"({sweep_base.describe()}). kv_heads ({shape.kv_heads}) is TE's `num_gqa_groups`: fewer than heads "
         "makes it grouped-query attention.")
names = ["sdpa_xla", "sdpa_cudnn", "te_dpa"]
sweep_ok, sweep_reason = common.supports(sweep_base)["te_dpa"]
if sweep_ok:
    lengths = st.multiselect("q_len = kv_len", [128, 256, 512, 1024, 2048, 4096, 8192],
                             default=[128, 256, 512, 1024, 2048], key="p9_te_lengths")
    cells = [(sweep_base.replace(q_len=t, kv_len=t), n, False) for t in sorted(lengths) for n in names]
    if st.button(f"Run the TE sweep ({len(cells)} cells)", key="p9_te_run", type="primary", disabled=not cells):
        st.session_state["p9_te"] = {"cells": cells, "rows": common.run_cells(cells, "TE sweep")}
    kept = st.session_state.get("p9_te")
    rows = kept["rows"] if kept and kept["cells"] == cells else None
    source = f"Measured here, on this {info.device_kind}."
    if rows is None:
        st.caption("Not run yet for these settings in this session.")
else:
    st.info(f"TE's DotProductAttention cannot run here: {sweep_reason}")
    with st.expander("The code to run it on a GPU with TE"):
        st.code(te.TE_SNIPPET, language="python")
    ref = reference.frame("te_sweep")
    rows, source = (ref.to_dict("records") if not ref.empty else None), f"📦 {reference.label()}"
    if rows is None:
        st.info("No H200 reference results ship with this version, so there is no TE sweep to show.")
if rows:
    df = bench.to_frame(rows)
    st.caption(source)
    good = df[df["status"] == bench.STATUS_OK]
    y = st.selectbox("y axis", [c for c in ("device_tflops", "tflops", "device_ms", "wall_ms")
                                if c in good and good[c].notna().any()] or ["tflops"], key="p9_te_y",
                     format_func=common.label)
    left, right = st.columns([3, 2])
    if not good.empty:
        left.altair_chart(common.line_chart(good, x="q_len", y=y, title=f"{common.label(y)} by q_len (causal, bfloat16)")
                          , width="stretch")
    with right:
        for _, r in df[df["status"] != bench.STATUS_OK].iterrows():
            st.markdown(f"- `{r['implementation']}` at q_len = {r['q_len']}: {r['status']}. {r['reason']}")
    common.table(df[[c for c in ("q_len", "implementation", "status", "wall_ms", "throughput_ms", "device_ms",
                                 "tflops", "device_tflops", "pct_of_peak", "kernel_count") if c in df]],
                 hide_index=True, width="stretch")
    common.download(df, "te_sweep", "Download the TE sweep (CSV)")


# --------------------------------------------------------------------------------------------
# 2. FP8, told truthfully
# --------------------------------------------------------------------------------------------
st.header("FP8, told truthfully")
st.write(
    "Three questions, each answered by a measurement. (a) Does wrapping TE's DotProductAttention in "
    "`te.autocast(enabled=True)` make attention FP8? (b) Where does TE's FP8 act? (c) What does real FP8 "
    "attention (cuDNN's FP8 flash-attention kernel) gain, and what does it cost in accuracy?"
)
st.markdown(
    "- `jax.nn.dot_product_attention` refuses FP8 inputs for its cuDNN implementation (its dtype table has no FP8 "
    "entry), so the lab reaches cuDNN's FP8 kernel through JAX's internal "
    "`jax._src.cudnn.fused_attention_stablehlo.dot_product_attention(..., use_fp8=True)`.\n"
    "- TE 2.x for JAX has no FP8 path in its attention: `te.autocast` changes TE's GEMM layers (DenseGeneral, "
    "LayerNormMLP, ...), and DotProductAttention runs the same bf16 kernel either way; (a) below is the evidence."
)

st.subheader("(a) TE autocast around DotProductAttention")
can_a = te_ok and fp8_matmul_ok
why_a = te_reason if not te_ok else f"FP8 autocast needs {cc(device.FP8_MATMUL_MIN_CC)} (this is {here})"
result, source = live_or_reference("p9_autocast", can_a, why_a, f"Compare with and without autocast at {half.describe()}",
                                   lambda: autocast_study(half), half, "te_autocast", snippet=te.TE_SNIPPET)
if result:
    st.caption(source)
    if result.get("status") != "ok":
        st.warning(f"The study did not run: {result.get('status')}. {result.get('reason', '')}")
    else:
        same = list(result["bf16_kernels"]) == list(result["autocast_kernels"])
        m1, m2, m3 = st.columns(3)
        m1.metric("max |output difference|", f"{result['max_abs_diff_autocast_vs_not']:.3g}")
        m2.metric("time without autocast (ms)", f"{result['bf16_ms']:.4f}")
        m3.metric("time with FP8 autocast (ms)", f"{result['autocast_ms']:.4f}")
        (st.success if same else st.warning)(
            f"At {result.get('shape')}: the kernels are {'identical' if same else 'different'} with and without "
            "autocast" + (": attention did not become FP8." if same else "; see the lists below."))
        n = max(len(result["bf16_kernels"]), len(result["autocast_kernels"]))
        pad = lambda ks: [kernels.describe(k, 90) for k in ks] + [""] * (n - len(ks))  # noqa: E731
        common.table(pd.DataFrame({"kernels without autocast": pad(result["bf16_kernels"]),
                                   "kernels with autocast": pad(result["autocast_kernels"])}),
                     hide_index=True, width="stretch")

st.subheader("(b) FP8 where it acts: TE's dense layers in an attention block")
st.write("A block of QKV projection, DotProductAttention and output projection built from TE layers, in bf16 and "
         "under FP8 autocast with delayed scaling (the scale from past steps' amax) and current scaling (this "
         "step's amax). The projections' GEMMs become FP8; the error is the block's output against bf16.")
result, source = live_or_reference("p9_block", can_a, why_a, f"Time the block at {half.describe()}",
                                   lambda: block_study(half), half, "te_block", snippet=te.TE_SNIPPET)


def kernel_list(names) -> str:
    """Kernel names (or [name, µs] pairs) in words, as one line of text for a table cell."""
    return "; ".join(f"{kernels.describe(k[0])} {k[1]:.1f} µs" if isinstance(k, (list, tuple)) else kernels.describe(str(k))
                     for k in (names or []))


if result:
    st.caption(source)
    df = pd.DataFrame(result)
    for col in ("top_kernels", "gemm_kernels"):
        if col in df:
            df[col] = df[col].map(kernel_list)
    good = df[df["status"] == "ok"] if "status" in df else df.iloc[0:0]
    if not good.empty:
        st.altair_chart(alt.Chart(good, title="Attention block: TFLOP/s by recipe").mark_bar()
                        .encode(x=alt.X("recipe:N", sort=None, axis=alt.Axis(labelAngle=0)),
                                y=alt.Y("tflops:Q", title="TFLOP/s"), color=alt.Color("recipe:N", sort=None),
                                tooltip=["recipe", alt.Tooltip("ms:Q", format=".4f"), alt.Tooltip("tflops:Q", format=".1f"),
                                         alt.Tooltip("rel_err_vs_bf16:Q", format=".2e")]),
                        width="stretch")
    common.table(df[[c for c in ("shape", "recipe", "status", "ms", "tflops", "rel_err_vs_bf16", "top_kernels",
                                 "gemm_kernels", "reason") if c in df]], hide_index=True, width="stretch",
                 column_config={"rel_err_vs_bf16": st.column_config.NumberColumn(format="%.2e"),
                                "top_kernels": st.column_config.TextColumn("longest kernels")})
    common.download(df, "te_block", "Download the block table (CSV)")

st.subheader("(c) cuDNN's FP8 attention vs bf16, across sequence lengths and head sizes")
st.write("Q, K and V are stored in FP8 E4M3 with per-tensor scales (448 / amax, so the largest value lands on "
         "FP8's largest); inside the kernel the softmax probabilities P and the output O are quantised too. P is "
         "quantised before it is normalised, when each tile's largest value is exactly 1, so its scale is 448; O's "
         "scale is calibrated from one run. Speed is the GPU's own kernel time (CUPTI), for the FP8 kernel alone "
         "(FP8 in and out, as inside an FP8 model; with data scales and with unit scales) and end to end (amax "
         "reductions, casts of Q, K and V, O back to bf16). The error is against bf16 cuDNN, with each scaling "
         "choice, and on small inputs (x/64), where unit scales push values below FP8's resolution.")
st.write("Each speed is measured twice, with the GPU's SM clock read each time: **at boost clock**, after the GPU "
         "has idled for a second, and **sustained**, after 1.5 s of back-to-back calls. Flash attention keeps "
         "the H200 near 600 W, and it pulls its clock down from 1,980 MHz by up to 15% within a second: a "
         "kernel's speed is only complete with the clock it ran at.")
STATES = {"at boost clock (after 1 s idle)": "_burst", "sustained (after 1.5 s of calls)": ""}
SPEED = {"bf16": "bf16 cuDNN", "fp8": "FP8 kernel, 448/amax scales", "fp8_unit": "FP8 kernel, unit scales",
         "fp8_e2e": "FP8 end to end (quantise + kernel + dequantise)"}
ERRORS = {"err_unit_scales": "unit scales", "err_amax_qkv": "448/amax on Q, K, V", "err_amax_qkv_p": "… and 448 on P",
          "err_amax_all": "… and a calibrated O scale", "err_small_inputs_unit_scales": "x/64 inputs, unit scales",
          "err_small_inputs_amax_scales": "x/64 inputs, Q, K, V, P scaled, O not",
          "err_small_inputs_all_scales": "x/64 inputs, O scaled too"}
st.caption("FP8 E4M3's smallest value is 2⁻⁹ ≈ 0.002: an output of small magnitude left at unit scale rounds to "
           "zero whatever the inputs' scales, so the error on x/64 inputs depends on O's own scale.")
if fp8_attention_ok:
    c1, c2 = st.columns(2)
    lengths = c1.multiselect("q_len = kv_len", [1024, 2048, 4096, 8192, 16384], default=[2048, 8192], key="p9_fp8_t")
    head_dims = c2.multiselect("head_dim", [64, 128, 256], default=[64, 128], key="p9_fp8_h")
    shapes = tuple(half.replace(q_len=t, kv_len=t, head_dim=h, kv_heads=half.heads)
                   for t in sorted(lengths) for h in sorted(head_dims))
else:
    shapes = ()
if fp8_attention_ok and not shapes:
    st.info("Choose at least one q_len and one head_dim.")
    result = None
else:
    result, source = live_or_reference("p9_fp8", fp8_attention_ok, fp8_reason, f"Run FP8 vs bf16 at {len(shapes)} shapes",
                                       lambda: fp8_study(shapes), shapes, "fp8_attention", snippet=fp8.HOPPER_SNIPPET)


def fastest_fp8(good: pd.DataFrame) -> None:
    """The headline: the fastest FP8 kernel in the table, in both GPU states, against bf16."""
    if "fp8_burst_tflops" not in good or good["fp8_burst_tflops"].isna().all():
        return
    best = good.loc[good["fp8_burst_tflops"].idxmax()]
    st.markdown(f"**Fastest FP8 kernel here: {best['shape']}**")
    m = st.columns(3)
    m[0].metric("FP8 at boost clock", f"{best['fp8_burst_tflops']:,.0f} TFLOP/s",
                f"{best['burst_speedup']:.2f}× bf16 ({best['bf16_burst_tflops']:,.0f})", delta_color="off")
    m[1].metric("FP8 sustained", f"{best['fp8_tflops']:,.0f} TFLOP/s",
                f"{best['speedup']:.2f}× bf16 ({best['bf16_tflops']:,.0f})", delta_color="off")
    clocks = (f"{best['fp8_burst_clock_mhz']:.0f} → {best['fp8_clock_mhz']:.0f} MHz"
              if pd.notna(best.get("fp8_burst_clock_mhz")) and pd.notna(best.get("fp8_clock_mhz")) else "not read")
    m[2].metric("SM clock, boost → sustained", clocks,
                f"max {best['max_clock_mhz']:.0f} MHz" if pd.notna(best.get("max_clock_mhz")) else None, delta_color="off")


if result:
    st.caption(source)
    df = pd.DataFrame(result)
    good = df[df["status"] == "ok"] if "status" in df else df.iloc[0:0]
    error_cols = [c for c in ERRORS if c in good]
    if not good.empty:
        fastest_fp8(good)
        has_burst = "bf16_burst_tflops" in good
        state = st.radio("GPU state", list(STATES), horizontal=True, key="p9_fp8_state") if has_burst else None
        suffix = STATES[state] if state else ""
        cols = {f"{k}{suffix}_tflops": label for k, label in SPEED.items() if f"{k}{suffix}_tflops" in good}
        if cols:
            speed = (good.melt(id_vars=["shape"], value_vars=list(cols), var_name="precision", value_name="TFLOP/s")
                     .replace({"precision": cols}).dropna(subset=["TFLOP/s"]))
            order = list(cols.values())
            st.altair_chart(alt.Chart(speed, title=f"TFLOP/s, bf16 vs FP8 by shape{' ' + state if state else ''}")
                            .mark_bar()
                            .encode(y=alt.Y("shape:N", sort=None, title=None, axis=alt.Axis(labelLimit=400)),
                                    yOffset=alt.YOffset("precision:N", sort=order), x=alt.X("TFLOP/s:Q"),
                                    color=alt.Color("precision:N", sort=order, legend=alt.Legend(labelLimit=320)),
                                    tooltip=["shape", "precision", alt.Tooltip("TFLOP/s:Q", format=".1f")]),
                            width="stretch")
    if not good.empty and error_cols:
        st.markdown("**Relative error against bf16 cuDNN** (‖FP8 − bf16‖ / ‖bf16‖), without and with amax scaling")
        common.table(good[["shape"] + error_cols], hide_index=True, width="stretch",
                     column_config={c: st.column_config.NumberColumn(ERRORS[c], format="%.2e") for c in error_cols})
    tflops = {f"{k}{sfx}_tflops": f"{label}{' (boost)' if sfx else ''}, TFLOP/s"
              for sfx in ("_burst", "") for k, label in SPEED.items()}
    clocks = {"bf16_burst_clock_mhz": "bf16 clock at boost, MHz", "bf16_clock_mhz": "bf16 clock sustained, MHz",
              "fp8_burst_clock_mhz": "FP8 clock at boost, MHz", "fp8_clock_mhz": "FP8 clock sustained, MHz"}
    shown = [c for c in ("shape", "status", "burst_speedup", "speedup", "e2e_speedup", *tflops, *clocks, "reason")
             if c in df]
    common.table(df[shown], hide_index=True, width="stretch",
                 column_config={"burst_speedup": st.column_config.NumberColumn("speed-up, kernel at boost", format="%.2f×"),
                                "speedup": st.column_config.NumberColumn("speed-up, kernel sustained", format="%.2f×"),
                                "e2e_speedup": st.column_config.NumberColumn("speed-up, end to end", format="%.2f×"),
                                **{c: st.column_config.NumberColumn(label, format="%.0f") for c, label in tflops.items()},
                                **{c: st.column_config.NumberColumn(label, format="%d") for c, label in clocks.items()}})
    common.download(df, "fp8_attention", "Download the FP8 table (CSV)")
