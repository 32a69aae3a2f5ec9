"""What a page knows of the device workers: the first one's figures (the device, its memory budget, its line),
read at most every 30 s, and whether this server serves a hosted class."""

from __future__ import annotations

import streamlit as st

from attnlab import device, service
from attnlab.settings import settings

# What a page says when no device worker answers. In a hosted class the GPUs are at zero outside class hours
# (the nightly scale-down) until the instructor starts them, and a new GPU node takes minutes: not seconds.
NO_WORKER = {
    True: "No GPU worker answers right now. Outside class hours the GPUs are off until the instructor starts "
          "them; a GPU machine then takes a few minutes to start.",
    False: "No device worker answers right now (it is starting or restarting). Try again in a few seconds.",
}


NONE_KEY = "workers_none_this_run"  # a look in this session's run found no worker (app.py clears it as a run starts)


@st.cache_data(ttl=30, show_spinner=False)
def worker_info():
    """The first device worker's figures (device, budget, queue), read at most every 30 s. When a look found none (it
    waits up to 5 s), the run's later looks say so at once: a page asks two or three times before its first result
    (the badge, the shape's budget, the device), and each waited (in Chromium page 4 said so 15 s after a click)."""
    if st.session_state.get(NONE_KEY):
        raise service.WorkerLost(NO_WORKER[hosted()])
    found = service.workers()
    if not found:
        st.session_state[NONE_KEY] = True
        raise service.WorkerLost(NO_WORKER[hosted()])
    return found[0]


def look_again() -> None:
    """This session's next look asks the workers (each run starts so: a run after a failed look, "Try again" too)."""
    st.session_state.pop(NONE_KEY, None)


def in_class() -> bool:
    """This app serves a hosted class: its device workers are Ray actors, each GPU shared by many learners."""
    return settings().device == "ray"


def hosted() -> bool:
    """The workers are on a Ray cluster this app joins (GKE's: its GPUs scale to zero outside class hours), not on a
    Ray that this process starts for itself (ATTNLAB_RAY_ADDRESS=local, one machine: its worker is seconds away)."""
    return in_class() and settings().ray_address != "local"


def device_info() -> device.DeviceInfo:
    """What the device worker computes on (its memory read at most 30 s ago)."""
    return worker_info().device
