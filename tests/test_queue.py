"""One GPU, many learners: memory admission, the exclusive timing slot, fairness and refusals."""

import threading
import time

import pytest

from attnlab.queue import Budget, DeviceBusy, DeviceQueue, OverBudget

MIB = 2**20


def _queue(device=100 * MIB, host=100 * MIB, shared=False, **kw):
    # admission alone: admitted runs go side by side, as runs of the server's processes do (inside one
    # process they then take turns with each other and with compiles: tests/test_gpu_turns.py)
    return DeviceQueue(Budget(device, host, shared), turns=None, **kw)


def _concurrency(q, n, **slot_kw):
    inside, peak, waits, lock = [0], [0], [], threading.Lock()

    def job():
        with q.slot(on_wait=waits.append, **slot_kw):
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.03)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=job) for _ in range(n)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return peak[0], waits


def test_timing_runs_have_the_device_to_themselves():
    peak, waits = _concurrency(_queue(), 6, exclusive=True)
    assert peak == 1 and waits


def test_runs_that_fit_the_budget_together_share_the_device():
    peak, _ = _concurrency(_queue(), 6, device_bytes=10 * MIB)
    assert peak > 1


def test_the_sum_of_admitted_runs_stays_under_the_budget():
    q = _queue(device=100 * MIB)
    peak, waits = _concurrency(q, 6, device_bytes=40 * MIB)
    assert peak <= 2 and waits
    assert q.stats.peak_device_bytes <= 100 * MIB


def test_on_the_cpu_backend_device_bytes_count_against_host_memory():
    q = _queue(device=100 * MIB, host=50 * MIB, shared=True)
    assert "memory" in q.check(60 * MIB, 0)
    with pytest.raises(OverBudget):
        with q.slot(device_bytes=30 * MIB, host_bytes=30 * MIB):
            pass


def test_a_run_bigger_than_the_whole_budget_is_refused_at_once_with_a_sentence():
    q = _queue(device=10 * MIB)
    with pytest.raises(OverBudget, match="GPU memory, over this lab's budget of 10.00 MiB"):
        with q.slot(device_bytes=11 * MIB):
            pass


def test_reentrant_on_one_thread_and_bounded_waiting():
    q = _queue(max_waiting=0)
    with q.slot(exclusive=True):
        with q.slot(exclusive=True):  # a sweep calling a timing on the same thread
            pass
        errors = []

        def other():
            try:
                with q.slot(timeout_s=0.1):
                    errors.append(None)
            except DeviceBusy as e:
                errors.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert isinstance(errors[0], DeviceBusy) and "already waiting" in str(errors[0])


def test_a_wait_that_times_out_says_so():
    q = _queue()
    out = []
    with q.slot(exclusive=True):
        t = threading.Thread(target=lambda: out.append(pytest.raises(DeviceBusy, _enter, q)))
        t.start()
        t.join()
    assert "without getting it" in str(out[0].value)
    assert q.stats.waited == 1


def _enter(q):
    with q.slot(timeout_s=0.05):
        pass


def test_budget_from_the_environment(monkeypatch):
    monkeypatch.setenv("ATTNLAB_MEMORY_LIMIT_GIB", "0.5")
    b = Budget.here()
    assert b.host_bytes == 2**29


def test_the_budget_is_split_between_the_server_processes(monkeypatch):
    monkeypatch.setenv("ATTNLAB_MEMORY_LIMIT_GIB", "1")
    monkeypatch.setenv("ATTNLAB_WORKERS", "4")
    b = Budget.here()
    assert b.host_bytes == 2**28 and b.device_bytes == 2**28


# a second server process (serve.py --workers): holds a slot of its own queue on the same lock file
_OTHER = """
import sys, time
from attnlab.queue import Budget, DeviceQueue
q = DeviceQueue(Budget(2**30, 2**30, False))
with q.slot(exclusive=sys.argv[1] == "alone"):
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
    print(f"released {time.time():.6f}", flush=True)
"""


def _other_process(tmp_path, how: str, hold_s: float):
    import os
    import subprocess
    import sys

    env = dict(os.environ, ATTNLAB_DEVICE_LOCK=str(tmp_path / "device.lock"))
    p = subprocess.Popen([sys.executable, "-c", _OTHER, how, str(hold_s)], env=env, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "holding"
    return p


@pytest.mark.parametrize(("theirs", "mine"), [("alone", False), ("shared", True), ("alone", True)])
def test_across_server_processes_a_timing_run_has_the_device_alone(tmp_path, monkeypatch, theirs, mine):
    monkeypatch.setenv("ATTNLAB_DEVICE_LOCK", str(tmp_path / "device.lock"))
    q = _queue()
    other = _other_process(tmp_path, theirs, 0.5)
    with q.slot(exclusive=mine) as waited:
        entered = time.time()
    released = float(other.stdout.readline().split()[1])
    other.wait(10)
    assert entered >= released and waited > 0.2


def test_across_server_processes_compute_runs_share_the_device(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_DEVICE_LOCK", str(tmp_path / "device.lock"))
    q = _queue()
    other = _other_process(tmp_path, "shared", 1.0)
    with q.slot() as waited:
        pass
    assert waited < 0.5
    other.wait(10)


def test_across_server_processes_a_wait_too_long_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_DEVICE_LOCK", str(tmp_path / "device.lock"))
    q = _queue(timeout_s=0.3)
    other = _other_process(tmp_path, "alone", 2.0)
    with pytest.raises(DeviceBusy, match="Another server process"), q.slot(exclusive=True):
        pass
    assert q.running == 0  # the refused run gave its place back
    other.wait(10)


def test_a_timing_knows_how_many_runs_wait_for_the_device_in_every_process(tmp_path, monkeypatch):
    """What shortens a timing while others wait (runs._time) counts the other processes' waiters too."""
    import os
    import subprocess
    import sys

    monkeypatch.setenv("ATTNLAB_DEVICE_LOCK", str(tmp_path / "device.lock"))
    q = _queue()
    holder = _other_process(tmp_path, "alone", 1.5)
    env = dict(os.environ, ATTNLAB_DEVICE_LOCK=str(tmp_path / "device.lock"))
    waiter = subprocess.Popen([sys.executable, "-c", _OTHER, "alone", "0"], env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while q.waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert q.waiting == 1
    holder.wait(10)
    waiter.communicate(timeout=10)
    assert q.waiting == 0


def test_a_refusal_says_where_the_budget_comes_from(monkeypatch):
    # budgets differ between machines, starts and worker counts; a refusal that names only a figure read as
    # arbitrary (shipped rows said "over the cap of 52.43 GiB" and "52.05 GiB" in one table)
    monkeypatch.setenv("ATTNLAB_MEMORY_LIMIT_GIB", "1")
    monkeypatch.setenv("ATTNLAB_WORKERS", "4")
    why = DeviceQueue(Budget.here()).check(2 * 2**30, 2 * 2**30)
    assert "over this lab's budget of 256.00 MiB (ATTNLAB_MEMORY_LIMIT_GIB, split among 4 server processes)" in why
