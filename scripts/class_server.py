"""A class on a real server (scripts/capacity.py --serve K): serve.py started here, learners as
headless browser tabs (st_client.Tab) over Streamlit's websocket, from this process.

What the AppTest mode cannot show: the server as learners meet it (uvicorn, the websocket, Streamlit's
script runner and its messages, and `serve.py --workers K`, several processes behind one front),
with the learners' side (reading the messages) in another process, as browsers are.

Each class starts a fresh server (`python serve.py [--workers K]` on a free port) with an empty
results store (ATTNLAB_RESULTS_DIR in a fresh directory, as the GKE image sets it) and JAX's persistent compilation
cache in one directory for the whole benchmark (as the pod's /cache volume across restarts). The
server warms itself as it does for a class (one tab per worker opens the first page, which starts
the warm-up; then the benchmark waits until the server's processes are idle), then N tabs start
together, each visits the entry page with its shape's query string, then every page in app.py's
order from a random first one. A visit's time: request sent to the run's end, all elements in.

Server-side figures, read from /proc and nvidia-smi every half second while the class runs: CPU
seconds of the server's processes, their summed resident memory (peak), the GPU's memory in use
(peak, nvidia-smi: every process's CUDA context and allocator pool, not only live arrays) and its
mean utilisation; with several workers, the share of the class during which a timing held the
device alone (their lock file, sampled every 0.05 s).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import random
import re
import shutil
import signal
import socket
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from st_client import Tab  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(pid: int) -> list[int]:
    """pid and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _proc_sum(pids: list[int], file: str, value) -> float:
    """The sum over pids of value(the fields of /proc/<pid>/<file>); processes gone meanwhile count 0."""
    total = 0.0
    for p in pids:
        try:
            with open(f"/proc/{p}/{file}") as f:
                total += value(f.read())
        except (OSError, IndexError, ValueError):
            pass
    return total


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of these processes (fields 14 and 15 of /proc/<pid>/stat)."""
    return _proc_sum(pids, "stat", lambda text: sum(int(x) for x in text.rsplit(")", 1)[1].split()[11:13]) / TICK)


def rss_bytes(pids: list[int]) -> int:
    """Resident memory of these processes (/proc/<pid>/statm)."""
    return int(_proc_sum(pids, "statm", lambda text: int(text.split()[1]) * os.sysconf("SC_PAGE_SIZE")))


def gpu_now() -> tuple[int, int] | None:
    """(memory in use in bytes, utilisation %) of the GPU, from nvidia-smi; None without one."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,utilization.gpu", "--format=csv,noheader,nounits",
                              "-i", os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]],
                             capture_output=True, text=True, timeout=10).stdout
        used, busy = (int(x) for x in out.split(","))
        return used * 2**20, busy
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def held_alone(lock: str) -> bool | None:
    """Whether a server process holds the device alone now (a timing), None without the lock file
    (one process). Asks for the lock shared without waiting and gives it back at once."""
    try:
        with open(lock, "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
            return False
    except OSError:
        return None


def connections_to(ports: list[int]) -> list[int]:
    """Open TCP connections to each of these local ports now (Linux: /proc/net/tcp and tcp6)."""
    wanted, counts = {p: i for i, p in enumerate(ports)}, [0] * len(ports)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            port, state = int(fields[1].rsplit(":", 1)[1], 16), fields[3]
            if state == "01" and port in wanted:  # ESTABLISHED, on the worker's side
                counts[wanted[port]] += 1
    return counts


def worker_ports(log: Path) -> list[int]:
    """The worker ports `serve.py --workers K` announced last in its log ([] for one process)."""
    found = re.findall(r"serve\.py: \d+ workers \(ports ([\d, ]+)\)", log.read_text(errors="replace"))
    return [int(p) for p in found[-1].split(", ")] if found else []


class Watch:
    """While a class runs: peaks of the server's resident memory and the GPU's memory, the GPU's
    mean utilisation (nvidia-smi, every `every` s), how often a timing held the device alone
    (the lock file of `serve.py --workers`, every 0.05 s), and the most connections each worker
    held at once (its learners' websockets: how evenly the front spread the class)."""

    def __init__(self, pid: int, lock: str, every: float = 0.5, ports: list[int] | None = None):
        self.pid, self.lock, self.every, self.ports = pid, lock, every, ports or []
        self.per_worker_peak = [0] * len(self.ports)
        self.rss_peak, self.gpu_peak, self.gpu_busy = 0, None, []
        self.alone = [0, 0]  # samples held alone, samples
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, daemon=True),
                         threading.Thread(target=self._locks, daemon=True)]

    def __enter__(self) -> Watch:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    @property
    def alone_share(self) -> float | None:
        return self.alone[0] / self.alone[1] if self.alone[1] else None

    def _loop(self) -> None:
        while True:
            self.rss_peak = max(self.rss_peak, rss_bytes(tree(self.pid)))
            if self.ports:
                self.per_worker_peak = list(map(max, self.per_worker_peak, connections_to(self.ports)))
            g = gpu_now()
            if g is not None:
                self.gpu_peak = max(self.gpu_peak or 0, g[0])
                self.gpu_busy.append(g[1])
            if self._stop.wait(self.every):
                return

    def _locks(self) -> None:
        while not self._stop.wait(0.05):
            alone = held_alone(self.lock)
            if alone is not None:
                self.alone[0] += alone
                self.alone[1] += 1


class Server:
    """`python serve.py [--workers K]` on a free port, with a fresh results store."""

    def __init__(self, workers: int, compile_cache: Path, log: Path, label: str = "class"):
        self.workers, self.port = workers, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.home = Path(tempfile.mkdtemp(prefix="attnlab-home-"))
        env = dict(os.environ, HOME=str(self.home), ATTNLAB_WARM="1", ATTNLAB_RESULTS_DIR=str(self.home / "results"),
                   STREAMLIT_GLOBAL_DEVELOPMENT_MODE="false",  # Streamlit outside site-packages (a carried wheel) assumes it
                   JAX_COMPILATION_CACHE_DIR=str(compile_cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0", XLA_PYTHON_CLIENT_PREALLOCATE="false")
        if env.get("ATTNLAB_SAMPLE_TO"):  # each class's samples in a folder of its own
            env["ATTNLAB_SAMPLE_TO"] = str(Path(env["ATTNLAB_SAMPLE_TO"]) / label)
        cmd = [sys.executable, str(ROOT / "serve.py"), "--server.port", str(self.port), "--server.headless", "true"]
        cmd += ["--workers", str(workers)] if workers > 1 else []
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def healthy(self, timeout: float = 180.0) -> float:
        start = time.perf_counter()
        while time.perf_counter() - start < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        return time.perf_counter() - start
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"no healthy server after {timeout:.0f} s")

    def warm(self, idle_cores: float = 0.15, quiet_s: float = 3.0, timeout: float = 240.0) -> float:
        """Open the first page once on every worker (the app then warms itself), wait until idle."""
        start = time.perf_counter()

        async def first_pages() -> None:
            tabs = [await Tab.open(self.url) for _ in range(self.workers)]  # held open: one per worker
            await asyncio.gather(*(t.visit("", "") for t in tabs))
            for t in tabs:
                await t.close()

        asyncio.run(first_pages())
        quiet_since, last = None, cpu_s(tree(self.proc.pid))
        while time.perf_counter() - start < timeout:
            time.sleep(0.5)
            now = cpu_s(tree(self.proc.pid))
            busy, last = (now - last) / 0.5, now
            if busy < idle_cores:
                quiet_since = quiet_since or time.perf_counter()
                if time.perf_counter() - quiet_since >= quiet_s:
                    break
            else:
                quiet_since = None
        return time.perf_counter() - start

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self.home, ignore_errors=True)


async def _learner(i: int, url: str, query: str, pages: list[tuple[str, str]], first: int, timeout: float,
                   visits: list[dict[str, Any]]) -> None:
    try:
        tab = await Tab.open(url)
    except Exception as e:
        visits.append({"session": i, "page": "entry", "wall_s": 0.0, "ok": False, "exceptions": [],
                       "error_boxes": [], "failure": f"no websocket: {type(e).__name__}: {e}"})
        return
    try:
        for file, path in [("entry", "")] + pages[first:] + pages[:first]:
            seen = await tab.visit(path, query, timeout)
            visits.append({"session": i, "page": file, "wall_s": seen.wall_s, "ok": seen.ok,
                           "exceptions": seen.exceptions, "error_boxes": seen.error_boxes, "failure": seen.failure})
    finally:
        await tab.close()


async def _class(url: str, shapes, pages, firsts, timeout: float, deadline_s: float, visits) -> tuple[float, int]:
    start = time.perf_counter()
    tasks = [asyncio.create_task(_learner(i, url, urlencode(shape), pages, firsts[i], timeout, visits))
             for i, shape in enumerate(shapes)]
    limit = deadline_s or (len(pages) + 1) * timeout + 60
    done, pending = await asyncio.wait(tasks, timeout=limit)
    for t in pending:
        t.cancel()
    return time.perf_counter() - start, len(pending)


def run_served(n: int, mode: str, workers: int, timeout: float, seed: int, deadline_s: float, variant: int,
               compile_cache: Path, log: Path, session_shapes, page_paths, percentile) -> dict[str, Any]:
    """One class of `n` learners on a fresh server of `workers` processes; figures as capacity.run_one's."""
    rng = random.Random(seed + n)
    pages = list(page_paths().items())
    shapes = session_shapes(mode, n, rng, variant)
    firsts = [rng.randrange(len(pages)) for _ in range(n)]
    server = Server(workers, compile_cache, log, label=f"{n}-{mode}-{workers}proc")
    try:
        start_s = server.healthy()
        warm_s = server.warm()
        visits: list[dict[str, Any]] = []
        pids = tree(server.proc.pid)
        cpu0 = cpu_s(pids)
        with Watch(server.proc.pid, os.path.join(tempfile.gettempdir(), f"attnlab-device-{server.port}.lock"),
                   ports=worker_ports(log)) as watch:
            elapsed, stuck = asyncio.run(_class(server.url, shapes, pages, firsts, timeout, deadline_s, visits))
        cpu = cpu_s(tree(server.proc.pid)) - cpu0
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
    per_page = {}
    for file, _ in pages:
        t = [v["wall_s"] for v in page_visits if v["page"] == file and v["ok"]]
        per_page[file] = {"served": len(t), "median_s": statistics.median(t) if t else None,
                          "worst_s": max(t) if t else None}
    return {
        "sessions": n, "mode": mode, "workers": workers, "seed": seed, "timeout_s": timeout, "press_buttons": False,
        "pages": [f for f, _ in pages], "pages_planned": n * len(pages), "pages_served": sum(v["ok"] for v in page_visits),
        "entry_runs_ok": len(entry), "entry_median_s": statistics.median(entry) if entry else None,
        "median_page_s": statistics.median(times) if times else None,
        "p95_page_s": percentile(times, 95), "worst_page_s": max(times) if times else None,
        "longest_queue_wait_s": None, "queue_wait_source": "n/a (a real server: its queue is not read from outside)",
        "gpu": {"backend": "gpu" if watch.gpu_peak is not None else "n/a", "peak_bytes_in_use": watch.gpu_peak,
                "source": "nvidia-smi memory.used",
                "mean_utilisation_pct": statistics.mean(watch.gpu_busy) if watch.gpu_busy else None},
        "device_held_alone_share": watch.alone_share, "connections_per_worker_peak": watch.per_worker_peak,
        "peak_rss_bytes": watch.rss_peak, "elapsed_s": elapsed, "warm_s": warm_s, "start_s": start_s,
        "cpu_s": cpu, "max_runs": os.environ.get("ATTNLAB_MAX_RUNS", "0"),
        "errors": len(messages), "failures": sum(v["failure"] is not None for v in visits) + stuck,
        "exceptions": sum(len(v["exceptions"]) for v in visits), "error_boxes": sum(len(v["error_boxes"]) for v in visits),
        "error_messages": messages, "per_page": per_page, "shapes": shapes,
        "first_pages": [pages[f][0] for f in firsts], "visits": visits, "profile": None,
    }
