"""Shared UI for every page: calls to the device service (cached) and the page's shape. No attention math lives
here (tables with one vocabulary of labels and CSV downloads are pages/tables.py; the shape sidebar is
pages/sidebar.py; page sections are pages/sections.py; the charts' shared encodings, one colour per
implementation, pages/encodings.py).
"""

from __future__ import annotations

import concurrent.futures
import functools

import pandas as pd
import streamlit as st

from attnlab import backends, device, service
from attnlab.backends import REGISTRY
from attnlab.measure import runs
from attnlab.service.request import Request
from attnlab.shapes import AttentionShape
from pages import session_watch, waiting

# --------------------------------------------------------------------------------------------
# the device service: pages never touch a GPU; they ask the device worker and keep its answers
# --------------------------------------------------------------------------------------------
# Each answer is kept here (st.cache_data) and in the worker (its recent results), so a learner's new
# tab, or another learner on this server, is answered at once, and another UI process's learners at
# the cost of a round trip. A failure (a worker that died, a busy GPU) is raised, so it is not kept.
CACHE = dict(max_entries=1024, show_spinner=False, ttl=12 * 3600)


class _NotKept(Exception):
    """An answer to show once but not keep (a run refused because the GPU was busy: the next visit asks again)."""

    def __init__(self, value):
        super().__init__("not kept")
        self.value = value


@st.cache_data(**CACHE)
def _on_device(fn: str, args: tuple, kwargs: tuple):
    reply = session_watch.send(Request(fn, args, kwargs))  # with this tab's session: dropped if it closes
    if reply.error is not None:
        raise reply.error
    if not reply.kept:
        raise _NotKept(reply.value)
    return reply.value


def on_device(fn, *args, **kwargs):
    """fn(*args, **kwargs), run by the device worker (fn: an entry point, attnlab/service/entries.py, or its
    "module:function" name), kept per arguments: everyone who asks the same thing shares one answer."""
    r = Request.of(fn, *args, **kwargs)

    try:  # a spinner and the request's place in the device's line, unless it is answered within half a second
        return waiting.wait(r, lambda: _on_device(r.fn, r.args, r.kwargs))
    except _NotKept as e:
        return e.value


def ask_ahead(fn, *args, **kwargs) -> None:
    """Ask the device worker for fn(*args, **kwargs) now and go on without its answer: a page that will need
    several answers asks for the later ones first, so they wait in the device's line together instead of one
    after another (in a class each waits seconds for its turn). The page's own `on_device` call of the same
    request later meets it in the worker, in flight or kept, and is computed once. Nothing is shown: an error
    is the later call's to show."""
    _AHEAD.submit(_ask, session_watch.stamped(Request.of(fn, *args, **kwargs)))


_AHEAD = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="attnlab-ahead")  # this process's, bounded


def _ask(request: Request) -> None:
    try:
        session_watch.send(request)
    except Exception:  # noqa: BLE001 (the page's own call asks again and shows what failed)
        pass


def send(request: Request):
    """A request whose answer is not kept (the class's progress counts): its value, or None when no device
    worker could take it (the page goes on without it)."""
    try:
        return service.send(request).unwrap()
    except service.WorkerLost:
        return None


def cached(fn):
    """`fn` as a page calls it: run by the device worker and kept (`on_device`)."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return on_device(fn, *args, **kwargs)

    call.ahead = functools.partial(ask_ahead, fn)  # asked for now, shown later (`ask_ahead`)
    return call


RUN = "attnlab.measure.runs:run"  # by name: the worker looks the function up when it serves it (a test may replace it)


def run(shape: AttentionShape, names: tuple[str, ...], accuracy: bool = True, timed: bool = False,
        program: bool = False, backward: bool = False, budget_s: float | None = None,
        tuned: bool | None = None, ahead: bool = False) -> list[runs.Result] | None:
    """runs.run on the device worker, kept: every learner who asks for the same thing shares one result.
    `budget_s`: a shorter timing (seconds per implementation), for timings a page takes without being asked;
    `tuned`: True, a described program compiled with autotuning, as a timed one is (a memory chart's scratch);
    False, a timing of the program compiled without it (runs.run says when);
    `ahead`: only ask now (`ask_ahead`), returning None: the same call without it shows the answer."""
    r = run_request(shape, names, accuracy, timed, program, backward, budget_s, tuned)
    return (ask_ahead if ahead else on_device)(r.fn, *r.args, **dict(r.kwargs))


def run_request(shape: AttentionShape, names, accuracy: bool = True, timed: bool = False, program: bool = False,
                backward: bool = False, budget_s: float | None = None, tuned: bool | None = None) -> Request:
    """The request `run` sends (pages/opening.py sends the same ones ahead of a class)."""
    kw = {} if budget_s is None else {"budget_s": budget_s}
    if tuned is not None:
        kw["tuned"] = tuned
    return Request.of(RUN, shape, tuple(names), accuracy=accuracy, timed=timed, program=program, backward=backward, **kw)


def frame(shape: AttentionShape, names, **parts) -> pd.DataFrame:
    """`run` as a table in the run layer's vocabulary (runs.COLUMNS)."""
    return runs.to_frame(run(shape, tuple(names), **parts))


def frames(shapes: list[AttentionShape], names, **parts) -> pd.DataFrame:
    """`frame` at each shape, every one asked at once (`ask_ahead`) before the first is waited for: compiled side by
    side on the device worker, not one wait (and one spinner's count of seconds) after another."""
    for s in shapes:
        run(s, tuple(names), **parts, ahead=True)
    return pd.concat([frame(s, names, **parts) for s in shapes])


def unmet(shape: AttentionShape, names: tuple[str, ...] | None = None, ahead: bool = False) -> dict[str, str | None]:
    """For each backend of `names` (default: every one), None when it can run `shape` on the device worker,
    else why not (only the backends asked about are traced there). `ahead`: only ask now (`ask_ahead`)."""
    return (ask_ahead if ahead else on_device)(backends.unmet, shape, tuple(names) if names else None)


def runnable(shape: AttentionShape, names=None) -> list[str]:
    names = tuple(names or REGISTRY)
    why = unmet(shape, None if names == tuple(REGISTRY) else names)
    return [n for n in names if why[n] is None]


def literal(text: str) -> str:
    """Text a learner typed (or a link carried), shown as inline code: never Markdown, never a link."""
    return "`" + text.replace("`", "'").replace("\n", " ") + "`"


def current_shape() -> AttentionShape | None:
    """The shape app.py validated for this run (None when invalid: the page computes nothing)."""
    return st.session_state.get("shape")


def require_shape() -> AttentionShape:
    shape = current_shape()
    if shape is None:
        st.warning("This page computes nothing until the shape is valid: the messages above say what to change.")
        st.stop()
    return shape


# --------------------------------------------------------------------------------------------
# small display helpers
# --------------------------------------------------------------------------------------------
def requirements_table(shape: AttentionShape, info: device.DeviceInfo | None = None, names=None) -> pd.DataFrame:
    """Every declared requirement of `names` (default: all backends) at `shape` on the device worker; a long
    requirement repeated by another implementation says "as for <the first>" (tokamax's install hint once, not thrice)."""
    df = pd.DataFrame(on_device(backends.requirement_rows, shape, tuple(names) if names else None))
    first: dict[tuple, str] = {}
    for i, row in df.iterrows():
        said = (row["requirement"], row["needed"], row["here"])
        if len(row["needed"]) + len(row["here"]) > 80 and first.setdefault(said, row["implementation"]) != row["implementation"]:
            df.loc[i, ["needed", "here"]] = [f"as for {first[said]}", ""]
    return df


def support_table(shape: AttentionShape, merged: bool = False) -> pd.DataFrame:
    """Each implementation, whether it runs this shape here and why not; `merged`: implementations refused for the
    same reason share one row (four tokamax kernels missing one package are one sentence, not four)."""
    df = pd.DataFrame([{"implementation": n, "label": REGISTRY[n].label, "runs here": "no" if why else "yes",
                        "why not": why or ""} for n, why in unmet(shape).items()])
    if not merged or df.empty:
        return df
    return (df.groupby(["runs here", "why not"], sort=False, as_index=False)
            .agg({"implementation": ", ".join, "label": "; ".join})[list(df.columns)])
