"""A class on a real server (scripts/capacity.py --serve K): K UI processes and their device worker(s)
started here, learners as headless browser tabs (st_client.Tab) over Streamlit's websocket, from this process.

The server, as it is hosted (deploy/README.md): K UI processes (`python serve.py`, each on a port of its
own, as the Deployment's replicas are) that never touch the GPU, and the device work either in the
embedded child process (`--device child`, K = 1: what `make run` starts) or in W device workers on Ray
(`--device ray`: a Ray head started here with `ray start`, one worker per GPU, or per fake GPU on a
CPU). Each learner is given to one UI process (round robin: what the Ingress's cookie affinity does to
a class arriving at once) and keeps it. JAX's persistent compilation cache is one directory for the whole
benchmark (the worker pod's cache volume across restarts).

Each class starts fresh: the UI processes, the device workers, no results kept. The server warms itself
as it does for a class (a tab per UI process opens the first page, which starts the warm-up; then the
benchmark waits until the server's processes are idle), then N tabs start together, each visits the entry
page with its shape's query string, then every page in app.py's order from a random first one. A visit's
time: request sent to the run's end, all elements in.

Read every half second while the class runs (psutil, nvidia-smi): CPU seconds and summed resident memory
(peak) of the server's processes (the UI processes, their children, and Ray's processes), each GPU's
memory in use (peak) and utilisation (mean). The device workers' own figures at the end: the share of the
class a run held each device (from `admission.DEVICE.stats`), requests served, kept results reused.
With ATTNLAB_SAMPLE_TO=DIR, py-spy records where every thread of the server waits while the class runs
(`Server.sampled`; `python scripts/samples.py DIR` sums it up).

`kill_after_s`: the fault test. That many seconds into the class one device worker is killed (SIGKILL, as
the kernel's OOM killer or a native abort would end it); reported: sessions lost (a learner whose
websocket closed), pages that said their request was lost, and how soon after the kill pages that needed
the device were served again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from attnlab import procs  # noqa: E402
from attnlab.procs import Record, free_port, tree  # noqa: E402
from pages.st_client import Tab  # noqa: E402


def python_path() -> str:
    """This repository first on the path, then whatever the caller had there (carried wheels)."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))


RAY_PROCESS = ("ray::", "raylet", "gcs_server", "ray/_private", "ray/dashboard", "ray/autoscaler")


def gpus_now() -> list[tuple[int, int]]:
    """(memory in use in bytes, utilisation %) of every GPU, from nvidia-smi; [] without one."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,utilization.gpu", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return [(int(a) * 2**20, int(b)) for a, b in (line.split(",") for line in out.strip().splitlines())]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []


def is_ray(p: psutil.Process) -> bool:
    try:
        line = " ".join(p.cmdline())
    except (psutil.Error, OSError):
        return False
    return any(k in line for k in RAY_PROCESS)


def device_workers() -> list[psutil.Process]:
    """The device worker processes on this machine that hold a device: the app's child workers and those of Ray's
    DeviceActors, their spares left out (attnlab.procs.device_workers)."""
    return procs.device_workers(list(psutil.process_iter()))


class Watch:
    """While a class runs: the server's CPU seconds and resident memory (peak), each GPU's memory (peak)
    and utilisation (mean). On psutil (attnlab.procs.tree) and nvidia-smi; what they do not do, done here:
    one server as the UI processes' trees plus Ray's processes, and CPU seconds that keep what a process
    that ended meanwhile (a killed worker) had spent."""

    def __init__(self, roots: list[int], every: float = 0.5, with_ray: bool = True):
        self.roots, self.every, self.with_ray = roots, every, with_ray
        self.rss_peak, self.gpu_peak, self.gpu_busy = 0, [], []
        self._cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def processes(self) -> list[psutil.Process]:
        found = {q.pid: q for pid in self.roots for q in tree(pid)}
        workers = None if self.with_ray else {q.pid for q in device_workers()}
        for p in psutil.process_iter():
            if p.pid not in found and is_ray(p) and (workers is None or p.pid in workers):
                found[p.pid] = p
        return list(found.values())

    def cpu_s(self) -> float:
        """CPU seconds of the server's processes, those that ended meanwhile included (as last seen)."""
        for p in self.processes():
            try:
                t = p.cpu_times()
                self._cpu[p.pid] = t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                pass
        return sum(self._cpu.values())

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            rss = 0
            for p in self.processes():
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            self.rss_peak = max(self.rss_peak, rss)
            g = gpus_now()
            if g:
                self.gpu_peak = [max(a, b[0]) for a, b in zip(self.gpu_peak or [0] * len(g), g, strict=True)]
                self.gpu_busy.append([b for _, b in g])
            self.cpu_s()
            if self._stop.wait(self.every):
                return


class RayHead:
    """`ray start --head` on free ports, with `gpus` GPUs (real ones where the machine has them, else fake
    ones: each device worker then runs JAX on the CPU); its workers run with `env`."""

    def __init__(self, gpus: int, env: dict[str, str], fake: bool):
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = env
        ray = str(Path(sys.executable).with_name("ray"))
        cmd = [ray if Path(ray).exists() else "ray", "start", "--head", f"--port={self.port}", f"--num-gpus={gpus}",
               "--include-dashboard=false", "--disable-usage-stats"]
        if fake:
            cmd.append(f"--num-cpus={max(2, os.cpu_count() or 2)}")
        self.cmd = cmd
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        if out.returncode != 0:
            raise RuntimeError(f"ray start failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")

    def stop(self) -> None:
        subprocess.run([self.cmd[0], "stop", "--force"], env=self.env, capture_output=True, timeout=120)


def warm_ups_ended(log: Path, offset: int) -> int:
    """How many app warm-ups logged their end (attnlab.studies.warm.DONE or STOPPED) in `log` after byte `offset`."""
    from attnlab.studies import warm

    try:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return 0
    return sum(warm.DONE in line or warm.STOPPED in line for line in text.splitlines())


def wait_for_warm_ups(logs: list[tuple[Path, int, int]], deadline: float, clock=time.monotonic) -> bool:
    """Until each (log, offset, count) has `count` warm-ups ended after its offset, or `clock()` passes `deadline`;
    whether all had. A class arrives after its server has warmed (the runbook's step 1 is 30 minutes ahead): idle
    processes alone do not say so, as the warm-up waits for quiet between its shapes (on the H200 a rehearsal's class
    once began in such a pause, before pages 6 and 7 had been asked for)."""
    while True:
        if all(warm_ups_ended(log, offset) >= count for log, offset, count in logs):
            return True
        if clock() >= deadline:
            return False
        time.sleep(0.5)


class Server:
    """K UI processes (`python serve.py`) and the device: the embedded child (K = 1) or W workers on Ray."""

    def __init__(self, ui: int, device: str, device_workers: int, compile_cache: Path, log: Path,
                 label: str = "class"):
        if device == "child" and ui != 1:
            raise ValueError("the embedded child worker belongs to one UI process: use --device ray with --serve K > 1")
        self.ui, self.device, self.device_workers = ui, device, device_workers
        self.home = Path(tempfile.mkdtemp(prefix="attnlab-home-"))
        self._log = open(log, "ab")
        gpus = len(gpus_now())
        self.fake = gpus == 0
        env = dict(os.environ, HOME=str(self.home), ATTNLAB_WARM="1", PYTHONPATH=python_path(),
                   STREAMLIT_GLOBAL_DEVELOPMENT_MODE="false",  # Streamlit outside site-packages (a carried wheel) assumes it
                   JAX_COMPILATION_CACHE_DIR=str(compile_cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0", XLA_PYTHON_CLIENT_PREALLOCATE="false",
                   # every turn, tuned build and timing of the device workers (issue 41's check), and their requests
                   ATTNLAB_TIMING_LOG=str(self.home / "spans.log"), ATTNLAB_REQUEST_LOG=str(self.home / "requests.jsonl"))
        self.samples = Path(env["ATTNLAB_SAMPLE_TO"]) / label if env.get("ATTNLAB_SAMPLE_TO") else None
        self.ray = None
        if device == "ray":
            if not self.fake and device_workers > gpus:
                raise ValueError(f"{device_workers} device workers asked for, this machine has {gpus} GPUs")
            import serve

            worker_env = {**env, "XLA_FLAGS": serve.server_xla_flags(env.get("XLA_FLAGS", ""))}
            if self.fake:
                worker_env["JAX_PLATFORMS"] = "cpu"
            self.ray = RayHead(device_workers, worker_env, self.fake)
            env.update(ATTNLAB_DEVICE="ray", ATTNLAB_RAY_ADDRESS=self.ray.address,
                       ATTNLAB_DEVICE_WORKERS=str(device_workers))
        else:
            env["ATTNLAB_DEVICE"] = "child"
        self.ports = [free_port() for _ in range(ui)]
        self.urls = [f"http://127.0.0.1:{p}" for p in self.ports]
        self.procs = [subprocess.Popen([sys.executable, str(ROOT / "serve.py"), "--server.port", str(p),
                                        "--server.headless", "true"], cwd=ROOT, env=env, stdout=self._log,
                                       stderr=subprocess.STDOUT, start_new_session=True) for p in self.ports]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def sampled(self) -> Record | contextlib.nullcontext:
        """With ATTNLAB_SAMPLE_TO=DIR: py-spy records the UI processes (their child worker with them) and the
        Ray device workers into DIR/<class>/pyspy-<pid>.txt while the class runs (scripts/samples.py reads them)."""
        if self.samples is None:
            return contextlib.nullcontext()
        ours = {q.pid for pid in self.pids for q in tree(pid)}
        return Record(self.pids + [p.pid for p in device_workers() if p.pid not in ours], folder=self.samples)

    def healthy(self, timeout: float = 240.0) -> float:
        start = time.perf_counter()
        waiting = list(self.urls)
        while waiting and time.perf_counter() - start < timeout:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a UI process exited with {p.returncode}")
            for url in list(waiting):
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                        if r.status == 200:
                            waiting.remove(url)
                except OSError:
                    pass
            time.sleep(0.2)
        if waiting:
            raise RuntimeError(f"no healthy server after {timeout:.0f} s")
        return time.perf_counter() - start

    def warm(self, watch_roots: list[int], idle_cores: float = 0.15, quiet_s: float = 3.0, timeout: float = 120.0) -> float:
        """Open the first page once on every UI process (the app then warms the device workers), wait until every one
        has logged the end of its warm-up, then until idle (`timeout` in all)."""
        start = time.perf_counter()
        self._log.flush()
        offset = Path(self._log.name).stat().st_size

        async def first_pages() -> None:
            tabs = [await Tab.open(url) for url in self.urls]
            await asyncio.gather(*(t.visit("", "", 300) for t in tabs))
            for t in tabs:
                await t.close()

        asyncio.run(first_pages())
        self.warm_ups_ended = wait_for_warm_ups([(Path(self._log.name), offset, self.ui)], start + timeout, time.perf_counter)
        # idle: the UI processes and the device workers (Ray's own control plane keeps a little CPU busy forever)
        w = Watch(watch_roots, with_ray=False)
        quiet_since, last = None, w.cpu_s()
        while time.perf_counter() - start < timeout:
            time.sleep(0.5)
            now = w.cpu_s()
            busy, last = (now - last) / 0.5, now
            if busy < idle_cores:
                quiet_since = quiet_since or time.perf_counter()
                if time.perf_counter() - quiet_since >= quiet_s:
                    break
            else:
                quiet_since = None
        return time.perf_counter() - start

    def worker_figures(self) -> list[dict]:
        """Each device worker's own figures, asked through the service as a UI process would."""
        code = ("import json, os; from attnlab import service; "
                "print(json.dumps([dict(name=i.name, pid=i.pid, busy_share=i.busy_share, served=i.served, "
                "kept_hits=i.kept_hits, device=i.device.device_kind) for i in service.workers()]))")
        if self.device != "ray":
            return []  # the child belongs to its UI process; its figures are not asked from outside
        env = dict(os.environ, PYTHONPATH=python_path(), ATTNLAB_DEVICE="ray", ATTNLAB_RAY_ADDRESS=self.ray.address,
                   ATTNLAB_DEVICE_WORKERS=str(self.device_workers), JAX_PLATFORMS="cpu")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        try:
            import json

            return json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return [{"error": out.stderr[-500:]}]

    def device_rule(self) -> dict[str, Any]:
        """Did every timing have its GPU to itself (load_test.device_rule), and did any request meet the device rule's
        refusal (admission.OutsideTurn, in the workers' request log)?"""
        import load_test

        rule = load_test.device_rule(self.home / "spans.log")
        log = self.home / "requests.jsonl"
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.is_file() else []
        rule["requests"] = len(lines)
        rule["timed_requests"] = sum(bool(x.get("timed")) for x in lines)
        rule["outside_turn_refusals"] = sum(x.get("error") == "OutsideTurn" for x in lines)
        return rule

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if self.ray is not None:
            self.ray.stop()
        self._log.close()
        shutil.rmtree(self.home, ignore_errors=True)


async def _learner(i: int, url: str, query: str, pages: list[tuple[str, str]], first: int, timeout: float,
                   visits: list[dict[str, Any]], lost: list[int], think_s: float = 0.0) -> None:
    """One learner: the entry page, then every page from `first` on; after each, `think_s` on average (0.5-1.5x,
    the learner's own random draws) reading it, as a class does (0: the next page at once, the heaviest class)."""
    reading = random.Random(i)
    try:
        tab = await Tab.open(url)
    except Exception as e:
        visits.append({"session": i, "page": "entry", "wall_s": 0.0, "ok": False, "exceptions": [],
                       "error_boxes": [], "warnings": [], "failure": f"no websocket: {type(e).__name__}: {e}",
                       "start": time.monotonic(), "end": time.monotonic()})
        lost.append(i)
        return
    try:
        for file, path in [("entry", "")] + pages[first:] + pages[:first]:
            t0 = time.monotonic()
            seen = await tab.visit(path, query, timeout)
            visits.append({"session": i, "page": file, "wall_s": seen.wall_s, "ok": seen.ok,
                           "exceptions": seen.exceptions, "error_boxes": seen.error_boxes, "warnings": seen.warnings,
                           "failure": seen.failure, "start": t0, "end": time.monotonic()})
            if seen.failure and "connection closed" in seen.failure:
                lost.append(i)
                return
            if think_s:
                await asyncio.sleep(reading.uniform(0.5, 1.5) * think_s)
    finally:
        await tab.close()


def _kill_one_worker(after_s: float, start: float, killed: list) -> None:
    time.sleep(max(0.0, after_s - (time.monotonic() - start)))
    workers = device_workers()
    if workers:
        victim = workers[0]
        killed.append((time.monotonic(), victim.pid))
        os.kill(victim.pid, signal.SIGKILL)


async def _class(urls: list[str], shapes, pages, firsts, timeout: float, deadline_s: float, visits, lost,
                 kill_after_s: float, killed: list, hostile_every_s: float = 0.0,
                 presses: list | None = None, think_s: float = 0.0) -> tuple[float, int, float]:
    start = time.monotonic()
    if kill_after_s:
        threading.Thread(target=_kill_one_worker, args=(kill_after_s, start, killed), daemon=True).start()
    stop, bad = asyncio.Event(), None
    if hostile_every_s:  # one more learner, pressing Check on the hostile corpus the whole class long
        from hostile_learner import hostile

        bad = asyncio.create_task(hostile(urls[-1], urlencode(shapes[0]), hostile_every_s, stop, timeout))
    tasks = [asyncio.create_task(_learner(i, urls[i % len(urls)], urlencode(shape), pages, firsts[i], timeout, visits,
                                          lost, think_s)) for i, shape in enumerate(shapes)]
    limit = deadline_s or (len(pages) + 1) * (timeout + 1.5 * think_s) + 60
    done, pending = await asyncio.wait(tasks, timeout=limit)
    for t in pending:
        t.cancel()
    if bad is not None:
        stop.set()
        presses.extend(await bad)
    return time.monotonic() - start, len(pending), start


def run_served(n: int, mode: str, ui: int, timeout: float, seed: int, deadline_s: float, variant: int,
               compile_cache: Path, log: Path, session_shapes, page_paths, percentile, *, device: str = "child",
               device_workers: int = 1, kill_after_s: float = 0.0, hostile_every_s: float = 0.0,
               think_s: float = 0.0) -> dict[str, Any]:
    """One class of `n` learners on a fresh server of `ui` UI processes; figures as capacity.run_one's."""
    rng = random.Random(seed + n)
    pages = list(page_paths().items())
    shapes = session_shapes(mode, n, rng, variant)
    firsts = [rng.randrange(len(pages)) for _ in range(n)]
    server = Server(ui, device, device_workers, compile_cache, log, label=f"{n}-{mode}-{ui}ui-{device_workers}dev")
    visits: list[dict[str, Any]] = []
    lost: list[int] = []
    killed: list = []
    presses: list[dict[str, Any]] = []
    try:
        start_s = server.healthy()
        warm_s = server.warm(server.pids)
        with Watch(server.pids) as watch, server.sampled() as sampled:
            cpu0 = watch.cpu_s()
            elapsed, stuck, class_start = asyncio.run(_class(server.urls, shapes, pages, firsts, timeout, deadline_s,
                                                             visits, lost, kill_after_s, killed,
                                                             hostile_every_s, presses, think_s))
            cpu = watch.cpu_s() - cpu0
        if getattr(sampled, "error", None):
            print(f"ATTNLAB_SAMPLE_TO: no samples ({sampled.error})", file=sys.stderr, flush=True)
        workers = server.worker_figures()
        device_rule = server.device_rule()
    finally:
        server.stop()
    page_visits = [v for v in visits if v["page"] != "entry"]
    times = [v["wall_s"] for v in page_visits if v["ok"]]
    entry = [v["wall_s"] for v in visits if v["page"] == "entry" and v["ok"]]
    messages = []
    for v in visits:
        tag = f"[s{v['session']} {Path(v['page']).stem}]"
        messages += [f"{tag} run failed: {v['failure']}"] if v["failure"] else []
        messages += [f"{tag} exception: {m}" for m in v["exceptions"]]
        messages += [f"{tag} error box: {m}" for m in v["error_boxes"]]
    messages += [f"{stuck} sessions still running after {elapsed:.0f} s"] if stuck else []
    lost_pages = [v for v in visits if any("was lost" in w or "device worker" in w.lower() for w in v["warnings"])]
    fault = None
    if kill_after_s:
        fault = {"killed_at_s": (killed[0][0] - class_start) if killed else None, "killed_pid": killed[0][1] if killed
                 else None, "sessions_lost": len(set(lost)), "pages_that_said_lost": len(lost_pages)}
        if killed:
            t_kill = killed[0][0]
            again = {}  # each learner's first page served whole after the kill
            for v in sorted(page_visits, key=lambda v: v["end"]):
                if v["ok"] and v["start"] >= t_kill and v not in lost_pages:
                    again.setdefault(v["session"], v["end"] - t_kill)
            fault["first_page_served_after_kill_s"] = min(again.values(), default=None)
            fault["every_learner_served_again_within_s"] = max(again.values(), default=None)
            fault["learners_served_again"] = len(again)
    per_page = {}
    for file, _ in pages:
        t = [v["wall_s"] for v in page_visits if v["page"] == file and v["ok"]]
        per_page[file] = {"served": len(t), "median_s": statistics.median(t) if t else None,
                          "worst_s": max(t) if t else None}
    busy = [statistics.mean(col) for col in zip(*watch.gpu_busy, strict=True)] if watch.gpu_busy else []
    return {
        "sessions": n, "mode": mode, "ui_processes": ui, "device": device, "device_workers": device_workers,
        "fake_gpus": server.fake and device == "ray", "seed": seed, "timeout_s": timeout, "press_buttons": False,
        "think_s": think_s,
        "pages": [f for f, _ in pages], "pages_planned": n * len(pages), "pages_served": sum(v["ok"] for v in page_visits),
        "entry_runs_ok": len(entry), "entry_median_s": statistics.median(entry) if entry else None,
        "median_page_s": statistics.median(times) if times else None,
        "p95_page_s": percentile(times, 95), "worst_page_s": max(times) if times else None,
        "pages_per_s": len(times) / elapsed if elapsed else None,
        "longest_queue_wait_s": None, "queue_wait_source": "n/a (a real server: read from the workers' figures)",
        "gpu": {"backend": "gpu" if watch.gpu_peak else "n/a", "peak_bytes_in_use": max(watch.gpu_peak, default=None),
                "per_gpu_peak_bytes": watch.gpu_peak, "source": "nvidia-smi memory.used and utilization.gpu",
                "mean_utilisation_pct": statistics.mean(busy) if busy else None, "per_gpu_utilisation_pct": busy},
        "workers": workers, "device_rule": device_rule, "fault": fault, "hostile": _hostile_figures(presses) if hostile_every_s else None,
        "peak_rss_bytes": watch.rss_peak, "elapsed_s": elapsed, "warm_s": warm_s, "warm_ups_ended": server.warm_ups_ended, "start_s": start_s,
        "cpu_s": cpu, "errors": len(messages), "failures": sum(v["failure"] is not None for v in visits) + stuck,
        "exceptions": sum(len(v["exceptions"]) for v in visits), "error_boxes": sum(len(v["error_boxes"]) for v in visits),
        "error_messages": messages, "per_page": per_page, "shapes": shapes,
        "first_pages": [pages[f][0] for f in firsts], "visits": visits, "profile": None,
    }


def _hostile_figures(presses: list[dict[str, Any]]) -> dict[str, Any]:
    """What the hostile learner's presses showed: how many, what each said (counted), its exceptions."""
    said: dict[str, int] = {}
    for p in presses:
        said[p["said"]] = said.get(p["said"], 0) + 1
    return {"presses": len(presses), "said": said, "exceptions": sum(len(p["exceptions"]) for p in presses),
            "median_press_s": statistics.median([p["wall_s"] for p in presses]) if presses else None}
