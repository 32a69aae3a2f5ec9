"""The device service (attnlab/service/): requests, the worker, and the process boundary around it.

The worker in this process (what the CLI and AppTests use), in a child process (the app's default), and
as Ray actors on a local cluster with fake GPUs (two and four workers on a CPU): every one serves the
same requests; a native abort kills only the worker, fails the request in flight with a sentence, and
the next request is served by a worker started again.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

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

ROOT = Path(__file__).resolve().parents[1]

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


def test_requests_that_abort_the_worker_again_and_again_never_make_the_supervisor_give_up(child):
    """QUICK_DEATHS deaths within seconds of each start, each while serving a request (a crash link's page asks
    twice), are the requests' doing: each is a sentence, and the worker is started again every time (CI at 6ac885d:
    the two crash links cost three deaths in 20 s and the child was given up on, as if it could not start)."""
    from attnlab.service import faults
    from attnlab.service.child import QUICK_DEATHS

    for _ in range(QUICK_DEATHS + 1):
        with pytest.raises(WorkerLost, match=r"was killed by signal 6 \(SIGABRT\)"):
            child.call(Request.of(faults.abort))
    assert not child.gave_up and child.call(Request.of(runs.run, TINY, ("naive",))).value[0].ok


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


def test_requests_sent_as_the_worker_is_killed_go_to_the_next_worker_not_lost(child, monkeypatch):
    """A killed process takes milliseconds to die, and its death is heard only after: requests sent meanwhile
    were never read by it, so they are served by the next worker. Before RECEIVED, 5-11 of 20 sent at the kill
    were told the worker died "while serving this request" (the H100's rehearsal of 2026-12-07: 3 pages)."""
    from attnlab.service import child as child_module

    monkeypatch.setattr(child_module, "QUICK_S", 0.0)  # these kills of an idle worker are not a worker that cannot start
    for round_ in range(2):
        child.call(Request.of(runs.run, TINY, ("naive",)))  # up and answering
        results: list = []
        shapes = [TINY.replace(q_len=24 + 4 * i + 40 * round_) for i in range(12)]
        threads = [threading.Thread(target=lambda s=s, out=results: out.append(_outcome(child, s))) for s in shapes]
        os.kill(child.proc.pid, signal.SIGKILL)
        [t.start() for t in threads]
        [t.join(120) for t in threads]
        assert sorted(results) == ["ok"] * 12, results


def _outcome(c: ChildWorker, shape: AttentionShape) -> str:
    try:
        return "ok" if c.call(Request.of(runs.run, shape, ("naive",))).value[0].ok else "not ok"
    except WorkerLost as e:
        return str(e)[:100]


def _spare_of(c: ChildWorker, timeout: float = 60.0) -> int:
    """The pid of `c`'s spare child, once started (after the worker answered)."""
    deadline = time.monotonic() + timeout
    while c._spare is None:
        assert time.monotonic() < deadline, "no spare started"
        time.sleep(0.1)
    return c._spare.proc.pid


def test_a_killed_worker_is_replaced_by_its_spare_and_a_new_spare_follows(child):
    """The spare (started once the worker answered) takes the device at the worker's death: the next request is
    served by that process, which was running before the death, and a new spare is started after it answers."""
    child.call(Request.of(runs.run, TINY, ("naive",)))
    spare, before = _spare_of(child), child.proc.pid
    os.kill(before, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while child.proc.pid == before:  # the death is heard by the reader of the dead worker's socket
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert child.call(Request.of(runs.run, TINY.replace(batch=2), ("naive",))).value[0].ok
    assert child.infos()[0].pid == child.proc.pid == spare and child.promotions >= 1
    assert _spare_of(child) not in (spare, before)


def test_with_spare_device_the_spare_meets_its_device_before_the_worker_dies_and_then_serves(tmp_path):
    """ATTNLAB_SPARE_DEVICE=1 through the child's own start: the spare logs its span (the steps it met, the device
    and the codelab's shapes among them) while the worker still serves, and takes over at the worker's death."""
    log = tmp_path / "spans.log"
    c = ChildWorker(env={**CPU, "ATTNLAB_SPARE_DEVICE": "1", "ATTNLAB_TIMING_LOG": str(log)}, threads=2)
    try:
        assert c.call(Request.of(runs.run, TINY, ("naive",))).value[0].ok
        spare, before = _spare_of(c), c.proc.pid
        deadline = time.monotonic() + 120
        while not (spans := [ln for ln in (log.read_text() if log.exists() else "").splitlines()
                             if ln.split()[3] == str(spare) and ln.split()[4] == "spare"]):
            assert time.monotonic() < deadline, "the spare logged no span"
            time.sleep(0.2)
        assert spans[0].split(None, 5)[5] == "device, codelab bfloat16, codelab float32, tokamax, te"
        os.kill(before, signal.SIGKILL)
        while c.proc.pid == before:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert c.call(Request.of(runs.run, TINY.replace(batch=3), ("naive",))).value[0].ok
        assert c.infos()[0].pid == spare
    finally:
        c.close()


def test_a_spare_imports_the_lab_and_opens_no_device():
    """What a spare does before it is needed (`warm.spare_start`, after the worker's imports) opens no JAX backend:
    on a GPU a backend would hold GPU memory beside the worker's. Checked in a fresh Python."""
    code = ("import attnlab.service.child_process, attnlab.service.worker\n"
            "from attnlab.studies import warm\n"
            "warm.spare_start()\n"
            "import sys\nfrom jax._src import xla_bridge\n"
            "assert 'pandas' in sys.modules and 'attnlab.measure.runs' in sys.modules\n"
            "print('backends', len(xla_bridge._backends))\n")
    assert _in_a_fresh_python(code).strip() == "backends 0"


def test_a_spare_asked_to_meet_its_device_opens_it_and_compiles_the_codelab_s_implementations_until_needed():
    """ATTNLAB_SPARE_DEVICE's steps (`warm.spare_device`): none once the word to take the device came (no backend
    opened); else JAX's device, the codelab's four implementations at each tiny shape, then the optional imports.
    Checked in a fresh Python."""
    code = ("import attnlab.service.child_process, attnlab.service.worker\n"
            "from attnlab.studies import warm\n"
            "from jax._src import xla_bridge\n"
            "print(warm.spare_device(needed=lambda: True), len(xla_bridge._backends))\n"
            "print(warm.spare_device(), len(xla_bridge._backends))\n")
    out = _in_a_fresh_python(code)
    assert out.split("\n")[:2] == ["[] 0", "['device', 'codelab bfloat16', 'codelab float32', 'tokamax', 'te'] 1"], out


def _in_a_fresh_python(code: str) -> str:
    """What `code` prints, run by a new Python on the CPU (it must exit 0)."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **CPU}, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_a_spare_that_dies_costs_nothing_and_without_spares_a_new_worker_is_started():
    """A spare killed before it was needed: the worker serves on, and at its own death a new child starts (as with
    ATTNLAB_SPARE_WORKER=0, whose worker never has one)."""
    for spare in (True, False):
        c = ChildWorker(env=CPU, threads=2, spare=spare)
        try:
            assert c.wait_ready(120) and c.call(Request.of(runs.run, TINY, ("naive",))).value[0].ok
            if spare:
                pid = _spare_of(c)
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 30
                while c._spare is not None:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
            else:
                time.sleep(2)
                assert c._spare is None
            assert c.call(Request.of(runs.run, TINY.replace(batch=3), ("naive",))).value[0].ok
            before = c.proc.pid
            os.kill(before, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while c.proc.pid == before:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert c.call(Request.of(runs.run, TINY.replace(batch=4), ("naive",))).value[0].ok
            assert c.promotions == 0 and c.restarts == 1
        finally:
            c.close()


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


# -- a Ray head that dies and starts again, under a UI process connected over ray:// -------------------
CLIENT = """
import json, sys, threading, time
from attnlab import service
from attnlab.service import faults

def call(i):
    t0 = time.monotonic()
    try:
        service.call(faults.sleep, i / 1000)
        return {"ok": True, "s": time.monotonic() - t0}
    except Exception as e:
        return {"ok": False, "type": type(e).__name__, "error": str(e), "s": time.monotonic() - t0}

i = 0
for line in sys.stdin:                      # "N": N calls at once, from N threads (a burst of pages)
    if line.strip() == "ready":             # "ready": the readiness answer (serve.py's /_attnlab/ready)
        print(json.dumps({"ready": service.ready()}), flush=True)
        continue
    out = [None] * int(line)
    threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, call(i + k))) for k in range(len(out))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    i += len(out)
    print(json.dumps({"calls": out, "reconnects": service.client().reconnects}), flush=True)
"""


def _free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    [s.close() for s in socks]
    return ports


class _Head:
    """`ray start --head --block` on fixed ports (the same after a restart, as a Service's name is): killed with
    SIGKILL, every process of it, as a node that fails; started again on the same ports."""

    def __init__(self, root: str):
        import sys
        from pathlib import Path

        self.gcs, self.client, self.agent = _free_ports(3)
        self.root = root
        ray = str(Path(sys.executable).with_name("ray"))
        self.cmd = [ray, "start", "--head", "--block", f"--port={self.gcs}", f"--ray-client-server-port={self.client}",
                    f"--dashboard-agent-listen-port={self.agent}", "--num-cpus=2", "--num-gpus=1",
                    "--include-dashboard=false", "--disable-usage-stats"]
        repo = str(Path(__file__).resolve().parents[1])
        # a clean environment: ray.init in this process leaves RAY_* behind (RAY_AUTH_MODE=token without its token)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        # and a HOME of its own: a ~/.ray/auth_token that anyone's Ray left there turns token auth on for every
        # later `ray start` (and a client without RAY_AUTH_MODE=token then timed out)
        self.env.update(CPU, PYTHONPATH=repo, ATTNLAB_WARM="0", HOME=root)
        self.proc = None

    def start(self, n: int) -> None:
        import subprocess

        self.log = open(os.path.join(self.root, f"head{n}.log"), "wb")
        self.proc = subprocess.Popen([*self.cmd, f"--temp-dir={self.root}/t{n}"], env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        import psutil

        try:
            procs = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(procs, timeout=20)


def test_a_ray_head_restart_costs_a_request_and_the_ui_process_reconnects_on_its_own(tmp_path):
    """The UI's client over ray://, its head killed and started again on the same ports: the call during the
    outage fails with WorkerLost (the sentence a page shows); the client reconnects in the background, with no
    request asking, within 60 s, once; and a burst of calls then succeeds in the same process, the worker created
    again by name. Readiness says so: ready, not ready while the head is away, ready again."""
    import json
    import subprocess
    import sys
    import tempfile

    from attnlab.service.ray_workers import LOST, reachable

    root = tempfile.mkdtemp(prefix="attnlab-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    head = _Head(root)
    env = {**head.env, "ATTNLAB_DEVICE": "ray", "ATTNLAB_RAY_ADDRESS": f"ray://127.0.0.1:{head.client}",
           "ATTNLAB_DEVICE_WORKERS": "1"}
    client = subprocess.Popen([sys.executable, "-c", CLIENT], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=open(tmp_path / "client.log", "wb"), text=True)

    def burst(n: int) -> dict:
        client.stdin.write(f"{n}\n")
        client.stdin.flush()
        return json.loads(client.stdout.readline())

    def ready() -> str | None:
        time.sleep(2.1)  # past the answer it keeps
        client.stdin.write("ready\n")
        client.stdin.flush()
        return json.loads(client.stdout.readline())["ready"]

    def until_served(deadline_s: float, n: int) -> tuple[float, dict]:
        t0 = time.monotonic()
        while True:
            seen = burst(n)
            if all(c["ok"] for c in seen["calls"]) or time.monotonic() - t0 > deadline_s:
                return time.monotonic() - t0, seen
            assert all(c["type"] == "WorkerLost" for c in seen["calls"] if not c["ok"]), seen
            time.sleep(0.5)

    try:
        head.start(1)
        first, seen = until_served(90, 1)  # the head starts, the client connects, the worker is created
        assert seen["calls"][0]["ok"], (seen, (tmp_path / "client.log").read_text()[-3000:])
        before = seen["reconnects"]  # the first connection may itself have been a retry (the head was starting)
        assert ready() is None
        head.kill()
        outage = ready()
        # a sentence of RayWorkers.ready, or the 2 s budget's: the pod is taken out of rotation
        assert outage.startswith((f"The Ray cluster at {env['ATTNLAB_RAY_ADDRESS']} cannot be reached",
                                  "The device service did not answer within")), outage
        during = burst(1)["calls"][0]
        assert not during["ok"] and during["type"] == "WorkerLost" and during["error"] == LOST, during
        assert during["s"] < 15  # Ray's own reconnect grace period (5 s here) and no more
        head.start(2)
        opened = []  # when the new head's client port accepts (the head's own start, not the client's)
        t0 = time.monotonic()

        def watch():
            while reachable(env["ATTNLAB_RAY_ADDRESS"], 1):
                time.sleep(0.2)
            opened.append(time.monotonic() - t0)

        threading.Thread(target=watch, daemon=True).start()
        while burst(0)["reconnects"] == before and time.monotonic() - t0 < 60:  # no request: only asks the count
            time.sleep(0.2)
        healed = time.monotonic() - t0
        assert healed < 60, "the connection was not made again in the background"
        back, seen = until_served(60, 4)
        log = (tmp_path / "client.log").read_text()
        assert all(c["ok"] for c in seen["calls"]), (seen, log[-3000:])
        assert seen["reconnects"] - before == 1, log[-3000:]  # reconnected once, before the burst of pages came
        assert ready() is None
        print(f"\nreconnected in the background {healed:.1f} s after the head's restart, served "
              f"{back:.1f} s later, its client port open after "
              f"{opened[0] if opened else float('nan'):.1f} s (first start {first:.1f} s); the call during the outage "
              f"failed after {during['s']:.1f} s; not ready meanwhile: "
              f"{outage!r}; the client's log:\n"
              + "\n".join(line for line in log.splitlines() if line.startswith("attnlab ")))
    finally:
        client.kill()
        head.kill()
        shutil.rmtree(root, ignore_errors=True)


# -- Ray, with fake GPUs on this CPU ----------------------------------------------------------------
STALE = "127.0.0.1:9"  # a cluster address where nothing listens


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from attnlab.service import ray_workers

    environ = dict(os.environ)
    # as on a machine where `ray start` ran before: a pointer to a cluster long gone (Ray's default would join it)
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="attnlab-ray-", dir="/tmp")
    os.makedirs(os.path.join(os.environ["RAY_TMPDIR"], "ray"))
    with open(os.path.join(os.environ["RAY_TMPDIR"], "ray", "ray_current_cluster"), "w") as f:
        f.write(STALE)
    ray_workers.RayWorkers("local", workers=1, fake_gpus=4, worker_env=CPU)  # starts the cluster
    yield ray
    for name in ray.util.list_named_actors(all_namespaces=True):
        if isinstance(name, dict) and name.get("name", "").startswith(ray_workers.PREFIX):
            ray.kill(ray.get_actor(name["name"], namespace=name["namespace"]))
    ray.shutdown()
    # ray.init sets RAY_AUTH_MODE=token in this process's environment, without the token: a later test's
    # `ray start` (scripts/capacity.py --device ray, run as a child) inherited it and refused to start
    shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)
    os.environ.clear()
    os.environ.update(environ)


def test_a_local_cluster_is_its_own_even_where_a_stale_ray_pointer_is_left(ray_cluster):
    # the fixture started it with /tmp/ray/ray_current_cluster (here under RAY_TMPDIR) naming a dead cluster
    pointer = os.path.join(os.environ["RAY_TMPDIR"], "ray", "ray_current_cluster")
    assert open(pointer).read() == STALE
    assert ray_cluster.is_initialized() and ray_cluster.get_runtime_context().gcs_address != STALE
    assert ray_cluster.cluster_resources().get("GPU") == 4  # the fake GPUs it was started with


LOCAL_FROM_A_THREAD = r"""
import sys, threading, time
from attnlab.measure import runs
from attnlab.service.ray_workers import RayWorkers
from attnlab.service.request import Request
from attnlab.shapes import AttentionShape
made = []
page = threading.Thread(target=lambda: made.append(RayWorkers("local", workers=1, worker_env={"JAX_PLATFORMS": "cpu"})))
page.start(); page.join()  # as a Streamlit server does: the first page's script thread makes the client, then ends
time.sleep(2)
print("served", made[0].call(Request.of(runs.run, AttentionShape(batch=1, q_len=16, kv_len=16, heads=2, kv_heads=2,
                                                                head_dim=8), ("naive",))).value[0].ok, flush=True)
"""


def test_a_local_ray_started_from_a_pages_thread_outlives_that_thread():
    """Ray's processes die with the thread that started them (PR_SET_PDEATHSIG): a served app on
    ATTNLAB_RAY_ADDRESS=local started them in its first page's thread and lost its GCS when that run ended."""
    pytest.importorskip("ray")
    home = tempfile.mkdtemp(prefix="rl", dir="/tmp")  # short: Ray's socket paths live below it
    env = {**os.environ, "RAY_TMPDIR": home, "PYTHONPATH": str(ROOT)}
    try:
        out = subprocess.run([sys.executable, "-c", LOCAL_FROM_A_THREAD], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=300)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert "served True" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]


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


def test_a_ray_worker_that_aborts_is_replaced_by_its_spare_and_the_actor_lives_on(ray_cluster):
    """A native abort ends the device worker's process, the actor's child: the request that ran it is a sentence,
    the actor's spare child takes the GPU (the next request is served by the process that was the spare), and Ray's
    actor, never dead, is not restarted."""
    import psutil

    from attnlab.service import faults
    from attnlab.service.ray_workers import RayWorkers

    client = RayWorkers("local", workers=2, worker_env=CPU)
    assert client.wait_ready(180)
    doomed = Request.of(faults.abort)
    victim = client._choose(doomed)
    before = {i.name: i.pid for i in client.infos()}
    actor = psutil.Process(before[victim]).parent()
    deadline = time.monotonic() + 60
    while len(spares := [c for c in actor.children() if c.pid != before[victim]]) != 1:  # started once it answered
        assert time.monotonic() < deadline, "no spare"
        time.sleep(0.2)
    with pytest.raises(WorkerLost, match=r"killed by signal 6 \(SIGABRT\) while serving this request"):
        client.call(doomed)
    assert client.call(Request.of(runs.run, TINY, ("naive",))).value[0].ok
    after = {i.name: i.pid for i in client.infos()}
    assert after[victim] == spares[0].pid and after[victim] != before[victim] and len(after) == 2
    assert actor.is_running() and psutil.Process(after[victim]).parent().pid == actor.pid


def test_a_ray_actor_killed_is_restarted_by_ray_and_serves_the_next_request(ray_cluster):
    """The actor's own process killed (an out-of-memory kill): its children go with it, Ray starts the actor again,
    and a request waits for it or says so."""
    import psutil

    from attnlab.service.ray_workers import RayWorkers

    client = RayWorkers("local", workers=1, worker_env=CPU)
    assert client.wait_ready(180)
    (before,) = [i.pid for i in client.infos()]
    actor = psutil.Process(before).parent()
    actor.kill()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 60:
        try:
            reply = client.call(Request.of(runs.run, TINY, ("naive",)))
            break
        except WorkerLost as e:
            assert "Ray is starting it again" in str(e) or "restarting" in str(e)
            time.sleep(0.5)
    assert reply.value[0].ok
    (after,) = [i.pid for i in client.infos()]
    assert psutil.Process(after).parent().pid != actor.pid
    deadline = time.monotonic() + 10
    while psutil.pid_exists(before) and psutil.Process(before).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the killed actor's device worker outlived it"
        time.sleep(0.2)


@pytest.mark.parametrize("words, resent", [("IOError: The actor is restarting.", True),
                                           ("RpcError: RPC error: Socket closed rpc_code: 14", False)])
def test_a_request_ray_refuses_while_it_restarts_the_worker_waits_for_it_and_one_it_met_dying_does_not(
        ray_cluster, monkeypatch, words, resent):
    """Ray's two answers after a worker's process died (seen with Ray 2.60, issue 40's device fault): a call made
    while Ray restarts the actor is refused, "The actor is restarting" (never run): it waits for the new process
    and is sent again, and so does a page's look at the workers (no "no worker answers"). A call that met the
    dying process ("RpcError") may have been what killed it: a sentence, never sent again; the worker is then
    probed until the new process answers, so the calls after it are not sent into Ray's refusals."""
    import ray

    from attnlab.service import ray_restart
    from attnlab.service.ray_workers import RayWorkers

    client = RayWorkers("local", workers=1, worker_env=CPU)
    assert client.wait_ready(180)
    (name, actor), = client._actors.items()
    refused = ray.exceptions.ActorUnavailableError(f"The actor is temporarily unavailable: {words}", None)
    sent: list[str] = []

    said: list[bool] = []  # what client.restarting() says as each call is sent again (the pages' spinner asks it)

    def method(which):
        def remote(*args):
            sent.append(which)
            if sent.count(which) > 1:
                said.append(client.restarting())
            return refused if sent.count(which) <= 3 else getattr(actor, which).remote(*args)
        return type("Method", (), {"remote": staticmethod(remote)})

    real_get, real_wait = ray.get, ray.wait

    def get(ref, timeout=None):
        if ref is refused:
            raise refused
        return real_get(ref, timeout=timeout)

    def wait(refs, num_returns=1, timeout=None):  # a refusal is ready at once
        if any(r is refused for r in refs):
            return [refused], [r for r in refs if r is not refused]
        return real_wait(refs, num_returns=num_returns, timeout=timeout)

    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(ray, "wait", wait)
    monkeypatch.setattr(ray_restart, "_REFUSED", [-1e9])  # no refusal seen before this test's
    monkeypatch.setitem(client._actors, name, type("Restarting", (), {"call": method("call"), "info": method("info")}))
    if resent:
        # each refused call waits for a probe (`info`) to be answered, then is sent again: the first probe answered
        # is the fourth (three refused), and each later refusal of the call needs one more. A probe is sent every
        # POLL_S without waiting for the last, so a real one slower than that (a loaded CI machine) adds one more
        assert client.call(Request.of(runs.run, TINY, ("naive",))).value[0].ok and sent.count("call") == 4
        assert sent[:5] == ["call", "info", "info", "info", "info"]
        between = "".join(w[0] for w in sent).split("c")[1:]  # the probes after each call: "iiii", "i", "i", ""
        assert between[-1] == "" and all(between[:-1]) and sent.count("info") >= 6
        assert said and all(said)  # while it was being restarted (a look at the workers after is not)
        probes = sent.count("info")
        assert [i.name for i in client.infos()] == [name] and sent.count("info") > probes
    else:
        for _ in range(2):
            with pytest.raises(WorkerLost, match="Ray is starting it again"):
                client.call(Request.of(runs.run, TINY, ("naive",)))
        # never sent again; the worker is probed in the background until it answers (three probes refused, the
        # fourth answered; a fifth may go out meanwhile where the real probe takes longer than POLL_S), and the next
        # call waited for that before it was sent
        seq = "".join(w[0] for w in sent)  # c: call, i: info
        assert seq.startswith("ciiii") and "c" in seq[5:]
        # that call met a death too (this fake's third), so a watch is under way again: the pages say restarting
        assert client.restarting()
        ray_restart.REVIVAL.join(name, time.monotonic() + 30)
        assert not client.restarting() and [i.name for i in client.infos()] == [name]


def test_a_worker_watched_after_a_death_is_said_restarting_before_ray_refuses_anything(monkeypatch):
    """The pages' caption asks `restarting()` before it reads the workers' lines (which wait out a restart): from the
    death a call met, not only from Ray's first refusal, which comes 2 s later or never (a quick new process). Seen
    in Chromium on a local Ray: the spinner counted the restart's seconds with no caption under it."""
    from attnlab.service import ray_restart

    gate = threading.Event()
    monkeypatch.setattr(ray_restart, "answered", lambda actor, deadline: gate.wait(10))  # no probe answered yet
    monkeypatch.setattr(ray_restart, "_REFUSED", [-1e9])  # and no refusal heard
    monkeypatch.setattr(ray_restart, "REVIVAL", ray_restart.Revival())
    link = type("Link", (), {"using": staticmethod(contextlib.nullcontext)})()
    assert not ray_restart.restarting_now()
    ray_restart.REVIVAL.watch("device-0", object(), link, time.monotonic() + 10)
    assert ray_restart.restarting_now()
    gate.set()
    ray_restart.REVIVAL.join("device-0", time.monotonic() + 10)
    assert not ray_restart.restarting_now()


def test_a_learners_crashes_on_ray_never_stop_the_worker_and_the_program_is_remembered(ray_cluster):
    """More learner-caused aborts in a row than the child's supervisor allows quick deaths: each is a sentence, the
    actor's device worker is replaced each time (never given up on), and the new one refuses the program."""
    import uuid

    from attnlab.service import faults
    from attnlab.service.child import QUICK_DEATHS
    from attnlab.service.ray_workers import RayWorkers

    client = RayWorkers("local", workers=1, worker_env=CPU)
    assert client.wait_ready(180)
    bad, pids = uuid.uuid4().hex, {client.infos()[0].pid}
    for _ in range(QUICK_DEATHS + 1):
        with pytest.raises(WorkerLost, match=r"SIGABRT\) while it ran a learner's program\. That program is remembered"):
            client.call(Request.of(faults.learner_abort, bad))
        assert client.wait_ready(120)
        pids.add(client.infos()[0].pid)
    assert len(pids) == QUICK_DEATHS + 2  # a new device worker process after every crash
    assert client.call(Request.of(runs.run, TINY, ("naive",))).value[0].ok
    words = client.call(Request.of(faults.remembered, bad)).value
    assert words and "stopped the device worker" in words
    assert client.call(Request.of(faults.remembered, uuid.uuid4().hex)).value is None
    # the actor's own process killed: the actor Ray starts again remembers the program too (the pod's folder)
    import psutil

    psutil.Process(client.infos()[0].pid).parent().kill()
    deadline = time.monotonic() + 60
    while True:
        try:
            assert client.call(Request.of(faults.remembered, bad)).value == words
            break
        except WorkerLost:
            assert time.monotonic() < deadline
            time.sleep(0.5)


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


def test_a_lost_connection_shows_on_the_page_as_a_lost_request_not_an_exception(monkeypatch):
    import streamlit as st

    from attnlab import service
    from attnlab.service.ray_workers import LOST
    from tests.apptest_util import open_page

    def lost(request):
        raise WorkerLost(LOST)

    st.cache_data.clear()  # no answer kept from another test
    monkeypatch.setattr(service, "send", lost)
    at = open_page("pages/p4_naive_vs_fused.py", {"q_len": "24", "kv_len": "24"})  # asserts: no exception shown
    shown = [w.value for w in at.warning]
    assert any(LOST in w for w in shown), shown


def test_a_queued_run_whose_sessions_have_all_gone_is_dropped_and_one_a_live_session_waits_for_runs(monkeypatch):
    """A closed tab's run waiting for the device leaves the line (admission.Abandoned: a busy answer, not kept)
    instead of making the others wait; a run that a live session (or no session: the CLI) also waits for runs."""
    import dataclasses

    from attnlab.admission import DEVICE, Abandoned

    ran = []

    def queued_run(shape, names, **kw):
        with DEVICE.use():
            ran.append(names)
            return [runs.Result(shape, n, runs.OK) for n in names]

    worker = DeviceWorker()
    ask = lambda names, session: dataclasses.replace(Request.of(runs.run, TINY, names), session=session)  # noqa: E731
    closed, shared, open_ = ask(("naive",), "closed-tab"), ask(("sdpa_xla",), "closed-tab"), ask(("sdpa_xla",), "open-tab")
    monkeypatch.setattr(runs, "run", queued_run)
    holding, release = threading.Event(), threading.Event()

    def hold():
        with DEVICE.use():
            holding.set()
            release.wait(30)

    threading.Thread(target=hold, daemon=True).start()
    assert holding.wait(10)
    replies = {}
    threads = [threading.Thread(target=lambda r=r, n=n: replies.__setitem__(n, worker.call(r)), daemon=True)
               for n, r in (("closed", closed), ("shared", shared), ("open", open_))]
    for t in threads:
        t.start()
        time.sleep(0.1)  # in this order: the open tab's request shares the closed tab's sdpa_xla run
    assert worker.drop(["closed-tab"]) == 1  # naive: only the closed tab waits for it
    threads[0].join(5)
    assert isinstance(replies["closed"].error, Abandoned) and not replies["closed"].kept
    assert threads[1].is_alive() and threads[2].is_alive()  # sdpa_xla still waits: an open tab wants it too
    assert "shared" not in replies
    release.set()
    [t.join(10) for t in threads]
    assert ran == [("sdpa_xla",)] and replies["shared"].value[0].ok and replies["open"].value[0].ok
    assert worker.drop(["closed-tab"]) == 0  # nothing left in flight


def test_a_worker_names_the_request_on_the_device_and_those_waiting_in_order(monkeypatch):
    """WorkerInfo.line: the keys of the request holding the device, then of each waiting (a page finds its own there:
    pages/waiting.place); a request shared by a second caller is one place, and one compiling is in none."""
    from attnlab.admission import DEVICE

    holding, release = threading.Event(), threading.Event()

    def queued_run(shape, names, **kw):
        if names == ("compiling",):
            release.wait(30)
            return []
        with DEVICE.use():
            if names == ("first",):
                holding.set()
                release.wait(30)
            return [runs.Result(shape, n, runs.OK) for n in names]

    monkeypatch.setattr(runs, "run", queued_run)
    worker = DeviceWorker()
    asked = [Request.of("attnlab.measure.runs:run", TINY, (n,)) for n in ("first", "second", "third", "second", "compiling")]
    threads = []
    for r in asked:
        threads.append(threading.Thread(target=worker.call, args=(r,), daemon=True))
        threads[-1].start()
        if r is asked[0]:
            assert holding.wait(10)
        time.sleep(0.1)
    info = worker.info()
    assert (info.running, info.waiting) == (1, 2) and info.in_flight == 4
    assert info.line == (asked[0].key, asked[1].key, asked[2].key) and info.builds == info.building == ()
    assert info.by_page  # the line is in the pages' order (oldest_first): a page's sentence says a place can move back
    release.set()
    [t.join(10) for t in threads]
    assert worker.info().line == ()


def test_a_stuck_connection_attempt_is_passed_by_one_started_beside_it_and_closed_if_it_connects_later():
    """hedged: the first dial hangs (as a Ray client's can for 41 s, ray-project/ray#63202), the second connects:
    the second is returned after about one hedge interval, not after the first's wait; the first, when it connects
    at last, is closed, and the kept one is not."""
    from attnlab.service.ray_link import hedged

    release, closed, calls = threading.Event(), [], []

    def dial():
        n = len(calls)
        calls.append(n)
        if n == 0:
            release.wait(10)
        return f"connection {n}"

    t0 = time.monotonic()
    got = hedged(dial, closed.append, every_s=0.3, most=3)
    took = time.monotonic() - t0
    assert got == "connection 1" and len(calls) == 2 and took < 2, (got, calls, took)
    release.set()
    for _ in range(100):
        if closed:
            break
        time.sleep(0.02)
    assert closed == ["connection 0"]


def test_hedged_connection_attempts_that_all_fail_raise_the_last_failure_and_stop_at_the_limit():
    """Every dial fails: the failure is raised (not swallowed, not retried for ever); a fast failure is not
    dialled again by itself (the caller's next request retries), and stuck ones stop at `most` at once."""
    from attnlab.service.ray_link import hedged

    calls = []

    def refused():
        calls.append(1)
        raise ConnectionError("nothing answers")

    with pytest.raises(ConnectionError, match="nothing answers"):
        hedged(refused, lambda c: None, every_s=0.2, most=3)
    assert len(calls) == 1

    stuck = []

    def slow_then_fail():
        stuck.append(1)
        time.sleep(0.8)
        raise TimeoutError(f"attempt {len(stuck)}")

    with pytest.raises(TimeoutError):
        hedged(slow_then_fail, lambda c: None, every_s=0.1, most=3)
    assert len(stuck) == 3


HEDGED = """
import json, sys, threading, time
from attnlab.service import ray_link
ray_link.HEDGE_S = 0.05  # a dial beside the first at once: three connections at the same time
dials, done, dial = [], [], ray_link.Link._dial


def counted(self):
    dials.append(1)
    try:
        return dial(self)
    finally:
        done.append(1)


ray_link.Link._dial = counted
from attnlab import service
from attnlab.service import faults
from ray.util.client import num_connected_contexts

client = service.client()
kept = num_connected_contexts()
t0 = time.monotonic()
# every dial ended (a slow one may connect after the first was kept), and the others closed as they connected
while (len(done) < len(dials) or num_connected_contexts() > 1) and time.monotonic() - t0 < 60:
    time.sleep(0.2)
out = []
threads = [threading.Thread(target=lambda: out.append(service.call(faults.sleep, 0.001))) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps({"dials": len(dials), "contexts": num_connected_contexts(),
                  "calls": len(out), "reconnects": client.reconnects, "broken": client.broken}), flush=True)
"""


def test_three_dials_at_once_leave_one_connection_that_serves_every_thread(tmp_path):
    """Ray's client holding several connections (hedged dials, ray.init's allow_multiple), made to dial three at
    once: the ones not kept are closed as they connect (one client context left), and calls from four threads
    at once all go over the kept one (each thread given its context by Link.using)."""
    import json
    import subprocess
    import sys
    import tempfile

    from attnlab.service.ray_link import reachable

    root = tempfile.mkdtemp(prefix="attnlab-ray-", dir="/tmp")
    head = _Head(root)
    env = {**head.env, "ATTNLAB_DEVICE": "ray", "ATTNLAB_RAY_ADDRESS": f"ray://127.0.0.1:{head.client}",
           "ATTNLAB_DEVICE_WORKERS": "1"}
    try:
        head.start(1)
        t0 = time.monotonic()
        while reachable(env["ATTNLAB_RAY_ADDRESS"], 1) and time.monotonic() - t0 < 60:
            time.sleep(0.2)
        time.sleep(3)  # the head's client server past its start
        got = subprocess.run([sys.executable, "-c", HEDGED], env=env, capture_output=True, text=True, timeout=240)
        assert got.returncode == 0, got.stderr[-3000:]
        seen = json.loads(got.stdout.strip().splitlines()[-1])
        assert seen["dials"] == 3, seen
        assert seen["contexts"] == 1 and seen["calls"] == 4 and not seen["broken"], (seen, got.stderr[-3000:])
    finally:
        head.kill()
