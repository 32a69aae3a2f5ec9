"""The building blocks pages are made of: each a section a learner recognises from page to page.

    tabs              tabs that draw only the open one: a page opens at the cost of its first tab
    on_demand         heavy work runs on a button (small shapes run at once); the result belongs to
                      the shape and settings it was asked for, and only those (one staleness rule)
    guarded           a computation whose failure (memory budget, busy GPU, out of memory) is a
                      message on the page, never an exception
    results           a run-layer table: what ran, and what did not with its reason
    shipped           the measurement from a real GPU, labelled with where and when it was made
    sweep             a sweep with progress, chart, table and CSV download
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd
import streamlit as st

from attnlab import shipped
from attnlab.admission import DeviceBusy, OverBudget
from attnlab.backends import known_aborts
from attnlab.backends.naive import NAIVE
from attnlab.measure import cost, runs
from attnlab.service import WorkerLost
from attnlab.shapes import AttentionShape
from pages import charts, common, encodings, tables, waiting, workers

AUTO_GFLOP = 2.0  # below this (and AUTO_BYTES of naive memory), a page computes without a click
AUTO_BYTES = 256 * 2**20


def small(shape: AttentionShape) -> bool:
    """Cheap enough to compute on page load, for every learner, without asking."""
    return shape.flops() / 1e9 <= AUTO_GFLOP and NAIVE.device_bytes(shape) <= AUTO_BYTES


def tabs(key: str, labels: Sequence[str]) -> Sequence:
    """st.tabs whose closed tabs are not run: opening a tab reruns the page and draws it (its `.open`
    is True), so a page costs its server and its learner's browser one tab, not all of them."""
    return st.tabs(list(labels), key=key, on_change="rerun")


def on_demand(key: str, label: str, params, *, auto: bool = False, help: str | None = None,
              timing: tuple | None = None) -> bool:
    """True when the learner asked for this computation with exactly these `params` (or `auto`).

    The answer is remembered per key: change the shape or a setting and the button comes back,
    so a result is never shown for parameters it was not computed with. `timing`: (the shapes, the number of
    implementations timed at each[, backward]); the cost model's estimate is said before the button when it is long.
    """
    asked = st.session_state.get(f"asked_{key}")
    seconds = common.on_device(cost.timing_seconds, tuple(timing[0]), *timing[1:]) if timing is not None else 0.0
    # the same places on the page in every run, asked or not: one for the button, the estimate or nothing, one for
    # the result. The run after a click draws no button; without these every later element moved up by one while the
    # click's run's result (a spinner's caption) stayed below, faded, where the next section's heading belongs
    # (Streamlit keeps a run's elements until each place is drawn again; seen in a browser as two contradicting
    # places in the device's line), and the first click moved the next heading's place to the spinner's.
    with st.empty().container():
        if auto or asked == params:
            if seconds >= waiting.SAY_S:  # while it runs, the spinner below counts up to it
                st.caption(f"⏳ The lab's cost model puts this at about {seconds:,.0f} s here (its FLOPs at the rate "
                           "naive attention reaches on this device).")
            return True
        note = waiting.long_work_note(seconds)
        if note:
            st.warning(note)
        # the ask is kept by the click's callback, which Streamlit runs before the script: a run that stops before
        # the button (another click of the learner's restarts it) returned no True, and the click was lost
        if st.button(label, key=f"btn_{key}", type="primary", help=help, on_click=_ask, args=(key, params)):
            _ask(key, params)  # clicked as the settings changed: the callback kept the ones the button was drawn with
            return True
    st.empty()  # the place its result takes (`waiting.fresh`) once asked: what follows keeps its place as it runs
    return False


def _ask(key: str, params) -> None:
    st.session_state[f"asked_{key}"] = params


def clamp(key: str, high: int, default: int = 0) -> None:
    """Keep a widget's remembered value inside its current bounds (the shape may have shrunk)."""
    if key in st.session_state and not 0 <= st.session_state[key] <= high:
        st.session_state[key] = min(max(default, 0), high)


def guarded(fn: Callable, *args, what: str = "This computation", **kwargs):
    """fn(*args, **kwargs), or None with a message on the page when it cannot be done now."""
    try:
        return fn(*args, **kwargs)
    except WorkerLost as e:  # the device worker died under this request (a native crash): it is back soon
        st.warning(f"{what} was lost: {e}")
    except OverBudget as e:
        st.warning(f"{what} is too big for this server: it {e}. Choose a smaller shape in the sidebar.")
    except DeviceBusy as e:
        st.info(f"{e} Other learners' runs are queued ahead of this one.")
    except Exception as e:  # out of memory, or a backend's error: a message, and the app keeps serving
        status, reason = runs.failure(e)
        st.error(f"{what} failed ({status}): {common.literal(reason)}")
    return None


def queue_notice() -> None:
    """Say so when other learners' runs hold or wait for the GPU (this one takes its turn)."""
    try:
        info = workers.worker_info()
    except WorkerLost:
        return
    if info.running or info.waiting:
        st.info(f"{info.running} run{'' if info.running == 1 else 's'} on the device, {info.waiting} waiting "
                "(as of the last 30 s): this one takes "
                "its turn. One run uses the device at a time, so every timing has it to itself (briefer while "
                "others wait; the table says so).")


def results(df: pd.DataFrame, columns: Sequence[str], *, failed: bool = True) -> None:
    """The rows that ran, with `columns`; then each row that did not, with its status and reason."""
    ok = df[df["status"] == runs.OK]
    if not ok.empty:
        tables.table(ok[list(columns)])
    if failed:
        not_run(df)


def not_run(df: pd.DataFrame, keys: Sequence[str] = ("implementation",)) -> None:
    wrong = df[df["status"] == runs.BAD_GRADIENTS]  # timed, but the program timed computes wrong gradients
    if not wrong.empty:
        st.markdown("**Timed, but its gradients are wrong** (against float64, by FlashAttention's rule)")
        tables.text_table(wrong[[*keys, "throughput_ms", "reason"]].drop_duplicates())
    bad = df[~df["status"].isin([runs.OK, runs.BAD_GRADIENTS])]
    if not bad.empty:
        st.markdown("**Not run here**")
        tables.text_table(merged(bad[[*keys, "status", "reason"]].drop_duplicates(), keys))
        memory_note(bad)
        crashed = set(bad.loc[bad["reason"].astype(str).str.contains(known_aborts.CRASH), "implementation"])
        seen = [k.seen for k in known_aborts.KNOWN if crashed & set(k.backends)]
        if seen:
            with st.expander("What the compiler said when it crashed at this shape (why the lab refuses it)"):
                for words in dict.fromkeys(seen):
                    st.code(words, language=None, wrap_lines=True)


def merged(bad: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Implementations refused for the same reason as one row naming them all (a refusal starts "<name> at <shape>:
    ", the page's shape: said once, the sentence is the same)."""
    if list(keys) != ["implementation"] or len(bad) < 2:
        return bad

    def own(row) -> str:
        reason = str(row["reason"])
        return reason.split(": ", 1)[1] if reason.startswith(f"{row['implementation']} at ") and ": " in reason else reason

    out = bad.assign(reason=bad.apply(own, axis=1))
    return (out.groupby(["status", "reason"], sort=False, as_index=False)["implementation"]
            .agg(lambda names: ", ".join(dict.fromkeys(names)))[["implementation", "status", "reason"]])


def memory_note(bad: pd.DataFrame) -> None:
    """Under a table of failures: what a memory refusal and an out-of-memory mean, when there are any."""
    reasons = " ".join(bad["reason"].astype(str))
    if not ({runs.OVER_BUDGET, runs.OOM} & set(bad["status"]) or "cap of" in reasons or "budget of" in reasons):
        return
    st.caption("Two kinds of memory failure. A refusal is the lab's estimate of the bytes, made before anything "
               "runs, against one budget: 80 % of the GPU memory free when the device worker starts (on a CPU, "
               "half of the memory available; each reason names its budget). Shipped refusals are restated by "
               "today's rule. *Out of memory* passed the estimate the lab made when it ran (a shipped one, an older "
               "version's), and then XLA could not allocate a buffer on the GPU.")


def shipped_frame(table: str, *, caption: bool = True) -> pd.DataFrame:
    """A table of the shipped H200 measurements, captioned with where and when they were made."""
    df = shipped.frame(table)
    if caption and not df.empty:
        st.caption(f"📦 {shipped.label()}. Shipped with the lab, not measured on this machine.")
    return df


def sweep(key: str, shapes: Sequence[AttentionShape], names: Sequence[str], label: str, **parts) -> pd.DataFrame:
    """Run every (shape, implementation) with a progress bar; one table (cached per shape)."""
    queue_notice()
    frames = []
    with st.status(label, expanded=False) as status:
        bar = st.progress(0.0)
        for i, s in enumerate(shapes):
            status.update(label=f"{label}: {s.describe()} (shape {i + 1} of {len(shapes)}, {len(names)} cells each)")
            frames.append(common.frame(s, names, **parts))
            bar.progress((i + 1) / len(shapes))
        status.update(label=f"{label}: done ({len(shapes)} shapes × {len(names)} = {len(shapes) * len(names)} cells)",
                      state="complete")
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=runs.COLUMNS)


def sweep_chart(df: pd.DataFrame, x: str, key: str, options=("wall_ms", "throughput_ms", "device_ms", "tflops",
                                                            "device_tflops"), first: str | None = None) -> None:
    """A line per implementation (one colour each, everywhere), the y axis of the learner's choice
    (`first`, where the sweep has it, is what the chart opens on)."""
    good = df[df["status"] == runs.OK]
    present = [c for c in options if good[c].notna().any()] if not good.empty else []
    if not present:
        st.warning("No cell of this sweep could run here; the reasons are below.")
        return
    y = st.selectbox("y axis", present, index=present.index(first) if first in present else 0, key=f"{key}_y",
                     format_func=tables.label)
    charts.draw(st, encodings.line_chart, good, x=x, y=y, title=f"{tables.label(y)} by {x}", width="stretch")
