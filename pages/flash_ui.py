"""Page 5b's tabs, each a section: the flash algorithm walked tile by tile, the bytes it saves, its backward
pass, masks that skip tiles, and the ladder of implementations (shipped H200 measurements)."""

import numpy as np
import pandas as pd
import streamlit as st

from attnlab.math import flash
from attnlab.measure import runs
from attnlab.shapes import AttentionShape
from attnlab.studies import memory
from pages import (
    charts,
    codeblock,
    common,
    fused_ui,
    kernel_ui,
    sections,
    tables,
    waiting,
    workers,
    yourturn_ui,
)

TINY = 16  # T = S = 16 positions, one head: every tile and every row readable
NAMES = ["naive", "sdpa_xla", "flash_jax", "sdpa_cudnn"]


@st.cache_data(max_entries=256, ttl=6 * 3600, show_spinner=False)
def steps(block_q: int, block_k: int, causal: bool, window, length) -> list:
    q, k, v = np.random.default_rng(0).standard_normal((3, TINY, 8)).astype(np.float32)
    return flash.step_through(q, k, v, block_q=block_q, block_k=block_k, causal=causal, window=window,
                              kv_lengths=length)


def compiled_memory(shape: AttentionShape, lengths: tuple) -> pd.DataFrame:
    return common.on_device(memory.compiled_memory, shape, NAMES, lengths)


def lengths_of(shape: AttentionShape) -> tuple:
    """T = S for the compiled-memory charts: the sidebar's T and past flash_jax's 512-wide tile (compiles only)."""
    return tuple(sorted({max(16, shape.q_len // 2), shape.q_len, 2 * shape.q_len, 512, 1024, 2048, 4096}))


def step_through(shape: AttentionShape, page: str) -> None:
    """A tiny example's online softmax, one tile per step, then `page`'s exercise that asks for it."""
    st.info(f"**What to look at:** a tiny example of its own (T = S = {TINY}, one head, H = 8, float32) walked tile "
            "by tile. Watch the running max m jump, the rescale factor shrink the old sum, and the block's partial "
            "output reach the exact one when its last key block is done.")
    causal, window, length = kernel_ui.mask_controls("p10_walk", shape, TINY)
    c1, c2 = st.columns(2)
    bq = c1.select_slider("query block size", [2, 4, 8], value=4, key="p10_bq")
    bk = c2.select_slider("key block size", [2, 4, 8], value=4, key="p10_bk")
    walk = steps(bq, bk, causal, window, length)
    if st.session_state.get("p10_step", 1) > len(walk):  # fewer tiles than before: back to the first
        st.session_state["p10_step"] = 1
    n = st.slider("step (one tile each)", 1, len(walk), 1, key="p10_step")
    s = walk[n - 1]
    kinds = flash.tile_map(TINY, TINY, bq, bk, causal, window, length)
    left, right = st.columns([2, 3])
    charts.draw(left, kernel_ui.tile_chart, kernel_ui.tile_frame(kinds, n - 1), "state", "tiles: Q block × K block")
    right.metric(f"tile (Q block {s.q_block}, K block {s.k_block})", s.kind)
    right.metric(f"max |partial − exact| over Q block {s.q_block}", f"{s.max_error:.2g}",
                 help="this block's output so far, diag(l)⁻¹·O, against the exact float64 output")
    if s.kind == "skipped":
        right.caption("No query of this block may see any key of this block: the kernel skips it, nothing changes.")
    tables.table(kernel_ui.step_table(s), hide_index=False, drop_empty=False)
    charts.draw(st, kernel_ui.error_chart, walk, n, width="stretch")
    st.caption("Each query block's partial output starts at 0, so its line starts high (the exact output's size), "
               "and falls on its own; after its last tile the difference is rounding (float32 against float64).")
    with yourturn_ui.answer("online_softmax", "The lab's own update of one tile (Algorithm 1, lines 8-10)"):
        codeblock.code(kernel_ui.flash_update_source())
        st.caption("attnlab/math/flash.py: the online-softmax update of one tile, as it runs on the GPU through "
                   "JAX. " + kernel_ui.LINES_NOTE)
    yourturn_ui.exercises_of(page, shape)


def traffic(shape: AttentionShape, found) -> None:
    """The bytes naive and flash move (a model), and the scratch each compiles to here."""
    lengths = lengths_of(shape)
    st.info("**What to look at:** naive attention writes the scores and weights (T × S float32) and reads them "
            "back; flash moves only Q, K, V and O, re-reading K and V once per query block of each query head "
            "(the N/K query heads of a group each read their group's K and V). The model below is in bytes to "
            "and from GPU memory, for the sidebar's B, N, K, H and dtype.")
    kernel_ui.traffic_block(shape)
    if sections.on_demand("p10_compiled", "Compile and read the scratch memory", (shape, lengths)):
        with waiting.fresh():  # the last shape's chart goes as this one compiles
            df = sections.guarded(compiled_memory, shape, lengths, what="Compiling")
            if df is not None:
                fused_ui.memory_chart(df, "temp_bytes", f"compiled scratch (temp) bytes, {shape.describe()}, T = S varied",
                                      "compiled scratch (log)")  # lines on top of each other are named
                st.caption(tile_note(df))
                sections.not_run(df)
    kernel_ui.ncu_block(found)


def tile_note(df: pd.DataFrame) -> str:
    """Why flash_jax's compiled scratch can be above naive's at short lengths, naming the lengths where it is."""
    ok = df[df["status"] == runs.OK]
    by = {n: dict(zip(g["q_len"], g["temp_bytes"], strict=True)) for n, g in ok.groupby("implementation")}
    flash_, naive = by.get("flash_jax", {}), by.get("naive", {})
    above = [t for t in sorted(flash_) if t in naive and flash_[t] > naive[t]]
    return ("flash_jax's tile is min(512, T) × min(512, S): up to T = S = 512 one tile is the whole score matrix, so "
            "flash_jax saves nothing there: it keeps a whole score matrix as naive does, plus its loop's own state (the "
            "blocked inputs it walks, its running output)" +
            (f", and here its scratch is the larger at T = {', '.join(f'{t:,}' for t in above)}" if above
                         else "") + ". Past 512 only the number of tiles grows, while naive's scores grow as T × S.")


def backward(shape: AttentionShape) -> None:
    """What the backward pass keeps and recomputes, and the forward+backward scratch compiled here."""
    lengths = lengths_of(shape)
    st.info("**What to look at:** the backward pass needs the softmax weights P. Flash keeps only O and one "
            "log-sum-exp per row, and rebuilds S and P tile by tile: compiled memory stays O(T) in training too.")
    st.dataframe(pd.DataFrame(flash.BACKWARD_PLAN, columns=["what", "shape", "kept or recomputed"]),
                 hide_index=True, width="stretch", placeholder=tables.MISSING)
    st.caption("dO: the gradient arriving at the output O. i, j: a block of Br queries, a block of Bc keys (one tile).")
    if sections.on_demand("p10_backward", "Compile forward+backward", (shape, lengths)):
        with waiting.fresh():
            df = common.frames([shape.replace(q_len=t, kv_len=t) for t in lengths], ("naive", "flash_jax", "sdpa_cudnn"),
                               accuracy=False, program=True, backward=True, tuned=True)
            ok = df[df["status"] == "ok"]
            if not ok.empty:
                charts.draw(st, kernel_ui.bytes_chart, ok, "q_len", "temp_bytes", "implementation",
                            "forward+backward scratch (temp) bytes", "T = S", "scratch, temp_bytes",
                            width="stretch")
                st.caption(f"Compiled on this machine ({workers.device_info().backend.upper()}) at {shape.describe()}, "
                           "T = S varied. flash_jax walks 512 × 512 tiles: up to T = 512 one tile is the whole score "
                           "matrix, so its memory grows like naive's; past it only the number of tiles grows.")
            sections.not_run(df)


def masks(shape: AttentionShape, found) -> None:
    """The tiles a mask lets a fused kernel skip, at the sidebar's shape, and the shipped mask sweep."""
    st.info("**What to look at:** a tile no query of its block may see is never loaded (white, crossed); a partly hidden "
            "tile (orange) is computed and masked inside. Skipped tiles are time saved, which is why a fused kernel's "
            "time falls with the window, while XLA computes every score and then masks it, so a mask only "
            "adds work (on the H200, causal made it slower).")
    causal_m, window_m, length_m = kernel_ui.mask_controls("p10_masks", shape, shape.kv_len)
    block = st.select_slider("tile (block_q = block_k)", [16, 32, 64, 128, 256], value=128 if shape.q_len >= 512
                             else 16, key="p10_tile")
    block = max(block, int(np.ceil(max(shape.q_len, shape.kv_len) / 64)))  # at most 64 × 64 tiles drawn
    kinds = flash.tile_map(shape.q_len, shape.kv_len, block, block, causal_m, window_m, length_m)
    tiles = kernel_ui.tile_frame(kinds)
    masked = shape.replace(batch=1, causal=causal_m, window=window_m, kv_lengths=(length_m,) if length_m else ())
    c1, c2 = st.columns([2, 3])
    charts.draw(c1, kernel_ui.tile_chart, tiles, "kind", f"tiles of {block} × {block} positions, one sequence")
    share = tiles["kind"].value_counts(normalize=True)
    c2.metric("tiles skipped", f"{share.get('skipped', 0):.0%}")
    c2.metric("tiles computed (full + partial)", f"{1 - share.get('skipped', 0):.0%}")
    c2.metric("(query, key) pairs the masks let through", f"{masked.visible_fraction():.0%}")
    c2.caption("Computed tiles ≥ pairs let through: the difference is masked work inside partial tiles."
               + ("" if share.get("skipped", 0) else " No mask, no skipping: turn on causal or a window above."))
    kernel_ui.mask_sweep_block(found)


def ladder(found) -> None:
    """The ladder of implementations (shipped), and the same loop in plain JAX and in tokamax's Pallas kernel."""
    st.info("**What to look at:** the same attention at B4 T8192 N16 H128 bf16, written seven ways, each rung "
            "adding one idea (its sentence is in the table). Saving memory alone does not make it fast: the "
            "chunked and plain-JAX tilings hold O(T) memory yet run slower than XLA's fused O(T²) program; the "
            "jump comes when the tiles stay on chip in one kernel (Triton), and again with Hopper's asynchronous "
            "tensor-core instructions (Mosaic GPU, cuDNN) and FP8. The roofline places each rung against two roofs, "
            "the datasheet's and the one measured in the same run, by the bytes it moves.")
    kernel_ui.ladder_block(found)
    st.subheader("The same loop, two ways")
    with yourturn_ui.answer("online_softmax", "Plain JAX: the lab's update of one tile"):
        codeblock.code(kernel_ui.flash_update_source())
        st.caption("Plain JAX (attnlab/math/flash.py): the running max m, the rescale, the sum l, the accumulator "
                   "O. " + kernel_ui.LINES_NOTE)
    which = st.radio("Pallas kernel", ["mosaic", "triton"], horizontal=True, key="p10_kernel",
                     format_func={"mosaic": "Mosaic GPU (Hopper)", "triton": "Triton"}.get)
    text, where = kernel_ui.pallas_source(which)
    codeblock.code(text)
    st.caption(f"The same steps in tokamax's kernel (max, exp, rescale, sum, accumulate), marked ◀ at the left. {where}")
