"""Inside one process, device work and program builds take turns (attnlab/gpu_turns.py).

On the H200 a server process aborted when a thread ran a program while two others compiled
(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED). These tests hold one side and check the other waits.
"""

import threading
import time

import jax
import pytest

from attnlab.gpu_turns import TURNS, Turns
from attnlab.measure import compiled
from attnlab.queue import DEVICE


def _started(fn):
    done = threading.Event()

    def body():
        fn()
        done.set()

    threading.Thread(target=body, daemon=True).start()
    return done


def test_a_compile_waits_while_the_process_runs_on_the_device():
    program = (lambda x: x * 7.0 - 1.0), [jax.ShapeDtypeStruct((13,), "float32")]
    with DEVICE.slot():
        done = _started(lambda: compiled.compile_timed(*program, "test"))
        assert not done.wait(0.5), "a compile ran while this process held the device"
    assert done.wait(60)


def test_device_work_waits_for_a_build_in_flight():
    building, release = threading.Event(), threading.Event()

    def build():
        with TURNS.building():
            building.set()
            release.wait(30)

    threading.Thread(target=build, daemon=True).start()
    assert building.wait(10)

    def use_device():
        with DEVICE.slot():
            pass

    done = _started(use_device)
    assert not done.wait(0.5), "device work started while a program was being built"
    release.set()
    assert done.wait(10)


def test_two_runs_in_one_process_use_the_device_one_after_the_other():
    inside, overlap = [], []

    def run():
        with DEVICE.slot():  # small runs, admitted together
            inside.append(1)
            overlap.append(len(inside))
            time.sleep(0.05)
            inside.pop()

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert overlap == [1] * 6


def test_the_device_holder_compiles_what_it_needs_without_waiting_for_itself():
    done = threading.Event()

    def hold_and_compile():
        with DEVICE.slot():
            compiled.compile_timed(lambda x: x + 11.0, [jax.ShapeDtypeStruct((17,), "float32")], "test")
        done.set()

    threading.Thread(target=hold_and_compile, daemon=True).start()
    assert done.wait(60)


def test_a_builder_that_asks_for_the_device_is_told_instead_of_waiting_forever():
    turns = Turns()
    with turns.building(), pytest.raises(RuntimeError, match="cannot wait for the device"):
        with turns.running():
            pass
