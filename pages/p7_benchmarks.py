"""Lab step 7: what one attention call costs here, how the lab times it, and how it grows with T and B."""

import streamlit as st

from attnlab.measure import timing
from attnlab.studies import timing_demo
from pages import benchmarks_ui as ui
from pages import codeblock, common, opening, sections, tables, vendor_ui, waiting, workers

st.title("7 · Benchmarks")
st.write("A timing is only as good as what it measures. The lab's one harness (`attnlab.measure.timing`) times every "
         "implementation the same way and reports up to four numbers; the tabs below show them at your shape, the "
         "code that takes them, how they grow with sequence length and batch, and the long-context results of an H200.")
info = workers.device_info()
on_gpu = info.backend == "gpu"
shape = common.require_shape()
common.unmet(shape, ahead=True)  # every implementation's check (seconds at a new shape), read below: opening.first_request
here, how, sweeps, long_tab, vendor_tab = sections.tabs("p7_tab", ["At your shape", "How it is timed", "Sweeps",
                                                                    "Long context on an H200", "NVIDIA's H200 table"])


dispatch = common.cached(timing_demo.dispatch_demo)


if here.open:
    with here:
        codelab = list(opening.p7_timed(common.runnable(shape, opening.P7_TIMED)))  # timed without asking
        every = st.session_state.get("p7_every", False)  # the toggle below: the header says what the table holds
        timed = common.runnable(shape) if every else codelab
        which = "Every implementation" if every else "The codelab's implementations"
        st.header(f"{which} at {shape.describe()}")
        st.caption("**What to look at:** wall against throughput (how much is Python's dispatch), the spread (how far "
                   "to trust a difference), and TFLOP/s. The notes under the table say what each oddity means.")
        st.toggle("every implementation that runs here", key="p7_every",
                  help="The codelab's (those of naive, sdpa_xla and sdpa_cudnn that run here) are timed as soon as the "
                       "page opens (small shapes); the others on the button.")
        if sections.on_demand("p7_here", f"Time {len(timed)} implementations at this shape", (shape, tuple(timed)),
                              auto=sections.small(shape) and not every, timing=((shape,), len(timed))):
            with waiting.fresh():
                sections.queue_notice()
                # in a hosted class, a timing taken as the page opens is of untuned programs: XLA's autotuner runs its
                # candidate kernels on the GPU, so a tuned compile holds every learner's run while it tunes (on the H200
                # an own-shape class's page 7 waited 13 s for its three, most of it behind others' tuning)
                quick = opening.untuned_on_open(on_gpu) and not every
                tuned = not quick or sections.on_demand("p7_tuned", "Time again, autotuned as JAX does by default",
                                                        (shape, tuple(timed)))
                df = sections.guarded(common.frame, shape, tuple(timed), timed=True, what="Timing",
                                      budget_s=None if every else opening.P7_BUDGET_S, tuned=None if tuned else False)
                if df is not None and not tuned:
                    st.caption("Timed as the page opened, in a class sharing the GPU: each program was compiled without "
                               "XLA's autotuning, which runs candidate matmul kernels on the GPU to keep the fastest and "
                               "holds every learner's runs while it does. JAX autotunes by default, and the kernels it "
                               "keeps can differ from these (page 4, under its table of programs, gives an example). The button above "
                               "times the autotuned programs.")
                if df is not None:
                    df = timing_demo.annotate(df)
                    tables.table(df[df["status"] == "ok"][["implementation", "label", "wall_ms", "wall_ms_iqr",  # numbers first,
                                                            "wall_spread_pct", "throughput_ms", "device_ms",  # text last
                                                            "kernel_count", "tflops", "device_tflops", "pct_of_peak",
                                                            "compile", "timing_note"]], column_config=ui.HERE)
                    for note in timing_demo.notes(df, on_gpu):
                        st.markdown(f"- {note}")
                    ui.bars(df)
                    if on_gpu and df["device_ms"].notna().any():
                        st.markdown("**What ran on the GPU** (CUPTI, one call): when wall time is far above device time, the "
                                    "difference is Python dispatch, launch and synchronisation, not attention.")
                        tables.table(df[["implementation", "device_ms", "wall_ms", "kernel_count", "kernels", "custom_calls"]])
                    else:
                        st.info("No device time or kernel names here: they come from CUPTI, NVIDIA's profiling interface, "
                                "which needs an NVIDIA GPU. Wall time on the CPU backend is the whole computation plus dispatch.")
                    sections.not_run(df)
                    tables.download(df, f"timings_{shape.describe().replace(' ', '_')}", "Download these timings (CSV)")
        else:
            st.info(f"This shape is {shape.flops() / 1e9:,.1f} GFLOP per call; press the button to time it here.")
        cannot = common.support_table(shape, merged=True).query("`runs here` == 'no'")
        if len(cannot):
            st.markdown("**Cannot run this shape here**")
            tables.text_table(cannot[["implementation", "label", "why not"]])
        with st.expander("📦 The codelab's shape on an H200 (float32 and bfloat16)", expanded=not on_gpu):
            ref = sections.shipped_frame("default")
            if ref.empty:
                st.info("No H200 results ship with this version, so there is nothing measured on a GPU to show here. "
                        "On a GPU machine, `python -m attnlab bench --out attnlab/shipped/h200.json` makes them.")
            else:
                tables.table(ref[ref["status"] == "ok"][["implementation", "dtype", "wall_ms", "wall_ms_iqr",
                                                         "throughput_ms", "device_ms", "kernel_count", "tflops",
                                                         "device_tflops", "pct_of_peak"]])
                ui.bars(ref, "H200: ")
                st.caption(ui.CLOCK_NOTE)
                sections.not_run(ref, keys=("implementation", "dtype"))
                tables.download(ref, "h200_default", "Download the H200 table (CSV)")

if how.open:
    with how:
        st.header("How the harness times a call")
        st.caption("**What to look at:** the gap between a call that was only queued and one that was waited for.")
        st.markdown(
            "JAX **dispatches asynchronously**: `f(q, k, v)` returns as soon as the work is queued on the device, long "
            "before the result exists. A clock read right after the call measures only the queueing, so the codelab's "
            "`benchmark_attention` compiles with `jax.jit`, warms up, then reads `time.perf_counter()` around the call "
            "*and* `block_until_ready()`, and takes the median of many such calls. That is **wall** time. **Throughput** "
            "queues many calls and waits once: Python dispatches the next call while the device runs the last, as in a "
            "training loop. **Device** time is the GPU's own kernel time (CUPTI), with no Python in it. "
            "**TFLOP/s** is the matmul FLOPs (4·B·N·T·S·H, halved when causal) over throughput (or device) time.")
        launch = common.on_device(timing.launch_note) if on_gpu else ""
        if launch:
            st.caption(launch)
        st.markdown("The code `attnlab.measure.timing.time_compiled` runs (read from its source):")
        codeblock.code(timing_demo.harness_source())
        st.subheader(f"Live: the same jitted call, four ways, at {shape.describe()}")
        st.caption("`f` is sdpa_xla (`jax.nn.dot_product_attention(..., implementation=\"xla\")`), compiled once. Each "
                   "figure is a median of a few repetitions (10 calls; the last, 3 rounds of 20) taken at its own moment, so its wall time can differ from the "
                   "harness's in the first tab, most on a busy CPU: compare the four rows with each other.")
        if sections.on_demand("p7_dispatch", "Run the demonstration", shape, auto=sections.small(shape)):
            with waiting.fresh():
                demo = sections.guarded(dispatch, shape, what="The demonstration")
                if demo is not None:
                    tables.text_table(demo[["measured", "code", "ms", "what it is"]].rename(columns={"ms": "ms per call"}))
                    st.markdown(timing_demo.dispatch_reading(demo, on_gpu))

if sweeps.open:
    with sweeps:
        st.caption("**What to look at:** how each line climbs. Naive attention materialises the B·N·T·S scores, so it "
                   "grows as T²; a fused kernel's TFLOP/s climbs until the GPU is full. One colour per implementation; in "
                   "the live charts solid and dashed lines are the two dtypes, in the H200's (bfloat16 only) a dashed line "
                   "is one lying on another. Masks of padding are left out of the sweeps.")
        preferred = [n for n in common.runnable(shape) if n in ("naive", "sdpa_xla", "sdpa_cudnn", "te_dpa")]
        st.header("Sequence length")
        st.write("q_len = kv_len = T grows; the rest of the sidebar's shape stays. Values default to what a "
                 + ("GPU" if on_gpu else "CPU finishes in seconds") + ".")
        ui.sweep("p7_seq", "q_len", [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
                 [256, 1024, 4096] if on_gpu else [64, 128, 256],
                 lambda t: shape.replace(q_len=t, kv_len=t, kv_lengths=()), "sequence sweep", "seq_sweep", preferred)
        t_batch = 256 if on_gpu else 128
        st.header("Batch size")
        st.write(f"B grows at T = {t_batch} here (the H200 sweep beside it names its own shapes). Small batches leave most of a GPU idle, so TFLOP/s climbs with B until the "
                 "device is full; the time per call stays nearly flat until then.")
        ui.sweep("p7_batch", "batch", [1, 2, 4, 8, 16, 32, 64], [1, 4, 16],
                 lambda b: shape.replace(batch=b, q_len=t_batch, kv_len=t_batch, kv_lengths=()), "batch sweep",
                 "batch_sweep", preferred)

if long_tab.open:
    with long_tab:
        ui.long_context()

if vendor_tab.open:
    with vendor_tab:
        vendor_ui.section()
