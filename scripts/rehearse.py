#!/usr/bin/env python
"""The hosted class, rehearsed on this machine: the rendered manifests' pods as processes, behind a real proxy.

    python scripts/rehearse.py                       # make rehearse: 2 UI replicas, 2 device workers, 20 learners
    python scripts/rehearse.py --check --json out.json --learners 20 --ui 2 --workers 2

1. Renders the manifests offline (`kubectl kustomize deploy/k8s-campus`: the door without IAP, whose signed
   header only Google's load balancer can make; tests/test_iap.py covers IAP) and reads the image's ENTRYPOINT,
   CMD and ENV from deploy/Dockerfile.
2. Starts each pod as its kubelet would (scripts/kubelet.py, scripts/cluster_pods.py): the Ray head with the
   command KubeRay generates from its `rayStartParams`, W device workers (each after KubeRay's wait for the GCS
   and the pod's own GPU gate; with fake GPUs on a machine without one, after showing that the real gate refuses
   it), K UI replicas with the Deployment's command and env, reaching Ray over ray:// at the head's client port;
   every probe of the manifests and the ones KubeRay injects, run as Kubernetes runs them.
3. HAProxy in front of the UI replicas (scripts/proxy.py), pinning each browser by a generated cookie.
4. A class through the proxy (N learners as headless tabs, pages/st_client.py: every page once, shapes as
   scripts/capacity.py's), then the learners keep going on the pages that use the device (`DEVICE_PAGES`; after a
   device fault on shapes nobody computed, so a page served again has used the device) while the cluster's faults
   come one after another, each once the class has settled from the last (every learner served a round of those
   pages since it: a fault is measured from a class at its pace, not from one still compiling the shapes the last
   fault made new): a device worker killed (SIGKILL, as a native abort: the DeviceActor's child, whose spare takes
   over), a UI replica killed, the Ray head killed (the kubelet starts each again); `--faults shapes ...` adds the
   control, the new shapes alone, and `actor` kills a DeviceActor's own process (Ray starts it again). For each: how soon every learner it cut off was served a page again (after a device
   fault every learner; after a UI replica's, the learners that replica had, who reconnect through the proxy to
   another), sessions lost on the replicas that survived, and what the probes said meanwhile.
`--check` exits 1 unless the figures meet the issue's targets (`TARGETS`). Logs of every pod: `--logs DIR`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attnlab.procs import Record, device_workers, machine_cpu, py_spy, tree  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from capacity import class_shapes, page_paths, percentile, session_shapes  # noqa: E402
from class_server import wait_for_warm_ups  # noqa: E402
from cluster_pods import ROOT, Cluster, Image  # noqa: E402
from kubelet import Kubelet  # noqa: E402
from proxy import Proxy  # noqa: E402

from pages.st_client import Tab  # noqa: E402

TARGETS = {"worker": 10.0, "ui": 10.0, "head": 60.0}  # s until every learner is served again (issue 40)
# "shapes", the control: no fault, only the new shapes a device fault moves every learner to (`epoch`). Measured as a
# fault is, it says how much of a device fault's figure is compiling those shapes on a worker that never stopped.
CONTROL = "shapes"
# "actor": Ray's DeviceActor process killed (an out-of-memory kill, say), not the device worker's own process (a
# native abort's): Ray starts the actor again, and it a new worker without a spare (attnlab/service/ray_actor.py)
ACTOR = "actor"
P95_ON_GPU = {"shared": 3.0, "own": 8.0}  # a page's p95 in the class, on a real GPU (issue 40; CPUs: no target)
# Pages that ask the device at the learner's shape as they open (the others show text, or answer from a cache that
# holds without the device): the faults' phase visits only these, so a page served again went through the device.
# The head fault checks it: none of them may be served while Ray is down.
DEVICE_PAGES = ("pages/p4_naive_vs_fused.py", "pages/p5_cudnn.py", "pages/p6_causal.py", "pages/p8_mha_gqa_mqa.py")


def lost_words() -> tuple[str, ...]:
    """How a page says that its device work was not done: the beginnings of the service's own sentences (a lost
    request, a worker that died serving it or is restarting, no worker answering), lowercased. A page that shows
    one was not served, whatever else it drew (before 2026-12-06 "no GPU worker answers" counted as served)."""
    from attnlab.service import ray_link
    from pages.workers import NO_WORKER

    try:
        from attnlab.service.ray_restart import RESTARTING
    except ImportError:  # a worktree of the product from before ray_restart.py (a before/after pair in one call)
        RESTARTING = getattr(ray_link, "RESTARTING", ray_link.LOST)
    sentences = [ray_link.LOST, ray_link.died(RuntimeError(), False), ray_link.died(RuntimeError(), True),
                 RESTARTING, *NO_WORKER.values()]
    return ("was lost", "device worker", "cannot be reached", *(s[:40].lower() for s in sentences))


LOST = lost_words()


def set_env(text: str) -> tuple[str, str, str]:
    """'workers:NAME=VALUE' -> ('workers', 'NAME', 'VALUE'); the pods are 'head', 'workers' or 'ui'."""
    pods, _, assignment = text.partition(":")
    name, eq, value = assignment.partition("=")
    if pods not in ("head", "workers", "ui") or not eq or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: want head|workers|ui:NAME=VALUE")
    return pods, name, value


def render(overlay: Path) -> list[dict]:
    kubectl = shutil.which("kubectl") or str(Path(sys.executable).with_name("kubectl"))
    out = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@dataclass
class Visit:
    session: int
    page: str
    start: float
    end: float
    ok: bool
    lost: bool = False
    replica: str | None = None
    failure: str | None = None
    problems: list[str] = field(default_factory=list)
    infos: list[str] = field(default_factory=list)  # the page's info and warning boxes (a busy GPU's is one)
    elements: int = 0
    epoch: int = 0  # the faults before it asked: its shapes (`Rehearsal.epoch`)


async def learner(i: int, lb: Proxy, shape: dict, pages: list, first: int, timeout: float, visits: list[Visit],
                  stop: threading.Event, once: bool, epoch: list[int]) -> None:
    """A browser tab through the proxy: the page first (the proxy sets its cookie), then the websocket with it;
    when the websocket closes, it opens again as Streamlit's frontend does, and goes on with the next page."""
    cookie, tab, k = None, None, first
    while not stop.is_set() and not (once and k - first >= len(pages)):
        if tab is None:
            t0 = time.monotonic()
            try:
                status, new = await asyncio.to_thread(lb.get, "/", cookie)
                cookie = new or cookie
                if status != 200:
                    raise ConnectionError(f"the proxy answered {status}")
                tab = await Tab.open(lb.url, timeout=30, headers={"Cookie": cookie} if cookie else None)
            except Exception as e:  # noqa: BLE001 - a browser retries whatever stopped it
                visits.append(Visit(i, "connect", t0, time.monotonic(), False, failure=f"{type(e).__name__}: {e}"))
                await asyncio.sleep(1.0)
                continue
        file, path = pages[k % len(pages)]
        k += 1
        t0, e = time.monotonic(), epoch[0]
        # after each fault a new batch size: shapes nobody computed, so every page needs the device again
        query = urlencode(dict(shape, batch=str(4 + e)) if e else shape)
        seen = await tab.visit(path, query, timeout)
        lost = any(m in w.lower() for w in seen.warnings for m in LOST)
        visits.append(Visit(i, file, t0, time.monotonic(), seen.ok and not seen.error_boxes, lost,
                            (cookie or "=").split("=", 1)[1].split("|")[0], seen.failure, seen.exceptions + seen.error_boxes,
                            seen.infos + seen.warnings, seen.elements, e))
        if seen.failure and "connection closed" in seen.failure:
            tab = None
    if tab is not None:
        await tab.close()


class Rehearsal:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.root = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))  # short: Ray's socket paths live below it
        self.logs = Path(args.logs or self.root / "logs")
        self.logs.mkdir(parents=True, exist_ok=True)
        docs = render(args.overlay) if not args.rendered else [d for d in yaml.safe_load_all(args.rendered.read_text()) if d]
        self.backend_config = next(d["spec"] for d in docs if d["kind"] == "BackendConfig")
        self.fake = not shutil.which("nvidia-smi")
        self.cluster = Cluster.from_manifests(docs, Image.read(ROOT / "deploy" / "Dockerfile"), ui=args.ui,
                                              workers=args.workers, root=self.root, fake_gpus=self.fake,
                                              cookie_secret=secrets.token_hex(32))
        for pod in self.cluster.ui:  # the instructor named the class's shapes (kubectl set env ... ATTNLAB_CLASS_SHAPES=)
            pod.env.update({"ATTNLAB_CLASS_SHAPES": class_shapes(args.class_shapes)} if args.class_shapes else {})
        for group, name, value in args.set_env:  # an A/B in one call: kubectl set env on the head, workers or UIs
            pods = {"head": [self.cluster.head], "workers": self.cluster.workers, "ui": self.cluster.ui}[group]
            for pod in pods:
                pod.env[name] = value
        self.lb: Proxy | None = None
        self.kubelets: dict[str, Kubelet] = {}
        self.epoch = [0]  # faults so far: the learners' shapes change with it

    def gate(self) -> dict:
        """The worker pod's GPU gate as the manifest runs it: on a machine without a GPU it must refuse (exit 3)."""
        name, argv, env = self.cluster.gate
        out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        return {"init_container": name, "exit": out.returncode, "said": (out.stderr.strip().splitlines() or [""])[-1][:300],
                "as_it_should": out.returncode == (3 if self.fake else 0)}

    def up(self, timeout: float = 300.0) -> float:
        t0 = self.began = time.monotonic()
        self.lb = Proxy.start(self.root, {p.name: p.ports[8501] for p in self.cluster.ui}, self.backend_config)
        for pod in [self.cluster.head, *self.cluster.workers]:
            self.kubelets[pod.name] = Kubelet(pod, self.logs).start()
        for pod in self.cluster.ui:
            self.kubelets[pod.name] = Kubelet(pod, self.logs, on_ready=lambda r, n=pod.name: self.lb.set_ready(n, r)).start()
        while not all(k.ready for k in self.kubelets.values()):
            if time.monotonic() - t0 > timeout:
                raise RuntimeError("not every pod became ready: " + ", ".join(n for n, k in self.kubelets.items() if not k.ready))
            time.sleep(0.5)
        return time.monotonic() - t0

    def ray_gpus(self) -> dict:
        """The GPUs Ray counts in the cluster (`ray status`) against those the worker pods were given: one more is a
        device worker where no GPU pod is (on the H200 the head's `ray start` once found the machine's GPU)."""
        given = sum(len(w.env["CUDA_VISIBLE_DEVICES"].split(",")) for w in self.cluster.workers
                    if w.env.get("CUDA_VISIBLE_DEVICES"))
        deadline = time.monotonic() + 30  # Ray's monitor reports the cluster's resources a few seconds after it starts
        while True:
            out = subprocess.run(["ray", "status", "--address", f"127.0.0.1:{self.cluster.head.ports['port']}"], cwd=ROOT,
                                 env=self.cluster.head.env, capture_output=True, text=True, timeout=60)
            found = re.search(r"[\d.]+/([\d.]+) GPU", out.stdout)
            if (found and float(found.group(1)) == given) or time.monotonic() > deadline:
                break
            time.sleep(2.0)
        return {"given_to_worker_pods": given, "counted_by_ray": float(found.group(1)) if found else None,
                "said": "" if found else (out.stdout + out.stderr)[-300:]}

    def warm(self, idle_cores: float = 0.15, quiet_s: float = 3.0, timeout: float = 240.0) -> float:
        """Every replica opens its first page once (the app then warms the device workers), then wait until the UI
        pods and the device workers are idle, as class_server does: a class arrives after its server has warmed
        (the runbook's step 1 is 30 minutes ahead), not into its warm-up's tuned compiles: first until every UI pod
        has logged its warm-up's end (class_server.wait_for_warm_ups), then until idle. Seconds it took."""
        t0 = time.monotonic()
        logs = [(self.logs / f"{pod.name}.log", (self.logs / f"{pod.name}.log").stat().st_size, 1) for pod in self.cluster.ui]

        async def first() -> None:
            for pod in self.cluster.ui:
                tab = await Tab.open(f"http://127.0.0.1:{pod.ports[8501]}")
                await tab.visit("", "", 300)
                await tab.close()
        asyncio.run(first())
        self.warm_ups_ended = wait_for_warm_ups(logs, t0 + timeout)
        seen: dict[int, float] = {}

        def cpu_s() -> float:  # the UI containers' trees and the device workers (Ray's own daemons never idle)
            procs = {q.pid: q for k in self.kubelets.values() if k.proc and k.pod.name.startswith("ui-")
                     for q in tree(k.proc.pid)}
            procs.update({w.pid: w for a in self.device_actors() for w in tree(a.pid)})
            for p in procs.values():
                try:
                    t = p.cpu_times()
                    seen[p.pid] = t.user + t.system
                except psutil.Error:
                    pass
            return sum(seen.values())

        last, quiet_since = cpu_s(), None
        while time.monotonic() - t0 < timeout:
            time.sleep(0.5)
            now = cpu_s()
            busy, last = (now - last) / 0.5, now
            quiet_since = (quiet_since or time.monotonic()) if busy < idle_cores else None
            if quiet_since and time.monotonic() - quiet_since >= quiet_s:
                break
        return time.monotonic() - t0

    def down(self) -> None:
        for k in self.kubelets.values():
            k.stop()
        if self.lb:
            self.lb.stop()
        for p in psutil.process_iter():  # anything a pod left behind (Ray's processes keep our folder in their args)
            try:
                if str(self.root) in " ".join(p.cmdline()):
                    p.kill()
            except psutil.Error:
                pass
        if not self.args.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def device_actors(self) -> list[psutil.Process]:
        """Ray's DeviceActor processes of this rehearsal: each the supervisor of one GPU's device worker."""
        found = []
        for p in psutil.process_iter():
            try:
                if "ray::DeviceActor" in " ".join(p.cmdline()) and str(self.root) in p.environ().get("TMPDIR", ""):
                    found.append(p)
            except psutil.Error:
                continue
        return found

    def device_workers(self) -> list[psutil.Process]:
        """The processes that run JAX on the GPUs: each actor's device worker, its spare left out
        (attnlab.procs.device_workers), or the actor itself while it has none."""
        return device_workers([q for a in self.device_actors() for q in tree(a.pid)])

    def device_worker(self) -> psutil.Process | None:
        return next(iter(self.device_workers()), None)

    def _cpu(self) -> dict:
        """CPU seconds of each process now, by whose: each pod's container (its whole tree), the device actors among
        them, HAProxy, and this process (the learners' tabs and the rehearsal's own threads); and the machine's."""
        groups = {n: tree(k.proc.pid) for n, k in self.kubelets.items() if k.proc}
        groups |= {"device actors": [q for a in self.device_actors() for q in tree(a.pid)], "proxy": tree(self.lb.proc.pid),
                   "learners (this process)": [psutil.Process()]}
        out: dict = {"machine": machine_cpu()}
        for group, procs in groups.items():
            out[group] = {}
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    t = proc.cpu_times()
                    out[group][proc.pid] = t.user + t.system
        return out

    @staticmethod
    def cores(before: dict, after: dict, seconds: float) -> dict[str, float]:
        """Cores each group kept busy on average between two `_cpu` readings (a process gone by the second reading
        counts nothing: the killed worker, whose seconds after the kill are none), and the machine's busy cores."""
        out = {g: round(sum(c - before.get(g, {}).get(pid, 0.0) for pid, c in now.items()) / seconds, 2)
               for g, now in after.items() if g != "machine"}
        (busy0, total0), (busy1, total1) = before["machine"], after["machine"]
        out["machine (busy of all)"] = round((busy1 - busy0) / max(total1 - total0, 1e-9) * psutil.cpu_count(), 2)
        return out

    def run(self) -> dict:
        a = self.args
        report: dict = {"ui_replicas": len(self.cluster.ui), "device_workers": a.workers, "fake_gpus": self.fake, "learners": a.learners,
                        "mode": a.mode, "class_shapes": self.cluster.ui[0].env.get("ATTNLAB_CLASS_SHAPES", ""),
                        "set_env": [f"{g}:{n}={v}" for g, n, v in a.set_env]}
        report["gate"] = self.gate()
        report["ready_after_s"] = self.up()
        report["gpus"] = self.ray_gpus()
        report["warm_s"] = self.warm(timeout=self.args.warm_wait_s)
        report["warm_ups_ended"] = self.warm_ups_ended
        rng = random.Random(a.seed)
        pages = list(page_paths().items())
        shapes = session_shapes(a.mode, a.learners, rng)
        firsts = [rng.randrange(len(pages)) for _ in range(a.learners)]
        with self._sampled("class"):
            report["class"] = self._class(pages, shapes, firsts)
        # --classes K: K classes one after another on the same warm cluster, each learner starting on a page drawn
        # anew (run-to-run spread: one class cannot tell two settings apart by less than about a second)
        report["classes"] = [report["class"]] + [self._class(pages, shapes, [rng.randrange(len(pages)) for _ in shapes])
                                                 for _ in range(a.classes - 1)]
        device_pages = [(f, u) for f, u in pages if f in DEVICE_PAGES]
        assert len(device_pages) == len(DEVICE_PAGES), f"app.py lists {device_pages}, not every one of {DEVICE_PAGES}"
        report["faults"] = self._faults(device_pages, shapes, firsts) if a.faults else []
        deadline = time.monotonic() + 180
        while not all(k.ready for k in self.kubelets.values()) and time.monotonic() < deadline:
            time.sleep(0.5)  # the faults' pods back before the report
        report["pods"] = {n: {**self._pod(k), "ready_after_s": k.time_to_ready(self.began)} for n, k in self.kubelets.items()}
        report["proxy"] = self.lb.states()
        return report

    @contextlib.contextmanager
    def _sampled(self, phase: str):
        """With --sample-to DIR: py-spy records every device worker and UI container into DIR/<phase>/ while `phase`
        runs (`class`, then `fault-<i>-<kind>` for each fault), a worker started again after a fault as soon as it
        appears (`python scripts/samples.py DIR/<phase>` sums it up)."""
        if not self.args.sample_to:
            yield
            return
        records: dict[int, Record] = {}
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                ui = [k.proc.pid for n, k in self.kubelets.items() if n.startswith("ui") and k.proc and k.proc.poll() is None]
                for pid in [*ui, *(p.pid for p in self.device_workers())]:
                    if pid not in records:
                        records[pid] = Record([pid], folder=self.args.sample_to / phase).__enter__()
                stop.wait(0.5)

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            for r in records.values():
                r.__exit__(None, None, None)

    def _learners(self, pages, shapes, firsts, visits, stop, once) -> threading.Thread:
        async def go() -> None:
            await asyncio.gather(*(learner(i, self.lb, s, pages, firsts[i], self.args.timeout, visits, stop, once,
                                           self.epoch) for i, s in enumerate(shapes)))
        t = threading.Thread(target=asyncio.run, args=(go(),), daemon=True)
        t.start()
        return t

    def _class(self, pages, shapes, firsts) -> dict:
        visits: list[Visit] = []
        t0, wall0, cpu0 = time.monotonic(), time.time(), self._cpu()  # wall0: the request log's clock (request_log.py)
        self._learners(pages, shapes, firsts, visits, threading.Event(), once=True).join()
        cores = self.cores(cpu0, self._cpu(), time.monotonic() - t0)
        times = [v.end - v.start for v in visits if v.ok and v.page != "connect"]
        bad = [v for v in visits if not v.ok or v.lost]
        return {"elapsed_s": time.monotonic() - t0, "began_at": wall0, "pages_planned": len(shapes) * len(pages), "pages_served": len(times),
                "median_page_s": statistics.median(times) if times else None, "p95_page_s": percentile(times, 95),
                "worst_page_s": max(times, default=None), "errors": len(bad),
                "by_page": {Path(f).stem: {"median_s": round(statistics.median(ts), 2), "worst_s": round(max(ts), 2)}
                            for f in sorted({v.page for v in visits if v.page != "connect"})
                            if (ts := [v.end - v.start for v in visits if v.page == f and v.ok])},
                "error_messages": [f"[s{v.session} {Path(v.page).stem}] {v.failure or ''} {v.problems}" for v in bad][:10],
                # the slowest visits, when each began in the class: what the p95 is made of
                "slowest": [{"session": v.session, "page": Path(v.page).stem, "shape": shapes[v.session],
                             "from_s": round(v.start - t0, 2), "s": round(v.end - v.start, 2)}
                            for v in sorted((v for v in visits if v.ok and v.page != "connect"),
                                            key=lambda v: v.start - v.end)[:15]],
                "replicas": sorted({v.replica for v in visits if v.replica}), "cpu_cores": cores}

    def _faults(self, pages, shapes, firsts) -> list[dict]:
        visits: list[Visit] = []
        stop = threading.Event()
        thread = self._learners(pages, shapes, firsts, visits, stop, once=False)
        out, since = [], time.monotonic()
        try:
            for i, kind in enumerate(self.args.faults):
                settled = self._settle(visits, since, len(pages))
                with self._sampled(f"fault-{i}-{kind}"):  # one folder a fault: the control's beside the worker's
                    out.append({**self._fault(kind, visits), "settled_before_s": settled})
                since = time.monotonic()
        finally:
            stop.set()
            thread.join(timeout=self.args.timeout + 30)
        return out

    def _settle(self, visits: list[Visit], since: float, rounds: int) -> float | None:
        """Wait until the class has settled after the last fault: every learner served `rounds` pages (one round of
        the device pages) begun since `since`, so that the next fault is measured from a class at its steady pace,
        not from one still compiling the shapes the last fault made new (a device fault moves every learner to
        new shapes). At least 3 s; at most --settle-s. Seconds it took, or None when the class had not settled."""
        t0 = time.monotonic()
        while True:
            served = collections.Counter(v.session for v in list(visits)
                                         if v.start >= since and v.ok and not v.lost and v.page != "connect")
            done = len(served) == self.args.learners and min(served.values()) >= rounds
            waited = time.monotonic() - t0
            if waited >= 3.0 and (done or waited >= self.args.settle_s):
                return round(waited, 1) if done else None
            time.sleep(0.25)

    def _fault(self, kind: str, visits: list[Visit]) -> dict:
        n = self.args.learners
        ui_pod = self.cluster.ui[0].name
        on_ui = {v.session for v in visits if v.replica == ui_pod}
        # a lost device: new shapes, so that a page served again used the device; only a visit at them counts (one
        # begun as the fault began may still ask the old, kept shapes: CI once counted two as served while Ray was down)
        self.epoch[0] += kind != "ui"
        epoch = self.epoch[0]
        cpu0 = self._cpu()
        t, wall = time.monotonic(), time.time()
        if kind in ("worker", ACTOR):
            victim = self.device_worker() if kind == "worker" else next(iter(self.device_actors()), None)
            what = (f"{'device worker' if kind == 'worker' else 'Ray actor (the worker and its spare with it)'} pid "
                    f"{victim.pid}" if victim else "no device worker found")
            if victim:
                victim.kill()
        elif kind == CONTROL:
            what = "no fault: every learner's shapes changed (the control)"
        else:
            name = ui_pod if kind == "ui" else self.cluster.head.name
            hold = self.args.head_down_s if kind == "head" else 0.0
            what = f"{name} container pid {self.kubelets[name].kill(hold_s=hold)}" + (f", down {hold:.0f} s" if hold else "")
        limit = TARGETS.get(kind, TARGETS["worker"]) * 3 + 30
        # whose service the fault broke: a UI replica's own learners (the others never left theirs); a device's, all
        affected = set(on_ui) if kind == "ui" else set(range(n))
        again: dict[int, float] = {}
        first: dict[int, Visit] = {}  # each learner's first page served after the fault
        # after a UI replica's fault, wait for the other replica's learners too: a page of theirs begun after the
        # kill shows that they went on (the killed replica's may come back first, while theirs are mid-page)
        wanted = set(range(n)) if kind == "ui" else affected
        while time.monotonic() - t < limit and not wanted <= set(again):
            for v in list(visits):
                if v.start >= t and v.epoch == epoch and v.ok and not v.lost and v.page != "connect":
                    again.setdefault(v.session, v.end - t)
                    first.setdefault(v.session, v)
            time.sleep(0.25)
        cores = self.cores(cpu0, self._cpu(), time.monotonic() - t)  # until every learner was served again
        others = {s: x for s, x in again.items() if s not in affected}
        again = {s: x for s, x in again.items() if s in affected}
        after = [v for v in visits if v.start >= t - 60]
        closed = {v.session for v in after if v.failure and "connection closed" in v.failure and v.end >= t}
        survivors_lost = sorted(closed - on_ui) if kind == "ui" else sorted(closed)
        ready_fail = {name: sum(1 for (tt, kind_, src, ok, _) in k.results if tt >= t and kind_ == "readiness" and not ok)
                      for name, k in self.kubelets.items()}
        held = self.args.head_down_s if kind == "head" else 0.0
        # while the head was down (its hold), a device page cannot have been served: if one was, the measure is wrong
        down = [v for v in after if v.start >= t and v.epoch == epoch and v.end < t + held and v.ok and not v.lost
                and v.page != "connect"]
        served_down = [f"s{v.session} {Path(v.page).stem}" for v in down]
        every = max(again.values()) if len(again) == len(affected) else None
        return {"fault": kind, "what": what, "began_at": wall,  # time.time(): the request log's clock
                "learners_served_again": len(again), "learners": len(affected),
                "others_served_again_s": max(others.values(), default=None),
                "every_learner_served_again_s": every, "held_down_s": held,
                "served_again_after_started_again_s": every - held if every is not None else None,
                "device_pages_served_while_down": served_down,
                # what those pages showed (s after the fault, elements, their boxes): how the measure was wrong
                "served_while_down": [(s_, round(v.start - t, 1), round(v.end - t, 1), Path(v.page).stem, v.elements,
                                       [i[:120] for i in v.infos]) for s_, v in zip(served_down, down, strict=True)],
                "first_served_again_s": min(again.values(), default=None), "target_s": TARGETS.get(kind),
                # the last few learners served again: when their page began and ended (s after the fault), which page
                "last_served_again": [(s_, round(v.start - t, 1), round(v.end - t, 1), Path(v.page).stem, v.elements,
                                       [i[:80] for i in v.infos])
                                      for s_, v in sorted(first.items(), key=lambda kv: kv[1].end)[-5:]
                                      if s_ in affected],
                "sessions_lost_on_surviving_replicas": survivors_lost,
                "readiness_failures_after": {k: v for k, v in ready_fail.items() if v},
                "pages_that_said_lost": sum(v.lost for v in after if v.start >= t), "cpu_cores": cores,
                "pods_ready_again_s": {nm: k.time_to_ready(t) for nm, k in self.kubelets.items() if k.time_to_ready(t)},
                "timeline": timeline({nm: list(k.events) for nm, k in self.kubelets.items()},
                                     {p.name: (self.logs / f"{p.name}.log").read_text(errors="replace")
                                      for p in self.cluster.ui}, t, wall, max(again.values(), default=limit))}

    @staticmethod
    def _pod(k: Kubelet) -> dict:
        probes: dict[str, dict] = {}
        for _, kind, source, ok, _ in k.results:
            row = probes.setdefault(f"{kind} ({source})", {"passed": 0, "failed": 0})
            row["passed" if ok else "failed"] += 1
        return {"restarts": k.restarts, "init_exits": k.init_exits, "probes": probes, "ready": k.ready,
                "command": " ".join(k.pod.command)[:400]}


def check(report: dict) -> list[str]:
    """What misses the issue's targets (an empty list: all met)."""
    bad = []
    if not report["gate"]["as_it_should"]:
        bad.append(f"the GPU gate: {report['gate']}")
    g = report.get("gpus", {})
    if g and g["counted_by_ray"] != g["given_to_worker_pods"]:
        bad.append(f"Ray counts {g['counted_by_ray']} GPUs, the worker pods were given {g['given_to_worker_pods']} {g['said']}")
    target = None if report["fake_gpus"] else P95_ON_GPU[report["mode"]]
    classes = report.get("classes") or [report["class"]]
    for i, c in enumerate(classes):
        name = "class" if len(classes) == 1 else f"class {i + 1}"
        if c["errors"] or c["pages_served"] != c["pages_planned"]:
            bad.append(f"{name}: {c['errors']} errors, {c['pages_served']}/{c['pages_planned']} pages: {c['error_messages'][:3]}")
        if target and (c["p95_page_s"] is None or c["p95_page_s"] > target):
            bad.append(f"{name}: a page's p95 {c['p95_page_s']} s on the GPU, {report['mode']} shapes (target {target} s)")
    for f in report["faults"]:
        s = f["served_again_after_started_again_s"]  # the clock: from the (re)start of what was killed
        if f["target_s"] is not None and (s is None or s > f["target_s"]):
            bad.append(f"{f['fault']} fault: every learner served again {s} s after it was started again "
                       f"(target {f['target_s']} s)")
        if f["sessions_lost_on_surviving_replicas"]:
            bad.append(f"{f['fault']} fault: sessions lost on surviving replicas {f['sessions_lost_on_surviving_replicas']}")
        if f.get("device_pages_served_while_down"):
            bad.append(f"{f['fault']} fault: device pages served while Ray was down {f['device_pages_served_while_down'][:5]}")
        if f["fault"] == "head" and not any(n.startswith("ui-") for n in f["readiness_failures_after"]):
            bad.append("head fault: no UI replica's readiness said that Ray could not be reached")
    for name, p in report["pods"].items():
        if not p["ready"]:
            bad.append(f"{name} is not ready at the end")
    return bad


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ui", type=int, help="UI replicas (default: the Deployment's `replicas`)")
    ap.add_argument("--workers", type=int, default=2, help="device workers (GPU pods; fake GPUs without one)")
    ap.add_argument("--learners", type=int, default=20)
    ap.add_argument("--mode", choices=["shared", "own"], default="shared")
    ap.add_argument("--classes", type=int, default=1,
                    help="classes one after another on the same cluster before the faults (the first is the report's "
                         "`class`; every one in `classes`): a setting's p95 as several classes give it")
    ap.add_argument("--faults", nargs="*", default=["worker", "ui", "head"], choices=[*TARGETS, CONTROL, ACTOR],
                    help="the pods to kill after the classes (default: all three; `shapes`, the control, kills none and only "
                         "changes the shapes); --faults with no name kills none")
    ap.add_argument("--head-down-s", type=float, default=15.0,
                    help="how long the killed head stays down before its kubelet starts it again")
    ap.add_argument("--settle-s", type=float, default=120.0,
                    help="before each fault, wait at most this long for every learner to be served a round of the device "
                         "pages since the last one")
    ap.add_argument("--class-shapes", nargs="?", const="shared", default=None,
                    help="the instructor names the class's shapes on every UI pod (ATTNLAB_CLASS_SHAPES, as `kubectl set "
                         "env` would): 'shared' (the flag alone) the shapes of --mode shared's class, or the value itself; "
                         "default: the manifest's (none)")
    ap.add_argument("--overlay", type=Path, default=ROOT / "deploy" / "k8s-campus")
    ap.add_argument("--set-env", type=set_env, action="append", default=[], metavar="PODS:NAME=VALUE",
                    help="as `kubectl set env` would, on 'head', 'workers' or 'ui' (repeatable), e.g. "
                         "workers:ATTNLAB_WARM_BY_CLOCK=1: a setting's A/B without editing the manifests")
    ap.add_argument("--warm-wait-s", type=float, default=240.0,
                    help="at most this long, wait for the server's warm-up to finish before the class (0: no wait; "
                         "the timings then include it)")
    ap.add_argument("--rendered", type=Path, help="manifests already rendered (a machine without kubectl)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds allowed for one page")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--logs", type=Path)
    ap.add_argument("--sample-to", type=Path, help="py-spy records the device workers and UI pods here (scripts/samples.py)")
    ap.add_argument("--keep", action="store_true", help="keep the pods' folders")
    ap.add_argument("--check", action="store_true", help="exit 1 unless every target is met")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.sample_to and py_spy() is None:  # else every record fails quietly and the folders stay empty
        ap.error("--sample-to needs py-spy (pip install py-spy; on the GPU machine, .whl/bin from scripts/gpu_wheels.sh)")
    r = Rehearsal(args)
    try:
        report = r.run()
    finally:
        r.down()
    report["missed"] = check(report)
    text = json.dumps(report, indent=1, default=str)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    print(summary(report))
    return 1 if args.check and report["missed"] else 0


RAY_LINE = re.compile(r"^attnlab (\d\d):(\d\d):(\d\d): (.*)$")  # a UI's Ray client (attnlab/service/ray_workers.py)


def _short(text: str) -> str:
    """A kubelet event or a UI's Ray line, in a few words (a timeline's entry)."""
    text = re.sub(r" \(pid \d+\): .*", "", text)
    return re.sub(r" \(.*", "", text).removesuffix(";")[:60]


def timeline(events: dict[str, list[tuple[float, str]]], logs: dict[str, str], t: float, wall: float,
             until_s: float) -> list[tuple[float, str, str]]:
    """What each pod did after a fault at `t` (time.monotonic) = `wall` (time.time), in order: its kubelet's events
    (exited, started, ready, not ready) and, from a UI's log, its Ray client's lines (connection failed,
    reconnected), each as (seconds after the fault, pod, a few words), up to `until_s`. Where a head fault's minute
    goes: the head's restart, each raylet's exit, each UI's reconnect."""
    out = [(round(tt - t, 1), pod, _short(text)) for pod, evs in events.items() for tt, text in evs
           if 0 <= tt - t <= until_s and not text.startswith("init container")]
    day = time.localtime(wall)
    start = day.tm_hour * 3600 + day.tm_min * 60 + day.tm_sec + (wall % 1)
    for pod, text in logs.items():
        for line in text.splitlines():
            m = RAY_LINE.match(line)
            if m:
                at = (int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3]) - start + 1) % 86400 - 1  # (across midnight)
                if -1 < at <= until_s:  # the line's clock has whole seconds: one in the fault's own second counts
                    out.append((round(max(at, 0.0), 1), pod, _short(m[4])))
    return sorted(out)


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def summary(r: dict) -> str:
    c = r["class"]
    lines = [f"rehearsal: {r['ui_replicas']} UI replicas, {r['device_workers']} device workers"
             f"{' (fake GPUs)' if r['fake_gpus'] else ''}, {r['learners']} learners; every pod ready after "
             f"{r['ready_after_s']:.1f} s, warm and idle {r.get('warm_s', 0):.0f} s later{'' if r.get('warm_ups_ended', True) else ' (a warm-up had not ended)'}; gate: exit {r['gate']['exit']} ({'as it should' if r['gate']['as_it_should'] else 'WRONG'}); "
             f"Ray counts {r.get('gpus', {}).get('counted_by_ray')} GPUs, the worker pods were given {r.get('gpus', {}).get('given_to_worker_pods')}",
             f"class: {c['pages_served']}/{c['pages_planned']} pages, median {_s(c['median_page_s'])} s, p95 {_s(c['p95_page_s'])} s, "
             f"{c['errors']} errors, replicas {c['replicas']}"
             + (f"; cores busy: {', '.join(f'{g} {n:.1f}' for g, n in c['cpu_cores'].items())}" if c.get("cpu_cores") else "")]
    if len(r.get("classes", [])) > 1:
        p95s = [x["p95_page_s"] for x in r["classes"]]
        lines.append(f"classes: p95 {', '.join(_s(p) for p in p95s)} s (median {_s(statistics.median(p95s))} s); "
                     f"errors {sum(x['errors'] for x in r['classes'])}")
    for f in r["faults"]:
        settled = f.get("settled_before_s")
        aim = (f"target {f['target_s']} s" if f["target_s"] is not None else
               "no target: the control" if f["fault"] == CONTROL else "no target")
        lines.append(f"fault {f['fault']:6s} ({f['what']}; class settled {'never' if settled is None else f'{settled:.0f} s'} "
                     f"before it): every learner served again after "
                     f"{_s(f['every_learner_served_again_s'])} s, {_s(f['served_again_after_started_again_s'])} s after "
                     f"it was started again ({aim}), {f['learners_served_again']}/"
                     f"{f['learners']} learners, lost on survivors {f['sessions_lost_on_surviving_replicas']}, "
                     f"pages that said their work was lost {f.get('pages_that_said_lost', '-')}, "
                     f"readiness failures {f['readiness_failures_after']}")
        if f.get("last_served_again"):
            lines.append("  the last served again: " + ", ".join(f"learner {s_} on {page} (began {a:.1f} s, ended {b:.1f} s"
                                                          f"{'; ' + ' | '.join(more[-1][-2:]) if len(more) > 1 and more[-1] else ''})"
                                                          for s_, a, b, page, *more in f["last_served_again"]))
        for s_, a, b, page, n, boxes in f.get("served_while_down", []):
            lines.append(f"  served while Ray was down: {s_} on {page} (began {a:.1f} s, ended {b:.1f} s, {n} elements; "
                         f"{' | '.join(boxes) or 'no info or warning box'})")
        if f.get("cpu_cores"):
            lines.append("  cores busy meanwhile: " + ", ".join(f"{g} {c:.1f}" for g, c in f["cpu_cores"].items()))
        if f["fault"] == "head" and f.get("timeline"):
            lines.append("  after the kill: " + ", ".join(f"{at:.0f} s {pod} {what}" for at, pod, what in f["timeline"]))
    control = [f["every_learner_served_again_s"] for f in r["faults"] if f["fault"] == CONTROL]
    killed = [f["every_learner_served_again_s"] for f in r["faults"] if f["fault"] == "worker"]
    if control and killed and None not in control + killed:
        lines.append(f"the device worker's restart, less the control's new shapes (medians): "
                     f"{statistics.median(killed) - statistics.median(control):+.1f} s")
    for name, p in r["pods"].items():
        first = p.get("ready_after_s")
        lines.append(f"pod {name}: ready after {'never' if first is None else f'{first:.1f} s'}, restarts {p['restarts']}, "
                     f"probes {p['probes']}")
    lines.append("missed: " + ("; ".join(r["missed"]) if r["missed"] else "nothing"))
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
