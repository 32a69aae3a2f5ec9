"""What a page says while it waits for the device worker: what runs, for whom, and where it stands in the device's line.

Every device request of a page goes through `common.on_device`, which hands it to `wait`: the request runs in a
thread of its own while the page's thread shows Streamlit's spinner (after half a second: an answer already kept
shows nothing), naming the work and counting the seconds, and under it, every EVERY_S seconds, where this very
request stands in the device workers' lines (`place`, from `WorkerInfo.line`).
"""

from __future__ import annotations

import concurrent.futures
import threading
from contextlib import contextmanager

import streamlit as st
from streamlit.runtime.scriptrunner import add_script_run_ctx

from attnlab import service
from attnlab.service.request import Request
from attnlab.shapes import AttentionShape

# entry point -> what it does, as a learner reads it (the others: "running <function>")
WORK = {
    "attnlab.measure.runs:run": None,  # said from its arguments: `describe`
    "attnlab.yourturn.grade:check": "checking your answer against float64 at every case",
    "attnlab.yourturn.timed:time_solution": "timing your solution",
    "attnlab.studies.weights:first_vs_last": "computing the attention weights",
    "attnlab.studies.memory:compiled_memory": "compiling and reading the programs' memory",
    "attnlab.studies.fp8_study:fp8_attention_study": "measuring FP8 attention against bf16",
    "attnlab.studies.fp8_study:te_autocast_study": "measuring TransformerEngine's autocast",
    "attnlab.studies.fp8_study:te_block_study": "measuring TransformerEngine's FP8 block",
    "attnlab.studies.vendor:measure": "measuring at NVIDIA's shapes",
    "attnlab.studies.kvcache:output_checks": "running each variant and checking it against float64",
    "attnlab.studies.ring_live:compare": "running ring attention",
    "attnlab.studies.timing_demo:dispatch_demo": "timing one call four ways",
    "attnlab.studies.warm:warm_shape": "compiling this shape's programs",
    "attnlab.backends:unmet": "asking which implementations can run this shape here",
    "attnlab.backends:requirement_rows": "reading each implementation's requirements",
    "attnlab.backends:refusal": "reading why an implementation refuses",
    "attnlab.measure.timing:launch_note": "reading how this server launches kernels",
    "attnlab.measure.cost:too_slow_plan": "estimating how long these runs would hold the device",
    "attnlab.measure.cost:timing_seconds": "estimating how long a timing would hold the device",
    "attnlab.studies.memory:same_program": "comparing two compiled programs",
    "attnlab.studies.layout:placement": "reading where the arrays live",
    "attnlab.backends.tokamax:inner_loop_source": "reading tokamax's kernel source",
    "attnlab.studies.ring_live:unmet": "asking whether ring attention can run here",
    "attnlab.yourturn.progress:record": "recording your try",
    "attnlab.yourturn.progress:snapshot": "reading the class's progress",
}


def describe(request: Request) -> str:
    """One phrase for what the request makes the device worker do (a run: its parts, as `runs.run` reads them)."""
    if request.fn != "attnlab.measure.runs:run":
        return WORK.get(request.fn) or f"running {request.fn.split(':')[-1].replace('_', ' ')}"
    kw = dict(request.kwargs)
    shape = next((a for a in request.args if isinstance(a, AttentionShape)), kw.get("shape"))
    names = next((a for a in request.args if isinstance(a, (tuple, list))), kw.get("names")) or ()
    them = (names[0] if len(names) == 1 else f"{len(names)} implementations") if names else "the implementations"
    one = len(names) == 1
    if kw.get("timed"):
        what = f"timing {them}"
    elif kw.get("accuracy", True):
        what = f"running {them} and checking {'it' if one else 'each'} against float64"
    else:  # program only: compiled, nothing allocated or run
        what = f"compiling {them} (nothing is run)"
    if kw.get("backward"):
        what += " (forward and backward)"
    return what + (f" at {shape.describe()}" if shape else "")


# what the request asks, true whatever it waits for (a line, a compile, a restart: the caption under it says which)
SPINNER = "Your request to the device worker: "
SHOW_S = 0.5  # a request answered within this shows nothing (Streamlit's spinner waits as long)
EVERY_S = 2.0  # how often the line is looked at again while a request waits


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def place(key: str, infos) -> str:
    """Where the request `key` stands in the device workers' lines (`WorkerInfo`), as a sentence."""
    busy = [i for i in infos if i.running or i.waiting]
    going, n = "", sum(i.running for i in busy)
    w = sum(i.waiting for i in busy)
    if busy and n:
        going = f" The device has {n} run{'s' * (n != 1)} going and {w} waiting."
    elif busy:  # between two runs: none going ("0 runs going" read as a fault)
        going = f" {w} run{'s' * (w != 1)} wait{'s' * (w == 1)} to start on the device."
    # in page order (oldest_first) a request begun earlier can come in ahead of this one
    order = " Requests from pages opened before yours go first, so your place can still move back."
    for info in infos:
        holds = "the run on the device" if info.running else ""
        if key in info.line:
            ahead = info.line.index(key) - info.running  # runs waiting before it
            if ahead < 0:
                return "Yours holds the device now."
            before = [b for b in (holds, ahead and f"{ahead}{' more' if holds else ''} waiting") if b]
            return f"Yours is {ordinal(ahead + 1)} in the device's line" + (
                f", behind {' and '.join(before)}." if before else ", next to go.") + info.by_page * order
        if key in info.builds:  # a browser pass saw this for 30-44 s while run after run went first: said so
            return ("Yours waits to compile: tuned compiles run between runs, never during one (they would slow its "
                    "timing), so the runs queued before it go first." + going)
        if key in info.building:
            return "Yours is compiling its programs (between runs); then it takes its place in the device's line."
    waits = len({k for i in infos for k in i.builds})  # compiles ahead of it (a compile thread may be all it lacks)
    return ("Yours is not in the device's line yet: the worker traces and compiles it first" +
            (f", after {waits} request{'s' * (waits != 1)} waiting to compile" if waits else "") + "." + going)


@st.cache_data(ttl=EVERY_S, show_spinner=False)
def lines() -> list:
    """Every device worker's figures, read at most every EVERY_S seconds by this server (one read for all its tabs)."""
    return service.workers()


RESTARTING = ("The device worker is being started again (it stopped: a crash in native code, or its machine went "
              "away). Yours is sent to it as soon as it answers, usually within seconds.")


def restarting() -> bool:
    try:
        return service.client().restarting()
    except Exception:  # noqa: BLE001 - no client yet: nothing is being restarted
        return False


def place_now(key: str) -> str:
    try:
        if restarting():  # before lines(): the workers' figures wait for the restart too
            return RESTARTING
        return place(key, lines())
    except Exception:  # noqa: BLE001 - no worker answers: the request itself will say so
        return ""


LOOK_S = 0.5  # how long the caption waits for a look at the workers before it says what it knows without one


def in_thread(fn, *args, name: str = "attnlab-page-request") -> concurrent.futures.Future:
    """fn(*args) in a thread carrying this script run's context (its cache, its session): a future of its result."""
    out: concurrent.futures.Future = concurrent.futures.Future()

    def work():
        try:
            out.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - raised where the result is read
            out.set_exception(e)

    add_script_run_ctx(threading.Thread(target=work, name=name, daemon=True)).start()
    return out


def wait(request: Request, compute):
    """compute() (which sends `request`) in a thread carrying this script run's context (its cache, its session),
    while this thread shows what it waits for: the spinner naming the work and, under it, where the request stands in
    the device's line, looked at again every EVERY_S seconds. A rerun or a closed tab stops the page's waiting here
    (Streamlit stops a script as it writes); the request itself goes on, and the worker drops it if no tab wants it."""
    done = in_thread(compute)
    with st.spinner(f"{SPINNER}{describe(request)} …", show_time=True):
        # the caption's place, taken whether or not the wait is long: a page's later elements keep their places from
        # run to run (a place taken only when slow moved them by one, and an old result stayed where the new one
        # was not yet drawn: seen as a flaky tests/pages/test_p7_benchmarks.py under CI's load)
        where, look = st.empty(), None
        try:
            if not concurrent.futures.wait([done], SHOW_S).done:
                while not done.done():
                    # a look at the line in a thread of its own: one that meets a worker Ray is starting again waits
                    # for it (seconds), and the caption says so meanwhile instead of standing still
                    if look is None or look.done():
                        look = in_thread(place_now, request.key, name="attnlab-page-look")
                    concurrent.futures.wait([look, done], LOOK_S, return_when=concurrent.futures.FIRST_COMPLETED)
                    if look.done():
                        where.caption(look.result())
                    elif restarting():
                        where.caption(RESTARTING)
                    concurrent.futures.wait([done], EVERY_S)
        finally:
            where.empty()
        return done.result()


LONG_S = 20.0  # work the cost model puts over this is announced before its button
SAY_S = 5.0  # and over this, its estimate is said while it runs


def long_work_note(seconds: float) -> str:
    """A sentence before a button whose work holds the device about `seconds` (over LONG_S), else ''."""
    if seconds <= LONG_S:
        return ""
    return (f"⏳ This will hold the device for about {seconds:,.0f} s here (the lab's cost model: its FLOPs at the "
            "rate the naive attention reaches on this device; fused implementations are faster), and other learners' "
            "runs wait behind it. A smaller shape answers in seconds.")


@contextmanager
def fresh():
    """A place for a result (a verdict, a table) that is emptied as its work starts and filled when it ends.

    The browser keeps the last run's elements, faded, until each is replaced at its place, and a container drawn
    where one was keeps the old one's children until new ones replace them (Streamlit's frontend); a spinner is
    drawn over them. Without this, the previous verdict stays readable beside the spinner as if it answered the new
    question. An element (st.empty) replaces the old container whole; the new container then starts empty."""
    slot = st.empty()
    with slot.container():
        yield
