"""The device service (attnlab/service/): requests, the worker, and the process boundary around it.

The worker in this process (what the CLI and AppTests use), in a child process (the app's default), and
as Ray actors on a local cluster with fake GPUs (two and four workers on a CPU): every one serves the
same requests; a native abort kills only the worker, fails the request in flight with a sentence, and
the next request is served by a worker started again.
"""

import os
import signal
import threading
import time

import numpy as np
import pytest

from attnlab import settings
from attnlab.measure import runs
from attnlab.service import entries
from attnlab.service.child import ChildWorker, signal_words
from attnlab.service.local import InProcess
from attnlab.service.request import Reply, Request, WorkerLost
from attnlab.service.worker import DeviceWorker
from attnlab.shapes import AttentionShape

TINY = AttentionShape(batch=1, q_len=16, kv_len=16, heads=2, kv_heads=2, head_dim=8)
CPU = {"JAX_PLATFORMS": "cpu", "ATTNLAB_FAULT_INJECTION": "1", "ATTNLAB_WARM": "0"}


# -- requests ---------------------------------------------------------------------------------------
def test_a_request_is_named_by_its_entry_and_every_argument():
    a = Request.of(runs.run, TINY, ("naive",), timed=True)
    assert a.fn == "attnlab.measure.runs:run" and a.timed
    assert a.key == Request.of(runs.run, TINY, ("naive",), timed=True).key
    assert a.key != Request.of(runs.run, TINY, ("naive",), timed=False).key
    assert a.key != Request.of(runs.run, TINY.replace(causal=True), ("naive",), timed=True).key
    # an array's repr hides its middle: its bytes are in the key
    x, y = np.zeros(4000), np.zeros(4000)
    y[2000] = 1
    assert Request.of(runs.run, x).key != Request.of(runs.run, y).key


def test_every_request_at_one_shape_is_routed_alike():
    assert Request.of(runs.run, TINY, ("naive",)).route == Request.of(runs.run, TINY, ("sdpa_xla",), timed=True).route
    assert Request.of(runs.run, TINY).route != Request.of(runs.run, TINY.replace(q_len=32, kv_len=32)).route


def test_a_function_that_is_not_an_entry_point_is_refused():
    reply = DeviceWorker().call(Request("os:system", ("true",)))
    with pytest.raises(KeyError, match="not an entry point"):
        reply.unwrap()


# -- the worker ------------------------------------------------------------------------------------
def test_identical_requests_in_flight_share_one_run_and_the_result_is_kept(monkeypatch):
    calls, gate = [], threading.Event()

    def slow_run(shape, names, **kw):
        calls.append(shape)
        gate.wait(10)
        return [runs.Result(shape, n, runs.OK) for n in names]

    worker, request = DeviceWorker(), Request.of(runs.run, TINY, ("naive",))  # named before the patch
    monkeypatch.setattr(runs, "run", slow_run)  # the worker looks the name up when it serves
    replies = []
    threads = [threading.Thread(target=lambda: replies.append(worker.call(request))) for _ in range(4)]
    [t.start() for t in threads]
    time.sleep(0.2)
    gate.set()
    [t.join(10) for t in threads]
    assert len(calls) == 1 and len(replies) == 4 and all(r.value[0].ok for r in replies)
    again = worker.call(request)
    assert again.cached and len(calls) == 1 and worker.kept_hits == 1


def test_a_busy_answer_is_returned_but_not_kept(monkeypatch):
    calls = []
    worker, request = DeviceWorker(), Request.of(runs.run, TINY, ("naive",))
    monkeypatch.setattr(runs, "run", lambda shape, names, **kw: calls.append(1) or [
        runs.Result(shape, n, runs.BUSY, "The GPU is busy") for n in names])
    assert not worker.call(request).kept
    assert not worker.call(request).cached and len(calls) == 2


def test_an_error_travels_back_as_the_exception_it_was():
    from attnlab.admission import OverBudget

    reply = Reply(error=OverBudget("needs about 9 GiB"), kept=False)
    with pytest.raises(OverBudget, match="9 GiB"):
        reply.unwrap()


def test_the_worker_in_this_process_runs_the_real_run_layer():
    client = InProcess()
    reply = client.call(Request.of(runs.run, TINY, ("naive", "sdpa_xla")))
    assert [r.status for r in reply.value] == ["ok", "ok"] and reply.worker == "device-0"
    info = client.infos()[0]
    assert info.pid == os.getpid() and info.device.backend == "cpu" and info.served == 1


# -- the child process ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def child():
    c = ChildWorker(env=CPU, threads=4)
    assert c.wait_ready(120)
    yield c
    c.close()


def test_a_child_worker_serves_requests_from_many_threads(child):
    results = []
    shapes = [TINY.replace(q_len=t, kv_len=t) for t in (8, 12, 16, 20)]
    threads = [threading.Thread(target=lambda s=s: results.append(child.call(Request.of(runs.run, s, ("naive",)))))
               for s in shapes]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    assert sorted(r.value[0].shape.q_len for r in results) == [8, 12, 16, 20]
    info = child.infos()[0]
    assert info.pid == child.proc.pid != os.getpid() and info.device.backend == "cpu"


def test_a_native_abort_costs_one_request_and_the_next_is_served_by_a_new_worker(child):
    from attnlab.service import faults

    before = child.proc.pid
    with pytest.raises(WorkerLost, match=r"was killed by signal 6 \(SIGABRT\).*press the button again"):
        child.call(Request.of(faults.abort))
    reply = child.call(Request.of(runs.run, TINY, ("naive",)))
    assert reply.value[0].ok and child.proc.pid != before and child.restarts >= 1


def test_every_request_in_flight_when_the_worker_is_killed_fails_with_a_sentence(child):
    from attnlab.service import faults

    child.call(Request.of(runs.run, TINY, ("naive",)))  # up and answering
    failures = []

    def held(i):
        try:
            child.call(Request.of(faults.sleep, 30 + i))
        except WorkerLost as e:
            failures.append(str(e))

    threads = [threading.Thread(target=held, args=(i,)) for i in range(3)]
    [t.start() for t in threads]
    time.sleep(1.0)
    os.kill(child.proc.pid, signal.SIGKILL)
    [t.join(30) for t in threads]
    assert len(failures) == 3 and all("SIGKILL" in f for f in failures)
    t0 = time.perf_counter()
    assert child.call(Request.of(runs.run, TINY, ("naive",))).value[0].ok
    assert time.perf_counter() - t0 < 60


def test_a_worker_that_cannot_start_is_given_up_on_with_a_sentence():
    c = ChildWorker(env={**CPU, "JAX_PLATFORMS": "no-such-platform"}, threads=1)
    try:
        deadline = time.monotonic() + 120
        while not c.gave_up and time.monotonic() < deadline:
            time.sleep(0.2)
        with pytest.raises(WorkerLost, match="cannot run here"):
            c.call(Request.of(runs.run, TINY, ("naive",)))
    finally:
        c.close()


def test_signals_are_named():
    assert signal_words(-11) == "was killed by signal 11 (SIGSEGV)" and signal_words(1) == "exited with code 1"


# -- Ray, with fake GPUs on this CPU ----------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from attnlab.service import ray_workers

    environ = dict(os.environ)
    ray_workers.RayWorkers("local", workers=1, fake_gpus=4, worker_env=CPU)  # starts the cluster
    yield ray
    for name in ray.util.list_named_actors(all_namespaces=True):
        if isinstance(name, dict) and name.get("name", "").startswith(ray_workers.PREFIX):
            ray.kill(ray.get_actor(name["name"], namespace=name["namespace"]))
    ray.shutdown()
    # ray.init sets RAY_AUTH_MODE=token in this process's environment, without the token: a later test's
    # `ray start` (scripts/capacity.py --device ray, run as a child) inherited it and refused to start
    os.environ.clear()
    os.environ.update(environ)


@pytest.mark.parametrize("n", [2, 4])
def test_ray_workers_each_own_a_gpu_and_every_shape_meets_one_of_them(ray_cluster, n):
    from attnlab.service.ray_workers import RayWorkers

    client = RayWorkers("local", workers=n, worker_env=CPU)
    assert client.wait_ready(180)
    infos = client.infos()
    assert len({i.pid for i in infos}) == n and {i.name for i in infos} == set(client.names)
    shapes = [TINY.replace(q_len=t, kv_len=t) for t in range(8, 8 + 4 * 6, 4)]
    where = {}
    for s in shapes:
        for names in (("naive",), ("sdpa_xla",)):
            reply = client.call(Request.of(runs.run, s, names))
            assert reply.value[0].ok
            where.setdefault(s, set()).add(reply.worker)
    assert all(len(w) == 1 for w in where.values())  # one shape, one worker: its programs compiled once
    assert len(set().union(*where.values())) > 1  # and the shapes are spread over the workers


def test_a_ray_worker_that_aborts_is_restarted_and_serves_the_next_request(ray_cluster):
    from attnlab.service import faults
    from attnlab.service.ray_workers import RayWorkers

    client = RayWorkers("local", workers=2, worker_env=CPU)
    assert client.wait_ready(180)
    doomed = Request.of(faults.abort)
    victim = client._choose(doomed)
    before = {i.name: i.pid for i in client.infos()}
    with pytest.raises(WorkerLost, match="Ray is starting it again"):
        client.call(doomed)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 60:
        try:
            reply = client.call(Request.of(runs.run, TINY, ("naive",)))
            break
        except WorkerLost:
            time.sleep(0.5)
    assert reply.value[0].ok
    after = {i.name: i.pid for i in client.infos()}
    assert after[victim] != before[victim] and len(after) == 2


def test_a_timing_goes_to_an_idle_worker_when_its_owner_is_busy(ray_cluster):
    from attnlab.service import faults
    from attnlab.service.ray_workers import RayWorkers

    client = RayWorkers("local", workers=2, worker_env=CPU)
    assert client.wait_ready(180)
    timed = Request.of(runs.run, TINY, ("naive",), timed=True, accuracy=False)
    owner = client._choose(timed)
    # keep the owner busy: a request routed to it that holds its device... here, one that sleeps in flight
    busy = next(r for r in (Request.of(faults.sleep, 3 + i / 10) for i in range(50)) if client._choose(r) == owner)
    t = threading.Thread(target=lambda: client.call(busy))
    t.start()
    time.sleep(0.5)
    assert client._choose(timed) != owner
    t.join(30)
    assert client._choose(timed) == owner


def test_settings_choose_the_client():
    from attnlab import service

    with settings.override(device="inprocess"):
        service.reset()
        assert isinstance(service.client(), InProcess)
    service.reset()
    assert entries.name_of(runs.run) in entries.names()
