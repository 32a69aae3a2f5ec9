"""What a page says while it waits for the device worker: what runs, for whom, and where the device's line stood.

Every device request of a page goes through `common.on_device`, which shows `spinner(request)`: Streamlit's spinner
appears only after half a second (an answer already kept shows nothing), then names the work, counts the seconds
and says how many runs were waiting for the device when this server last asked (at most 30 s ago).
"""

from __future__ import annotations

from contextlib import contextmanager

import streamlit as st

from attnlab.service.request import Request
from attnlab.shapes import AttentionShape
from pages import workers

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
    """One phrase for what the request makes the device worker do."""
    if request.fn != "attnlab.measure.runs:run":
        return WORK.get(request.fn) or f"running {request.fn.split(':')[-1].replace('_', ' ')}"
    kw = dict(request.kwargs)
    shape = next((a for a in request.args if isinstance(a, AttentionShape)), kw.get("shape"))
    names = next((a for a in request.args if isinstance(a, (tuple, list))), kw.get("names")) or ()
    what = ("timing" if kw.get("timed") else "running and checking against float64") + (
        f" {len(names)} implementation{'s' * (len(names) != 1)}" if names else "")
    if kw.get("backward"):
        what += " (forward and backward)"
    return what + (f" at {shape.describe()}" if shape else "")


def line_now() -> str:
    """Where the device's line stood when this server last asked its worker (cached 30 s), or ''."""
    try:
        info = workers.worker_info()
    except Exception:  # noqa: BLE001 - no worker yet: the request itself will say so
        return ""
    ahead = info.running + info.waiting
    if not ahead:
        return ""
    return f" The device had {info.running} run going and {info.waiting} waiting a moment ago; yours is in that line."


@contextmanager
def spinner(request: Request):
    with st.spinner(f"The device worker is {describe(request)} …{line_now()}", show_time=True):
        yield


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
