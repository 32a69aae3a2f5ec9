"""Lab step 10: attention across GPUs, in three tabs: the ring drawn step by step with bytes against compute
per step (a model); ring attention measured on 2 × H200 (shipped); scaling past two GPUs and a live run
where this host has several GPUs."""

import streamlit as st

from attnlab.studies import ring_live, ring_results
from attnlab.studies import ring_schedule as rs
from pages import charts, common, ring_ui, sections, waiting, workers

LAYOUTS = ring_ui.LAYOUTS
SHIPPED = {P: f"ring_h200x{P}" for P in (2, 4, 8)}

st.title("10 · Across GPUs")
st.write(
    "When a sequence is too long for one GPU, split it: each of P GPUs keeps T/P queries and S/P keys and "
    "values. Ring attention then passes the K/V blocks around a ring: at every step each GPU attends its "
    "queries to the block it holds and sends that block to its neighbour, so after P steps every query has met "
    "every key. The partial results merge exactly through each block's log-sum-exp (as in flash attention)."
)
shape = common.require_shape()

model, measured, more = sections.tabs("p11_tab", ["The ring and its costs (a model)", "Measured on 2 × H200",
                                                    "More GPUs, and live"])
if model.open:
    with model:
        st.caption("**What to look at:** which block each GPU holds at each step and who waits (the grid), why the "
                   "balanced layout evens out causal work, and the sequence length past which a step's compute hides "
                   "its send (the dashed line).")
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
        ring_ui.costs(shape, ring_results.RingRun.load(SHIPPED[2]), P, causal, layout)

if measured.open:
    with measured:
        st.caption("**What to look at:** whether the sends hid behind the attention (the timeline), and the length "
                   "from which the ring beats one GPU (speed-up above 1) and beats all-gather.")
        ring_ui.measured(ring_results.RingRun.load(SHIPPED[2]))

if more.open:
    with more:
        st.caption("**What to look at:** efficiency (speed-up over one GPU, divided by P) at each ring size measured: "
                   "it stays near 1 as P grows only if each GPU's block of the sequence stays long enough for its "
                   "compute to hide the send.")
        st.subheader("More GPUs: scaling")
        ring_ui.scaling(*ring_results.scaling({P_: ring_results.RingRun.load(name) for P_, name in SHIPPED.items()}))

        st.subheader("Live: the ring against one GPU here")
        info = workers.device_info()
        gpus = info.device_count if info.backend == "gpu" else 0
        if gpus < 2:
            n = info.device_count
            st.info(f"The device worker has {gpus or 'no'} GPU{'' if gpus == 1 else 's'} ({n} "
                    f"{info.backend.upper()} device{'' if n == 1 else 's'}), so the ring cannot run here: the model and "
                    "the shipped H200 measurements of the other tabs (where they ship) stand in. On a host with "
                    "several GPUs a button here runs your shape on the ring.")
        else:
            live_P = st.select_slider("GPUs", list(range(2, gpus + 1)), value=2, key="p11_live_P")
            method = st.radio("method", ["ring", "all_gather"], horizontal=True, key="p11_method")
            layout = st.radio("layout", list(LAYOUTS), format_func=LAYOUTS.get, key="p11_live_layout", horizontal=True)
            why = common.on_device(ring_live.unmet, shape, live_P, layout=layout)
            if why:
                st.warning(f"Cannot run on the ring: {why}.")
            elif sections.on_demand("p11_live", "Run ring vs one GPU", (shape, live_P, layout, method)):
                with waiting.fresh():  # the last run's numbers go as the ring runs again
                    sections.queue_notice()
                    r = sections.guarded(common.on_device, ring_live.compare, shape, live_P, layout=layout, method=method,
                                         what="The ring")
                    if r is not None:
                        l1, l2, l3, l4 = st.columns(4)
                        l1.metric("one GPU, wall (ms)", f"{r.one.wall_ms:.3f}")
                        l2.metric(f"{method} on {live_P} GPUs, wall (ms)", f"{r.ring.wall_ms:.3f}")
                        l3.metric("speed-up", f"{r.speedup:.2f}×")
                        l4.metric("relative error vs one GPU", f"{r.relative_error:.1e}",
                                  help=f"max abs error {r.max_abs_error:.2e}")
