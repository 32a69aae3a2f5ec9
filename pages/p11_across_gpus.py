"""Lab step 11: attention across GPUs. The ring drawn step by step, bytes against compute per step,
ring attention measured on 2 × H200 (shipped), and a live run where this host has several GPUs."""

import jax
import pandas as pd
import streamlit as st

from attnlab import ring_live, ring_results, shipped
from attnlab import ring_schedule as rs
from pages import charts, common, ring_ui, sections

LAYOUTS = {"zigzag": "balanced (zig-zag)", "contiguous": "contiguous"}
SHIPPED = {P: f"ring_h200x{P}" for P in (2, 4, 8)}

st.title("10 · Across GPUs")
st.write(
    "When a sequence is too long for one GPU, split it: each of P GPUs keeps T/P queries and S/P keys and "
    "values. Ring attention then passes the K/V blocks around a ring: at every step each GPU attends its "
    "queries to the block it holds and sends that block to its neighbour, so after P steps every query has met "
    "every key. The partial results merge exactly through each block's log-sum-exp (as in flash attention)."
)
shape = common.require_shape()

st.subheader("The ring, step by step")
c1, c2, c3 = st.columns(3)
P = c1.slider("GPUs in the ring (P)", 2, 8, 4, key="p11_P")
causal = c2.toggle("causal", value=shape.causal, key="p11_causal")
layout = c3.radio("layout", list(LAYOUTS), format_func=LAYOUTS.get, key="p11_layout", horizontal=True,
                  help="zig-zag: the sequence in 2P chunks, GPU d holds chunks d and 2P−1−d, so causal work is even")
schedule = rs.ring_schedule(P, causal=causal, layout=layout)
if st.session_state.get("p11_step", 0) > P - 1:  # the ring shrank under the remembered step
    st.session_state["p11_step"] = P - 1
step = st.slider("step", 0, P - 1, 0, key="p11_step")
grid = ring_ui.grid_frame(schedule)
g1, g2 = st.columns([3, 1])
charts.draw(g1, ring_ui.grid, grid, step, width="stretch")
charts.draw(g2, ring_ui.work_bars, grid, width="stretch", height=44 * P + 80)
st.info(rs.describe_step(schedule, step))
work = rs.work_per_device(schedule)
st.caption(f"Work is counted in full (T/P × S/P) blocks: a causal diagonal block is half, a masked one is skipped. "
           f"The ring takes {rs.ring_time_in_steps(schedule):g} block-times (each step waits for its busiest GPU) "
           f"for {sum(work):g} blocks of work, {max(work):g} on the busiest GPU and {min(work):g} on the idlest.")

st.subheader("Bytes and compute per step")
data = shipped.load(SHIPPED[2])
rates = ring_results.rates(data, shipped.load("h200"), shape.dtype)
st.write(
    f"Each step, every GPU sends its K and V blocks, 2·B·(S/P)·K·H·itemsize bytes, while it computes one block "
    f"of attention, about 4·B·(T/P)·(S/P)·N·H FLOPs (with a causal mask, a block on the diagonal half of that "
    f"and a block wholly above it none). The bytes grow with T, the FLOPs with T², so past some "
    f"length the compute hides the transfer. Here at the sidebar's B={shape.batch}, N={shape.heads}, "
    f"K={shape.kv_heads}, H={shape.head_dim}, {shape.dtype}, {'causal' if causal else 'not causal'}, "
    f"{LAYOUTS[layout]}, on P={P} GPUs, with T = S:"
)
if rates["flops_per_s"] is None:
    st.warning("No measured attention rate ships with this version, so the crossover cannot be drawn.")
else:
    lengths = [2**k for k in range(10, 21)]
    costs = pd.DataFrame(rs.step_costs(shape.batch, shape.heads, shape.kv_heads, shape.head_dim, shape.itemsize, P,
                                       lengths, rates["flops_per_s"], rates["bytes_per_s"], causal=causal,
                                       layout=layout))
    hiding_T = rs.hiding_length(shape.heads, shape.kv_heads, shape.itemsize, P, rates["flops_per_s"],
                                rates["bytes_per_s"], causal=causal, layout=layout)
    m1, m2, m3 = st.columns(3)
    m1.metric("sequence length where compute hides the send", f"T ≈ {hiding_T:,}",
              help="the dashed line: the shortest T with the busiest GPU's compute per step ≥ its send")
    m2.metric("attention rate assumed", f"{rates['flops_per_s'] / 1e12:.0f} TFLOP/s", help=rates["flops_source"])
    m3.metric("link bandwidth assumed (one way)", f"{rates['bytes_per_s'] / 1e9:.0f} GB/s", help=rates["bytes_source"])
    charts.draw(st, ring_ui.costs_chart, costs, hiding_T, width="stretch")
    st.caption(f"Rates: attention, {rates['flops_source']}; link, {rates['bytes_source']}. {rates['measured']}. A model, not a "
               "measurement: the same rate at every length.")
    common.table(costs.rename(columns={"bytes_per_step": "bytes"}), column_config={
        "tokens_per_device": st.column_config.NumberColumn("tokens per GPU (T/P)", format="%d"),
        "bytes": st.column_config.NumberColumn("bytes sent per step (each GPU)", format="localized"),
        "transfer_ms": st.column_config.NumberColumn("send per step (ms)", format="%.4f"),
        "compute_ms": st.column_config.NumberColumn("compute per step (ms)", format="%.4f"),
        "compute_flops": st.column_config.NumberColumn("FLOPs per step", format="%.3e"),
        "hidden": st.column_config.CheckboxColumn("compute hides the send")})

st.subheader("Measured on 2 × H200")
if data is None:
    st.info("The ring benchmark's results (`scripts/ring_bench.py` on two H200s, shipped as "
            "`attnlab/shipped/ring_h200x2.json`) do not ship with this version yet, so there is no per-step "
            "timeline, speed-up or crossover to show. The ring above and the bytes-per-step model do not need them.")
else:
    st.caption(f"📦 {ring_results.label(data)}. Shipped with the lab, not measured on this machine.")
    mask = st.radio("mask", ring_results.MASKS, format_func=lambda m: m.replace("_", "-"), horizontal=True,
                    key="p11_mask")
    summary = ring_results.timeline_summary(data, mask)
    if summary:
        t1, t2, t3 = st.columns(3)
        t1.metric(f"ring, overlapped (T={summary['T']:,})", f"{summary['ring_ms']:.3f} ms", help=summary["variant"])
        t2.metric("ring, send after compute", f"{summary['ring_no_overlap_ms']:.3f} ms")
        t3.metric("transfer hidden by overlap", f"{summary['transfer_hidden']:.0%}",
                  help="(no-overlap − overlapped) / total transfer time, clipped to 0–100 %")
        charts.draw(st, ring_ui.timeline_chart, ring_results.timeline(data, mask), width="stretch")
        st.caption(f"Bars: each step's compute (with its merge) and one send ({summary['send_ms']:.3f} ms, "
                   f"{summary['send_GBps']:.0f} GB/s), each timed alone and laid end to end; the metrics above "
                   "are the whole ring, timed. Overlap is the compiler's decision: XLA's scheduler lets one "
                   "collective run beside compute at a time unless told otherwise, and a ring step sends two "
                   "(K and V), so the benchmark allows two in flight "
                   "(`--xla_gpu_experimental_parallel_collective_overlap_limit=2`); without it the compiled "
                   "program sent V before any attention started.")
        ring_ui.compiled_order(data)
    speed = ring_results.speedups(data)
    y = st.radio("y axis", ["speedup", "efficiency"], horizontal=True, key="p11_speed_y")
    charts.draw(st, ring_ui.speedup_chart, speed, y, width="stretch")
    st.caption("Above the dashed line the ring pays: it beats one GPU (speed-up) or scales perfectly (efficiency). "
               "Compare the ring with all-gather, and the balanced causal ring with the contiguous one.")
    ring_ui.same_program_notes(data)
    common.text_table(ring_results.crossovers(data))  # every row in view: eleven lines, eleven rows
    if ring_results.skipped(data):
        st.caption(f"Not measured (the benchmark's time ran out): T = {ring_results.skipped(data)}.")
    errors = data.get("correctness_rel_err", {})
    st.caption(f"Correct: relative error against one GPU at T={errors.get('T')}: non-causal "
               f"{errors.get('non_causal', float('nan')):.1e}, causal {errors.get('causal', float('nan')):.1e}.")
    common.download(speed, "ring_h200x2_speedups")

st.subheader("More GPUs: scaling")
ring_ui.scaling(*ring_results.scaling({P_: shipped.load(name) for P_, name in SHIPPED.items()}))

st.subheader("Live: the ring against one GPU here")
gpus = jax.device_count() if jax.default_backend() == "gpu" else 0
if gpus < 2:
    st.info(f"This host has {gpus or 'no'} GPU{'' if gpus == 1 else 's'} ({jax.device_count()} "
            f"{jax.default_backend().upper()} device(s)), so the ring cannot run here: the model and "
            "the shipped H200 measurements above (where they ship) stand in. On a host with several GPUs a button here runs your shape on the ring.")
else:
    live_P = st.select_slider("GPUs", list(range(2, gpus + 1)), value=2, key="p11_live_P")
    method = st.radio("method", ["ring", "all_gather"], horizontal=True, key="p11_method")
    why = ring_live.unmet(shape, live_P, layout=layout)
    if why:
        st.warning(f"Cannot run on the ring: {why}.")
    elif sections.on_demand("p11_live", "Run ring vs one GPU", (shape, live_P, layout, method)):
        sections.queue_notice()
        r = sections.guarded(ring_live.compare, shape, live_P, layout=layout, method=method, what="The ring")
        if r is not None:
            l1, l2, l3, l4 = st.columns(4)
            l1.metric("one GPU, wall (ms)", f"{r['one'].wall_ms:.3f}")
            l2.metric(f"{method} on {live_P} GPUs, wall (ms)", f"{r['ring'].wall_ms:.3f}")
            l3.metric("speed-up", f"{r['one'].wall_ms / r['ring'].wall_ms:.2f}×")
            l4.metric("relative error vs one GPU", f"{r['relative_error']:.1e}",
                      help=f"max abs error {r['max_abs_error']:.2e}")
