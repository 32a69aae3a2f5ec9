"""What a page knows of the device workers: the first one's figures (the device, its memory budget, its line),
read at most every 30 s, and whether this server serves a hosted class."""

from __future__ import annotations

import time

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


NONE_HOLD_S = 3.0  # after no worker answered: this process's pages say so at once for this long
_NONE_UNTIL = [0.0]  # time.monotonic() until which they do


@st.cache_data(ttl=30, show_spinner=False)
def worker_info():
    """The first device worker's figures (device, budget, queue), read at most every 30 s. When none answered
    (a look waits up to 5 s) the next looks within NONE_HOLD_S say so without waiting again: a page asks two or
    three times before its first result (the badge, the shape's budget, the device), and waited for each."""
    if time.monotonic() < _NONE_UNTIL[0]:
        raise service.WorkerLost(NO_WORKER[hosted()])
    found = service.workers()
    if not found:
        _NONE_UNTIL[0] = time.monotonic() + NONE_HOLD_S
        raise service.WorkerLost(NO_WORKER[hosted()])
    return found[0]


def look_again() -> None:
    """The next look asks the workers, however recently none answered (the page's "Try again")."""
    _NONE_UNTIL[0] = 0.0


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
