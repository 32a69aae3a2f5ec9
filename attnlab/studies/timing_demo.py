"""Timing, shown rather than described: the harness's own code, a live demonstration of JAX's
asynchronous dispatch, and how to read what the harness reports.

JAX dispatches asynchronously: `f(q, k, v)` returns as soon as the call is queued on the device,
long before the result exists. A timer stopped there measures only the queueing (dispatch); the
codelab's `benchmark_attention` therefore waits with `block_until_ready()` before it reads the
clock (wall time). Dispatching many calls and waiting once lets Python queue the next call while
the device runs the previous one (throughput time): on a GPU that hides dispatch; on a CPU the
device *is* the cores Python runs on, so queued calls compete with each other instead.
"""

from __future__ import annotations

import inspect
import statistics
import textwrap
import time

import jax
import pandas as pd

from attnlab.admission import DEVICE
from attnlab.backends import get
from attnlab.measure import compiled, runs, timing
from attnlab.shapes import AttentionShape

# The measuring part of timing.time_compiled, between these lines (read from the source, so never stale).
EXCERPTS = (("with DEVICE.use() as waited:", "if device_time:"),
            ("q = statistics.quantiles", "device_ms=device_ms,"))


def harness_source() -> str:
    """The code `attnlab.measure.timing.time_compiled` runs to measure wall and throughput time, verbatim."""
    src = inspect.getsource(timing.time_compiled)
    parts = []
    for start, end in EXCERPTS:
        i = src.index(start)
        i = src.rindex("\n", 0, i) + 1
        parts.append(textwrap.dedent(src[i:src.index(end, i)]).rstrip())
    return "\n    ...\n".join(parts)


# --------------------------------------------------------------------------------------------
# the demonstration: one jitted call timed with and without the wait, and many calls, one wait
# --------------------------------------------------------------------------------------------
def dispatch_demo(shape: AttentionShape, name: str = "sdpa_xla", calls: int = 20, repeats: int = 10) -> pd.DataFrame:
    """Time one compiled call of `name` at `shape` four ways, holding the device alone; ms per call.

    Raises OverBudget or DeviceBusy when the device cannot be had for it.
    """
    exe, _, _ = compiled.compile_backend(name, shape)
    held = get(name).device_bytes(shape) + shape.input_bytes() * (1 + 4 // shape.itemsize) \
        + calls * shape.output_bytes()
    no_wait, waited, rounds, queued = [], [], [], []
    with DEVICE.use(held):
        q, k, v = runs.make_inputs(shape)
        for _ in range(3):
            jax.block_until_ready(exe(q, k, v))  # warm-up
        for _ in range(repeats):
            t0 = time.perf_counter()
            y = exe(q, k, v)
            no_wait.append((time.perf_counter() - t0) * 1e3)
            jax.block_until_ready(y)  # outside the timer: the next sample starts on an idle device
            t0 = time.perf_counter()
            jax.block_until_ready(exe(q, k, v))
            waited.append((time.perf_counter() - t0) * 1e3)
        for _ in range(3):
            t0 = time.perf_counter()
            outs = [exe(q, k, v) for _ in range(calls)]
            queued.append((time.perf_counter() - t0) * 1e3 / calls)
            jax.block_until_ready(outs)
            rounds.append((time.perf_counter() - t0) * 1e3 / calls)
            del outs
    med = statistics.median
    return pd.DataFrame([
        {"measured": "one call, no wait", "code": "t0 = perf_counter(); y = f(q, k, v); t = perf_counter() - t0",
         "ms": med(no_wait), "what it is": "dispatch only: the call was queued, not computed"},
        {"measured": "one call + block_until_ready (wall)",
         "code": "t0 = perf_counter(); f(q, k, v).block_until_ready(); t = perf_counter() - t0",
         "ms": med(waited), "what it is": "the codelab's method: dispatch, compute, wait"},
        {"measured": f"{calls} calls queued, clock read before the wait",
         "code": f"ys = [f(q, k, v) for _ in range({calls})]  # t / {calls}",
         "ms": med(queued), "what it is": "dispatching alone, per call (the device may already be working)"},
        {"measured": f"{calls} calls queued, one wait (throughput)",
         "code": f"jax.block_until_ready([f(q, k, v) for _ in range({calls})])  # t / {calls}",
         "ms": med(rounds), "what it is": "per call, calls queued back to back (where dispatch can overlap the "
                                           "device's work on earlier calls)"},
    ]).assign(implementation=name, shape=shape.describe())


SAME = 0.1  # throughput and wall closer than this fraction read as the same (CPU timings spread 10-25 %)


def dispatch_reading(df: pd.DataFrame, on_gpu: bool) -> str:
    """One paragraph reading `dispatch_demo`'s table."""
    ms = dict(zip(df["measured"], df["ms"], strict=True))
    no_wait, wall = ms["one call, no wait"], ms["one call + block_until_ready (wall)"]
    throughput = df["ms"].iloc[-1]
    calls = df["measured"].iloc[-1].split()[0]
    text = (f"Without `block_until_ready` the clock stopped after {no_wait:.3f} ms, when the call had only been "
            f"queued; waiting for the result took {wall:.3f} ms"
            + (f", {wall / no_wait:,.0f}× as long. " if no_wait > 0 and wall > no_wait else ". "))
    if throughput < (1 - SAME) * wall:
        text += (f"Queuing {calls} calls and waiting once cost {throughput:.3f} ms per call, less than one waited "
                 "call: Python dispatched the next call while the device worked on the last, as in a training loop.")
    else:  # within a tenth of each other is within these timings' noise: no overlap is claimed
        than = "about as much as" if throughput < (1 + SAME) * wall else f"{throughput / wall:.1f}× as much as"
        text += (f"Queuing {calls} calls and waiting once cost {throughput:.3f} ms per call, {than} one waited "
                 "call: " + ("dispatch was already hidden, the device is the bottleneck." if on_gpu else
                             "on a CPU the queued calls run on the same cores as Python and each other, so "
                             "nothing overlaps; on a GPU, dispatch overlaps the device's work."))
    return text


# --------------------------------------------------------------------------------------------
# reading the harness's numbers: cached compiles, noise, throughput above wall, lines on top of each other
# --------------------------------------------------------------------------------------------
CACHED_MS = 100.0  # a "compile" of a program seen before that took less than this was a cache lookup


def compile_text(compile_ms, compiled_before) -> str | None:
    """What the compile cell means: a compile, a cache lookup, or a recompile of a program seen before."""
    if compile_ms is None or pd.isna(compile_ms):
        return None
    if not isinstance(compiled_before, str) or not compiled_before:
        return f"{compile_ms:,.1f} ms"
    who = compiled_before.split(" at ")[0]  # the backend's name; the shape is this row's own
    if compile_ms < CACHED_MS:  # short: the table has eight columns; the notes under it name the pair
        return f"cached, {compile_ms:,.1f} ms ({who}'s)"
    return f"{compile_ms:,.1f} ms, again ({who}'s)"


def annotate(df: pd.DataFrame) -> pd.DataFrame:
    """Add `compile` (a sentence-sized cell) and `wall_spread_pct` (IQR as % of the median wall time)."""
    return df.assign(compile=[compile_text(m, b) for m, b in zip(df["compile_ms"], df["compiled_before"], strict=True)],
                     wall_spread_pct=100 * df["wall_ms_iqr"] / df["wall_ms"])


def spread_note(df: pd.DataFrame, on_gpu: bool) -> str | None:
    """How far the wall times in `df` (timed rows that ran) spread, as a share of their medians, in a sentence: how
    far to trust a difference between them. None without a timing."""
    ok = df[df["status"] == runs.OK].dropna(subset=["wall_ms", "wall_ms_iqr"]) if "wall_ms_iqr" in df else df.iloc[:0]
    if ok.empty:
        return None
    spread = ok["wall_ms_iqr"] / ok["wall_ms"] * 100
    low, high = round(spread.min()), round(spread.max())
    return (f"Wall spread (the middle half of the samples, IQR) is {low}{f'–{high}' if high != low else ''} % of the "
            "median here." + ("" if on_gpu else " CPU timings are noisy: the cores are shared with the operating "
                              "system, the server and other learners; a difference smaller than the spread is noise."))


def notes(df: pd.DataFrame, on_gpu: bool) -> list[str]:
    """Sentences a learner needs to read the timings in `df` (rows that ran, with `annotate`'s columns)."""
    ok = df[df["status"] == runs.OK].dropna(subset=["wall_ms"])
    if ok.empty:
        return []
    out = [note] if (note := spread_note(df, on_gpu)) else []
    rows = ok.set_index("implementation")
    for name, before in ok.set_index("implementation")["compiled_before"].dropna().items():
        first = str(before).split(" at ")[0].removesuffix(" backward")
        if first not in rows.index or first == name:
            continue
        a, b = rows.loc[first], rows.loc[name]
        diff, noise = abs(a["wall_ms"] - b["wall_ms"]), max(a["wall_ms_iqr"], b["wall_ms_iqr"])
        same = f"{first} and {name} compile to the same program"
        out.append(f"{same}, yet their wall times differ by {diff:.3f} ms, more than their spread ({noise:.3f} ms): "
                   "the difference is measurement noise, not the implementations." if diff > noise else
                   f"{same}; their wall times agree within their spread ({noise:.3f} ms).")
    slower = ok[ok["throughput_ms"] > ok["wall_ms"]]["implementation"].tolist()
    if slower:
        out.append(f"Throughput time is above wall time for {', '.join(slower)}: " + (
            "queued calls competed for the device." if on_gpu else
            "on a CPU, many queued calls compete for the same cores (and for the thread that dispatches them), so "
            "queuing ahead gains nothing and costs cache space. On a GPU the host queues the next call while the "
            "device runs this one, so throughput falls below wall once a call's kernels outlast its launch; for calls "
            "as small as the codelab's the two are about equal (the shipped H200 rows)."))
    return out


def lines_of(df: pd.DataFrame, x: str, y: str, by: str = "implementation") -> dict:
    """{line: {x: y}}, the first y at each x, rows without x, y or line left out (what a pivot table with
    aggfunc='first' holds, built without one: pages call this on every visit, and pandas' pivot costs
    tens of milliseconds)."""
    lines: dict = {}
    for xv, name, yv in zip(df[x].tolist(), df[by].tolist(), df[y].tolist(), strict=True):
        if not any(pd.isna(v) for v in (xv, name, yv)):
            lines.setdefault(name, {}).setdefault(xv, yv)
    return lines


def agreeing(df: pd.DataFrame, x: str, y: str, within: float = 0.01, by: str = "implementation") -> dict:
    """{(a, b): (the x where their y agree within `within`, relative; every x they share)} for each pair of
    lines (values of `by`, in sorted order)."""
    lines = lines_of(df, x, y, by)
    names, out = sorted(lines), {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = sorted(lines[a].keys() & lines[b].keys())
            out[(a, b)] = ([v for v in shared if abs(lines[a][v] - lines[b][v])
                            <= within * max(abs(lines[a][v]), abs(lines[b][v]))], shared)
    return out


def overlapping(df: pd.DataFrame, x: str, y: str, within: float = 0.01, by: str = "implementation") -> list[tuple]:
    """Pairs of lines (values of `by`, in sorted order) whose `y` agree within `within` (relative) at
    every shared `x`."""
    return [pair for pair, (agree, shared) in agreeing(df, x, y, within, by).items() if shared and agree == shared]


def meeting(df: pd.DataFrame, x: str, y: str, within: float = 0.01, by: str = "implementation") -> list[tuple]:
    """(a, b, [x, ...]): pairs of lines that agree within `within` at some shared `x` but not at all of them
    (where they meet, one marker hides the other)."""
    return [(a, b, agree) for (a, b), (agree, shared) in agreeing(df, x, y, within, by).items()
            if agree and agree != shared]
