#!/usr/bin/env python
"""Class capacity (issue 11): N learner sessions at once against one process, every page each.

    python scripts/capacity.py                                  # 20 sessions, shapes shared as in a class
    python scripts/capacity.py --sessions 10 20 40 --mode own   # every session its own small shape
    python scripts/capacity.py --sessions 2 --json artifacts/capacity.json --press-buttons

Each session is one `streamlit.testing.v1.AppTest` of app.py, run in its own thread of this one
process. AppTest runs the page scripts in-process, so st.cache_data / st.cache_resource and the
device queue are shared by all sessions, as on a real server (what AppTest does not have: the
websocket, the browser, rerun-on-interrupt; scripts/load_test.py covers those with Chromium).

A session sets its shape through the URL's query parameters (`at.query_params`), runs the entry
point once (Streamlit serves the default page there: recorded as the session's "entry" run, not as
one of its pages), then visits every page named by app.py's `st.Page("pages/...py", ...)` entries,
in app.py's order, starting at a random one. Pages are found by reading app.py, so pages added
later are visited too. All sessions start together (a barrier).

Shapes (`--mode`):
  shared  five shapes shared among the sessions, as in a class working through the codelab: the
          default (B4 T128 N8 H64 float32) and four small variants, one a bf16 causal GQA.
  own     every session its own distinct small shape (q_len = kv_len from a spread of values,
          heads / kv_heads / head_dim / dtype / causal varied too): nothing is shared in caches.

Each N of `--sessions` runs in a fresh subprocess by default, so every N is a cold start (empty
caches, nothing compiled, GPU memory peak counted from zero). `--in-process` runs the N values one
after another in this process instead: later N then find the caches warm, as a server that has
been up a while would.

Recorded per page visit: wall seconds, exceptions (at.exception), error boxes (st.error), and any
failure of the run itself (a timeout). Printed per N: one summary line; at the end a table of
pages served/planned, median / 95th-percentile / worst page time, longest queue wait, GPU memory
peak (jax memory_stats peak_bytes_in_use, on a GPU), process peak RSS, and errors (count and the
first three messages). A page is served when its run finished without an exception.

AppTest is meant for one test at a time; `server_like_apptest()` patches it in this process so
that sessions in threads share one Runtime and one ScriptCache, as a server's sessions do (without
it, sessions break each other: see its docstring). `--raw-apptest` leaves AppTest as it is.

`--deadline S` reports after S seconds of class time even if sessions are still running (their
unvisited pages count as not served); `--clear-between` (with --in-process) clears every cached
result between N values, keeping compiled programs, as a server that has been up a while;
`--dump-after S` prints every thread's stack once after S seconds (where a slow run waits).

Longest wait for the device and the peak bytes of one run: the device's own statistics
(`attnlab.admission.DEVICE.stats`, the in-process worker's), reset at the start of each run.

`--serve K`: the class on a real server instead (scripts/class_server.py): K UI processes, the device work in
the embedded child (`--device child`, K = 1) or in W device workers on a Ray head started here (`--device ray
--device-workers W ...`, one per GPU; on a machine without GPUs, fake GPUs: each worker on the CPU);
`--kill-after S` kills one device worker S seconds into each class (the fault test); `--hostile-every S` adds
a learner pressing Check on issue 44's hostile corpus every S seconds (scripts/hostile_learner.py); `--think S`
makes each learner read each page about S seconds before the next (a class of minutes, as a real one).

Exit status: 0 when every planned page was served with no errors, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import faulthandler
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"

# The codelab's shape (no query parameters) and four small variants, one a bf16 causal GQA.
SHARED_SHAPES: list[dict[str, str]] = [
    {},
    {"batch": "1", "heads": "1", "kv_heads": "1"},
    {"batch": "2", "q_len": "64", "kv_len": "64"},
    {"batch": "1", "q_len": "96", "kv_len": "96", "heads": "4", "kv_heads": "2", "head_dim": "32"},
    {"batch": "1", "q_len": "64", "kv_len": "64", "heads": "8", "kv_heads": "2", "dtype": "bfloat16", "causal": "true"},
]


def class_shapes(value: str) -> str:
    """ATTNLAB_CLASS_SHAPES for --class-shapes: 'shared' is SHARED_SHAPES, each as its link's query ("?" alone: the
    codelab's); anything else is taken as the value itself."""
    return " ".join("?" + urlencode(s) for s in SHARED_SHAPES) if value == "shared" else value


# Buttons pressed with --press-buttons: main-area buttons of type primary, or keyed "..._time".
PRESS_KEY_SUFFIXES = ("_time",)


def own_shape(i: int, variant: int = 0) -> dict[str, str]:
    """Session i's own shape: q_len = kv_len = 24 + 8 i (distinct for every i), other fields varied;
    another `variant` changes the batch, so a later class compiles shapes of its own too."""
    t = 24 + 8 * i
    heads, kv_heads = [(4, 4), (4, 2), (8, 2), (2, 1)][i % 4]
    return {"batch": str(1 + i % 2 + 2 * variant), "q_len": str(t), "kv_len": str(t), "heads": str(heads),
            "kv_heads": str(kv_heads), "head_dim": str((32, 64, 16)[i % 3]),
            "dtype": ("float32", "bfloat16")[(i // 2) % 2], "causal": ("false", "true")[(i // 3) % 2]}


def session_shapes(mode: str, n: int, rng: random.Random, variant: int = 0) -> list[dict[str, str]]:
    if mode == "shared":
        return [dict(SHARED_SHAPES[i % len(SHARED_SHAPES)]) for i in range(n)]
    if mode == "own":
        return [own_shape(i, variant) for i in range(n)]
    raise ValueError(f"unknown mode {mode!r}")


INSTRUCTOR_ONLY = {"pages/p12_instructor.py"}  # listed only for the instructor's browser: learners never open it


def discover_pages(app: Path = APP) -> list[str]:
    """The page files of app.py's st.Page("pages/....py", ...) entries, in order, without running it."""
    return list(page_paths(app))


def page_paths(app: Path = APP) -> dict[str, str]:
    """{page file: its URL path} for app.py's st.Page entries, in order (the path Streamlit derives
    from the file name when st.Page has no url_path; "" for the default page, served at the root)."""
    tree = ast.parse(app.read_text(), filename=str(app))
    found: list[tuple[int, int, str, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name != "Page":
            continue
        arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "page"), None)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.endswith(".py"):
            kw = {k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)}
            url = "" if kw.get("default") is True else kw.get("url_path", Path(arg.value).stem)  # the default: at /
            found.append((node.lineno, node.col_offset, arg.value, url))
    pages: dict[str, str] = {}
    for _, _, path, url in sorted(found):
        if path in INSTRUCTOR_ONLY:
            continue
        if path not in pages and (app.parent / path).is_file():
            pages[path] = url
    return pages


# --------------------------------------------------------------------------------------------
# the longest queue wait: read from the lab if it says, else wrap the device queue's slot()
# --------------------------------------------------------------------------------------------
_PATCHED: list[str] | None = None  # what server_like_apptest() did, once per process


class QueueProbe:
    """The device's own figures (attnlab.admission.DEVICE.stats): longest wait, runs that waited, the
    largest run admitted."""

    source = "attnlab.admission.DEVICE.stats"

    def __init__(self, wrap: bool = True):  # `wrap` kept for the command line; the device keeps its own stats
        from attnlab.admission import DEVICE, Stats

        self._device, self._stats_type = DEVICE, Stats

    @property
    def waits(self) -> int:
        return self._device.stats.waited

    def reset(self) -> None:
        self._device.stats = self._stats_type()

    def read(self) -> float | None:
        return self._device.stats.longest_wait_s

    def peaks(self) -> dict:
        s = self._device.stats
        return {"queue_peak_device_bytes": s.peak_device_bytes, "queue_peak_host_bytes": s.peak_host_bytes,
                "queue_admitted": s.admitted}


# --------------------------------------------------------------------------------------------
# AppTest in threads, made to share what one server shares
# --------------------------------------------------------------------------------------------
def server_like_apptest() -> list[str]:
    """Patch AppTest (this process only) so that N of them in threads behave like one server.

    AppTest is written for one test at a time. Each run sets the global `Runtime._instance` to a
    mock of its own and back to None when it ends, so with sessions in threads another session's
    script finds no Runtime halfway through ("Runtime hasn't been created!", and widgets and
    st.dataframe taking their no-runtime paths). Each run also compiles the page afresh in a new
    ScriptCache; compile() in many threads at once trips CPython 3.11's "AST constructor recursion
    depth mismatch" SystemError. A server has one Runtime and one ScriptCache: so here a Runtime
    mock stands in whenever none is set, and all runs share one ScriptCache. Returns what was done.
    """
    done = []
    from unittest.mock import MagicMock

    from streamlit.runtime import Runtime
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache
    from streamlit.testing.v1 import app_test

    shared = ScriptCache()
    if hasattr(app_test, "ScriptCache"):
        app_test.ScriptCache = lambda: shared
        done.append("one ScriptCache for every run")
    fallback = MagicMock(spec=Runtime)
    with contextlib.suppress(Exception):
        from streamlit.runtime.caching.storage.dummy_cache_storage import MemoryCacheStorageManager
        from streamlit.runtime.dataframe_source_manager import DataframeSourceManager
        from streamlit.runtime.media_file_manager import MediaFileManager
        from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

        fallback.media_file_mgr = MediaFileManager(MemoryMediaFileStorage("/mock/media"))
        fallback.dataframe_source_mgr = DataframeSourceManager()
        fallback.cache_storage_manager = MemoryCacheStorageManager()
    with contextlib.suppress(Exception):
        from streamlit.components.v2.component_manager import BidiComponentManager

        fallback.bidi_component_registry = BidiComponentManager()
    if hasattr(app_test, "patch_config_options"):
        # Each run sets global.appTest for its duration and restores the old value after: with runs in
        # threads, one run's restore turns it off under another, whose widgets then skip recording
        # their format_func for AppTest (KeyError '$$ID-...' when the next page reads them). On for good.
        from streamlit import config

        def set_for_good(options: dict):
            for key, value in options.items():
                config.set_option(key, value)
            return contextlib.nullcontext()

        app_test.patch_config_options = set_for_good
        done.append("global.appTest set once for the process, not per run")
    Runtime.instance = classmethod(lambda cls: cls._instance if cls._instance is not None else fallback)
    Runtime.exists = classmethod(lambda cls: True)
    done.append("a Runtime always present")
    return done


# --------------------------------------------------------------------------------------------
# where the page scripts spend their time: py-spy's samples of every thread running a page
# --------------------------------------------------------------------------------------------
class Sampler:
    """--sample S: py-spy records this process every S seconds while the class runs (attnlab.procs.Record);
    `report()` counts the samples of each thread that is running a page script (a frame of app.py or pages/
    on it), three ways: by the innermost frame of this repository (what the lab was doing), by the innermost
    frame of all (where the thread was: a compile, a lock, numpy), and by the innermost line of app.py or
    pages/. What py-spy does not do itself, done here: pick the page threads out of AppTest's and this
    script's, and count by the lab's own frame. A sample is one thread for S seconds, so the counts are
    thread-seconds; waiting threads are sampled too (their Python frame is the call that waits). Threads the
    lab starts itself from a pages/ module (BACKGROUND: the session watcher, asleep between looks) are not page
    runs and are left out."""

    BACKGROUND = ("pages/session_watch.py:_watch",)

    def __init__(self, every: float):
        from attnlab.procs import Record

        self.every = every
        self._record = Record([os.getpid()], every, children=False)

    def __enter__(self) -> Sampler:
        self._record.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._record.__exit__(*exc)
        if self._record.error:
            print(f"--sample: no samples ({self._record.error})", file=sys.stderr, flush=True)

    @staticmethod
    def _where(frame) -> str:
        path = frame.path
        for cut in ("site-packages/", str(ROOT) + "/", "/lib/python3."):
            if cut in path:
                path = path.split(cut, 1)[1]
                break
        return f"{path}:{frame.function.rsplit('.', 1)[-1]}"

    def counts(self) -> tuple[int, dict[str, dict[str, int]]]:
        """(samples of page threads, {table: {key: samples}}) from py-spy's files."""
        from attnlab.procs import read_raw

        root, pages = str(ROOT) + "/", str(ROOT / "pages") + "/"
        tables: dict[str, dict[str, int]] = {"lab": {}, "leaf": {}, "pair": {}, "page": {}}
        samples = 0
        for path in self._record.files:
            for stack in read_raw(path):
                if not stack.frames:
                    continue
                lab, page = None, None
                for f in reversed(stack.frames):  # innermost first
                    if f.path.startswith(root) and "-packages/" not in f.path and "/scripts/" not in f.path:
                        lab = lab or f
                        if page is None and (f.path.startswith(pages) or f.path.endswith("app.py")):
                            page = f"{self._where(f)}:{f.line}"
                if page is None or any(self._where(f) in self.BACKGROUND for f in stack.frames):
                    continue
                samples += stack.count
                a, b = self._where(lab), self._where(stack.frames[-1])
                for table, key in (("lab", a), ("leaf", b), ("pair", f"{a}  <-  {b}"), ("page", page)):
                    tables[table][key] = tables[table].get(key, 0) + stack.count
        return samples, tables

    def report(self, top: int = 15) -> dict[str, Any]:
        samples, tables = self.counts()

        def rows(table: dict[str, int]) -> list[tuple[str, float]]:
            return [(k, round(v * self.every, 1)) for k, v in sorted(table.items(), key=lambda kv: -kv[1])[:top]]
        return {"every_s": self.every, "thread_s": round(samples * self.every, 1),
                "lab": rows(tables["lab"]), "leaf": rows(tables["leaf"]), "pair": rows(tables["pair"]),
                "page": rows(tables["page"])}


def profile_text(p: dict[str, Any]) -> str:
    lines = [f"  where page scripts spent {p['thread_s']:.0f} thread-seconds (sampled every {p['every_s']} s):"]
    for title, key in (("lab frame", "lab"), ("innermost frame", "leaf"), ("lab frame <- innermost", "pair"),
                       ("page line (app.py or pages/)", "page")):
        lines.append(f"  by {title}:")
        lines += [f"    {s:8.1f} s  {k[:150]}" for k, s in p.get(key, [])]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# one N: sessions in threads
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Visit:
    session: int
    page: str  # a page file, or "entry" for the session's first run of app.py
    wall_s: float
    ok: bool
    exceptions: list[str]
    error_boxes: list[str]
    failure: str | None = None
    traces: list[str] = dataclasses.field(default_factory=list)  # the exceptions' stack traces
    presses: list[tuple[str, float]] = dataclasses.field(default_factory=list)


def _visit(at: Any, session: int, page: str | None, timeout: float, press: bool) -> Visit:
    start = time.perf_counter()
    failure, failure_trace = None, None
    try:
        if page is not None:
            at.switch_page(page)
        at.run(timeout=timeout)
    except Exception as e:  # a timeout, or AppTest failing to run the page
        failure = f"{type(e).__name__}: {e}"
        failure_trace = traceback.format_exc()
    wall = time.perf_counter() - start
    exceptions, boxes = _problems(at)
    if failure is None and not exceptions and not _main_elements(at):
        failure = "the page came back empty (its script did not run)"
    visit = Visit(session, page or "entry", wall, failure is None and not exceptions, exceptions, boxes, failure,
                  (_traces(at) if exceptions else []) + ([failure_trace] if failure_trace else []))
    if press and visit.ok:
        for key in _buttons_to_press(at):
            t0 = time.perf_counter()
            try:
                at.button(key=key).click()
                at.run(timeout=timeout)
            except Exception as e:
                visit.failure = visit.failure or f"pressing {key}: {type(e).__name__}: {e}"
            visit.presses.append((key, time.perf_counter() - t0))
            exc, box = _problems(at)
            visit.exceptions += [f"after {key}: {m}" for m in exc]
            visit.error_boxes += [f"after {key}: {m}" for m in box]
        visit.ok = visit.failure is None and not visit.exceptions
    return visit


def _problems(at: Any) -> tuple[list[str], list[str]]:
    try:
        exceptions = [str(e.value) for e in at.exception]
        boxes = [str(e.value) for e in at.error]
    except Exception as e:  # no element tree (the run failed early)
        return [], [f"(could not read the page: {type(e).__name__}: {e})"]
    return exceptions, boxes


def _main_elements(at: Any) -> int:
    with contextlib.suppress(Exception):
        return len(at.main.children)
    return 0


def _traces(at: Any) -> list[str]:
    with contextlib.suppress(Exception):
        return ["\n".join(e.stack_trace) for e in at.exception]
    return []


def _buttons_to_press(at: Any) -> list[str]:
    keys = []
    with contextlib.suppress(Exception):
        for b in at.main.get("button"):
            proto = b.proto
            if b.key and not proto.disabled and (proto.type == "primary" or b.key.endswith(PRESS_KEY_SUFFIXES)):
                keys.append(b.key)
    return keys


def _session(i: int, params: dict[str, str], pages: list[str], first: int, timeout: float, press: bool,
             barrier: threading.Barrier, out: list[Visit]) -> None:
    from streamlit.testing.v1 import AppTest

    try:
        at = AppTest.from_file(str(APP), default_timeout=timeout)
        for k, v in params.items():
            at.query_params[k] = v
    except Exception as e:
        barrier.wait()
        out.append(Visit(i, "entry", 0.0, False, [], [], f"{type(e).__name__}: {e}"))
        return
    barrier.wait()
    out.append(_visit(at, i, None, timeout, press=False))
    for page in pages[first:] + pages[:first]:
        out.append(_visit(at, i, page, timeout, press))


def gpu_memory() -> dict[str, Any]:
    try:
        import jax

        dev = jax.devices()[0]
        if dev.platform != "gpu":
            return {"backend": dev.platform}
        stats = dev.memory_stats() or {}
        return {"backend": "gpu", "device": dev.device_kind, "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
                "bytes_limit": stats.get("bytes_limit")}
    except Exception as e:
        return {"backend": "unknown", "error": f"{type(e).__name__}: {e}"}


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def run_one(n: int, mode: str, timeout: float, press: bool, seed: int, wrap_queue: bool = True,
            probe: QueueProbe | None = None, raw_apptest: bool = False, deadline_s: float = 0.0,
            sample_s: float = 0.0) -> dict[str, Any]:
    """N sessions at once in this process; the figures as a dict (JSON-ready)."""
    os.chdir(ROOT)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    global _PATCHED
    if not raw_apptest and _PATCHED is None:
        _PATCHED = server_like_apptest()
    pages = discover_pages()
    rng = random.Random(seed + n)
    shapes = session_shapes(mode, n, rng)
    firsts = [rng.randrange(len(pages)) for _ in range(n)]
    probe = probe or QueueProbe(wrap=wrap_queue)
    warm_s = None
    if os.environ.get("CAPACITY_WARM") == "1":  # the server's own start-up warm-up, before the class arrives
        from attnlab.studies import warm

        warm_s = warm.warm()
        os.environ["CAPACITY_WARM"] = "done"  # once per process
    probe.reset()
    visits: list[Visit] = []
    barrier = threading.Barrier(n)
    threads = [threading.Thread(target=_session, name=f"learner-{i}", daemon=True,
                                args=(i, shapes[i], pages, firsts[i], timeout, press, barrier, visits))
               for i in range(n)]
    from attnlab.procs import cpu_seconds

    cpu0 = cpu_seconds(os.getpid())
    sampler = Sampler(sample_s) if sample_s else contextlib.nullcontext()
    with sampler:
        elapsed, stuck, done = _class(threads, deadline_s, len(pages), timeout, press, visits)
    profile = sampler.report() if sample_s else None
    cpu_s = cpu_seconds(os.getpid()) - cpu0
    page_visits = [v for v in done if v.page != "entry"]
    times = [v.wall_s for v in page_visits if v.ok]
    entry = [v.wall_s for v in done if v.page == "entry" and v.ok]
    messages: list[str] = []
    for v in done:
        tag = f"[s{v.session} {Path(v.page).stem}]"
        if v.failure:
            messages.append(f"{tag} run failed: {v.failure}")
        messages += [f"{tag} exception: {m}" for m in v.exceptions]
        messages += [f"{tag} error box: {m}" for m in v.error_boxes]
    messages += [f"[{name}] still running after {elapsed:.0f} s" for name in stuck]
    presses = [s for v in done for _, s in v.presses]
    wait = probe.read()
    result = {
        "sessions": n, "mode": mode, "seed": seed, "timeout_s": timeout, "press_buttons": press,
        "pages": pages, "pages_planned": n * len(pages), "pages_served": sum(v.ok for v in page_visits),
        "entry_runs_ok": len(entry), "entry_median_s": statistics.median(entry) if entry else None,
        "median_page_s": statistics.median(times) if times else None,
        "p95_page_s": percentile(times, 95), "worst_page_s": max(times) if times else None,
        "button_presses": len(presses), "median_press_s": statistics.median(presses) if presses else None,
        "longest_queue_wait_s": wait, "queue_wait_source": probe.source, "queue_waits_seen": probe.waits,
        **probe.peaks(),
        "gpu": gpu_memory(), "peak_rss_bytes": peak_rss_bytes(), "elapsed_s": elapsed, "warm_s": warm_s,
        "cpu_s": cpu_s,  # user + system seconds of the whole process while the class ran (1 per second: one core)
        "errors": len(messages), "failures": sum(v.failure is not None for v in done) + len(stuck),
        "exceptions": sum(len(v.exceptions) for v in done), "error_boxes": sum(len(v.error_boxes) for v in done),
        "error_messages": messages,
        "per_page": _per_page(page_visits, pages),
        "shapes": shapes, "first_pages": [pages[f] for f in firsts],
        "apptest_patches": _PATCHED if not raw_apptest else [],
        "visits": [dataclasses.asdict(v) for v in done], "profile": profile,
    }
    return result


def _class(threads: list[threading.Thread], deadline_s: float, pages: int, timeout: float, press: bool,
           visits: list[Visit]) -> tuple[float, list[str], list[Visit]]:
    """Start every session, wait for them (or the deadline): elapsed seconds, sessions still running, visits."""
    start = time.perf_counter()
    for t in threads:
        t.start()
    # each visit is bounded by the timeout; leave room for all of them and the entry run
    deadline = start + (deadline_s or (pages + 1) * timeout * (4 if press else 1) + 60)
    for t in threads:
        t.join(timeout=max(1.0, deadline - time.perf_counter()))
    return time.perf_counter() - start, [t.name for t in threads if t.is_alive()], list(visits)


def _per_page(visits: list[Visit], pages: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for p in pages:
        t = [v.wall_s for v in visits if v.page == p and v.ok]
        out[p] = {"served": len(t), "median_s": statistics.median(t) if t else None, "worst_s": max(t) if t else None}
    return out


# --------------------------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------------------------
def _s(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _mb(x: int | None) -> str:
    return "n/a" if x is None else f"{x / 2**20:,.0f} MB"


def gpu_peak_text(r: dict[str, Any]) -> str:
    gpu = r.get("gpu") or {}
    if gpu.get("backend") == "gpu":
        return _mb(gpu.get("peak_bytes_in_use"))
    return f"n/a ({gpu.get('backend', '?')})"


def summary_line(r: dict[str, Any]) -> str:
    warmed = f" (after a {r['warm_s']:.0f} s warm-up)" if r.get("warm_s") else ""
    return (f"N={r['sessions']} {r['mode']}{warmed}: {r['pages_served']}/{r['pages_planned']} pages served in "
            f"{r['elapsed_s']:.0f} s; first run median {_s(r.get('entry_median_s'))} s; page median {_s(r['median_page_s'])} s, p95 {_s(r['p95_page_s'])} s, "
            f"worst {_s(r['worst_page_s'])} s; longest queue wait {_s(r['longest_queue_wait_s'], 3)} s; "
            f"GPU peak {gpu_peak_text(r)}; RSS peak {_mb(r['peak_rss_bytes'])}; errors {r['errors']}"
            + (f"; process CPU {r['cpu_s'] / r['elapsed_s']:.1f} cores on average" if r.get("cpu_s") else "")
            + "\n  page medians (worst): " + ", ".join(
                f"{Path(p).stem} {_s(v['median_s'])} ({_s(v['worst_s'])})" for p, v in (r.get("per_page") or {}).items()))


def table(results: list[dict[str, Any]], cold: bool, clear: bool = False, served: bool = False) -> str:
    head = ["sessions", "mode", "served/planned", "median s", "p95 s", "worst s", "queue wait s",
            "GPU mem peak", "RSS peak", "errors"]
    rows = [[str(r["sessions"]), r["mode"] + (f", {r['ui_processes']} UI, {r['device_workers']} dev" if "ui_processes" in r else ""),
             f"{r['pages_served']}/{r['pages_planned']}", _s(r["median_page_s"]),
             _s(r["p95_page_s"]), _s(r["worst_page_s"]), _s(r["longest_queue_wait_s"], 3), gpu_peak_text(r),
             _mb(r["peak_rss_bytes"]), str(r["errors"])] for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]

    def fmt(cells: list[str]) -> str:  # the mode left-aligned, numbers right-aligned
        return "  ".join(c.ljust(w) if i == 1 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    lines = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows]
    for r in results:
        for m in r["error_messages"][:3]:
            lines.append(f"  N={r['sessions']}: {m[:300]}")
        if r["errors"] > 3:
            lines.append(f"  N={r['sessions']}: ... and {r['errors'] - 3} more")
    sources = sorted({r["queue_wait_source"] for r in results})
    lines.append(f"queue wait from: {', '.join(sources)}")
    if served:
        lines.append("each class on a fresh server (K UI processes, W device workers), nothing kept, JAX's "
                     "compilation cache kept across classes; GPU memory: nvidia-smi's memory.used (every process)")
        return "\n".join(lines)
    lines.append("each N ran in a fresh process (cold start: empty caches, nothing compiled)" if cold else
                 "the N values ran one after another in one process (" + (
                     "results cleared between them, compiled programs kept)" if clear else "caches kept between them)"))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
def _child(n: int, args: argparse.Namespace, mode: str, deadline: float) -> dict[str, Any]:
    """Run one N in a fresh Python process; its figures back through a temporary JSON file."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-X", "faulthandler",  # a crash prints every thread's Python stack
               str(Path(__file__).resolve()), "--sessions", str(n), "--mode", mode,
               "--timeout", str(args.timeout), "--seed", str(args.seed), "--in-process", "--json", str(out),
               "--quiet"]
        cmd += ["--press-buttons"] if args.press_buttons else []
        cmd += ["--warm"] if args.warm else []
        cmd += ["--no-queue-wrap"] if args.no_queue_wrap else []
        cmd += ["--raw-apptest"] if args.raw_apptest else []
        cmd += ["--dump-after", str(args.dump_after)] if args.dump_after else []
        cmd += ["--deadline", str(deadline)] if deadline else []
        cmd += ["--sample", str(args.sample)] if args.sample else []
        proc = subprocess.run(cmd, cwd=ROOT)
        if out.is_file():
            return json.loads(out.read_text())[0]
        return {"sessions": n, "mode": mode, "pages_planned": None, "pages_served": 0, "median_page_s": None,
                "p95_page_s": None, "worst_page_s": None, "longest_queue_wait_s": None, "queue_wait_source": "n/a",
                "gpu": {}, "peak_rss_bytes": None, "elapsed_s": 0.0, "errors": 1,
                "error_messages": [f"the subprocess for N={n} exited {proc.returncode} without figures"]}


def serve_classes(args: argparse.Namespace, plan: list[tuple[str, int]], deadlines: list[float]) -> int:
    """--serve: every class of the plan on a fresh real server, for each UI count and device-worker count."""
    import class_server

    results, variant = [], args.variant
    with tempfile.TemporaryDirectory(prefix="attnlab-jax-cache-") as tmp:
        cache = args.compile_cache or Path(tmp)
        for k in args.serve:
            for w in args.device_workers:
                for (mode, n), deadline in zip(plan, deadlines, strict=True):
                    r = class_server.run_served(n, mode, k, args.timeout, args.seed, deadline, variant, cache,
                                                args.server_log.resolve(), session_shapes, page_paths, percentile,
                                                device=args.device, device_workers=w, kill_after_s=args.kill_after,
                                                hostile_every_s=args.hostile_every, think_s=args.think)
                    variant += mode == "own"
                    r["class_shapes"] = os.environ.get("ATTNLAB_CLASS_SHAPES", "")
                    results.append(r)
                    if args.json:  # after every class: a run stopped by its time limit keeps what it measured
                        args.json.parent.mkdir(parents=True, exist_ok=True)
                        args.json.write_text(json.dumps(results, indent=1, default=str))
                    if not args.quiet:
                        print(f"[{served_label(r)}, started in {r['start_s']:.1f} s, warm and idle after "
                              f"{r['warm_s']:.0f} s, server CPU {r['cpu_s'] / r['elapsed_s']:.1f} cores"
                              + "".join(f", GPU {i} busy {u:.0f}%" for i, u in enumerate(r["gpu"]["per_gpu_utilisation_pct"]))
                              + "".join(f", {x['name']} held by runs {x['busy_share']:.0%} ({x['served']} requests, "
                                        f"{x['kept_hits']} kept answers)" for x in r["workers"] if "name" in x)
                              + (f", {r['pages_per_s']:.2f} pages/s" if r.get("pages_per_s") else "")
                              + (f"; fault: {r['fault']}" if r.get("fault") else "")
                              + (f"; hostile learner: {r['hostile']}" if r.get("hostile") else "")
                              + (f"; device rule: {r['device_rule']}" if r.get("device_rule") else "")
                              + "] " + summary_line(r), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=str))
    if not args.quiet:
        print()
        print(table(results, cold=False, served=True))
    return 0 if all(r["errors"] == 0 and r["pages_served"] == r["pages_planned"] for r in results) else 1


def served_label(r: dict[str, Any]) -> str:
    ui = f"{r['ui_processes']} UI process{'es' * (r['ui_processes'] > 1)}"
    if r["device"] == "child":
        return f"{ui}, device worker in a child process"
    return f"{ui}, {r['device_workers']} device worker{'s' * (r['device_workers'] > 1)} on Ray" + (
        " (fake GPUs: JAX on the CPU)" if r.get("fake_gpus") else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, nargs="+", default=[20], help="N concurrent sessions (several: one run each)")
    ap.add_argument("--mode", choices=["shared", "own"], default="shared")
    ap.add_argument("--class-shapes", nargs="?", const="shared", default=None,
                    help="with --serve: the instructor names the class's shapes (ATTNLAB_CLASS_SHAPES for the server's UI "
                         "processes): 'shared' (the flag alone) the shapes of --mode shared, or the value itself")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds allowed for one page run")
    ap.add_argument("--json", type=Path, help="write every figure and visit here")
    ap.add_argument("--warm", action="store_true",
                    help="first warm the server as it warms itself at start (attnlab.studies.warm), then the class arrives")
    ap.add_argument("--press-buttons", action="store_true",
                    help="on each page, press its primary measurement buttons (type primary, or keyed *_time)")
    ap.add_argument("--in-process", action="store_true",
                    help="run the N values in this process, one after another (caches kept), not a fresh process each")
    ap.add_argument("--no-queue-wrap", action="store_true", help="do not wrap the device queue to measure waits")
    ap.add_argument("--raw-apptest", action="store_true",
                    help="leave AppTest as it is (no shared Runtime / ScriptCache): shows its artefacts under threads")
    ap.add_argument("--seed", type=int, default=0, help="for the random first pages")
    ap.add_argument("--clear-between", action="store_true",
                    help="with --in-process: clear every st.cache_data result between N values (compiled programs "
                         "and the warm-up stay), so each N computes its pages' results itself")
    ap.add_argument("--deadline", type=float, nargs="+", default=[0.0],
                    help="report after this many seconds of class time even if sessions are still running "
                         "(their unvisited pages count as not served, each stuck session as an error); one "
                         "value for every run, or one per run in order (--sessions, then --then-own)")
    ap.add_argument("--then-own", type=int, nargs="*", default=[],
                    help="after the --sessions runs, these N with every session on its own shape (--mode own)")
    ap.add_argument("--dump-after", type=float, default=0.0,
                    help="if an N is still running after this many seconds, print every thread's stack once")
    ap.add_argument("--sample", type=float, default=0.0, metavar="S",
                    help="sample every page-running thread's stack every S seconds; print where the time went")
    ap.add_argument("--serve", type=int, nargs="+", default=[], metavar="K",
                    help="a real server instead of AppTest: K UI processes (serve.py) started for each class, learners "
                         "as headless websocket tabs (scripts/class_server.py); several K: every class for each")
    ap.add_argument("--device", choices=["child", "ray"], default="child",
                    help="with --serve: the device work in the embedded child process (K = 1) or on Ray")
    ap.add_argument("--device-workers", type=int, nargs="+", default=[1], metavar="W",
                    help="with --device ray: device workers (one per GPU, or fake GPUs on a CPU); several: each")
    ap.add_argument("--kill-after", type=float, default=0.0, metavar="S",
                    help="with --serve: kill one device worker S seconds into each class (the fault test)")
    ap.add_argument("--hostile-every", type=float, default=0.0, metavar="S",
                    help="with --serve: one more learner pressing Check on the hostile corpus every S seconds "
                         "(scripts/hostile_learner.py); the others' figures are the class's")
    ap.add_argument("--think", type=float, default=0.0, metavar="S",
                    help="with --serve: each learner reads each page about S seconds (0.5-1.5 S, drawn per learner) "
                         "before the next, so a class lasts minutes as a real one does (default 0: no pause)")
    ap.add_argument("--compile-cache", type=Path, default=None,
                    help="with --serve: JAX's persistent compilation cache, kept across the classes "
                         "(default: a temporary directory for this benchmark)")
    ap.add_argument("--variant", type=int, default=0,
                    help="with --serve: the first own-shape class's variant (each later one the next), so "
                         "classes in separate runs sharing a --compile-cache still compile shapes of their own")
    ap.add_argument("--server-log", type=Path, default=Path("capacity-server.log"),
                    help="with --serve: the servers' output is appended here")
    ap.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.warm:
        os.environ["CAPACITY_WARM"] = "1"
    os.chdir(ROOT)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # attnlab and pages/ as app.py finds them
    if args.in_process:  # AppTest.from_file in a thread of ours logs "missing ScriptRunContext" (harmless)
        import streamlit.testing.v1  # noqa: F401  (streamlit sets its loggers' levels on import)
        from streamlit.logger import get_logger

        get_logger("streamlit.runtime.scriptrunner_utils.script_run_context").setLevel("ERROR")
    if min(args.sessions) < 1:
        ap.error("--sessions must be at least 1")

    results = []
    probe = None
    if args.in_process and args.dump_after:  # where a slow or stuck run spends its time
        faulthandler.dump_traceback_later(args.dump_after, repeat=False)
    plan = [(args.mode, n) for n in args.sessions] + [("own", n) for n in args.then_own]
    deadlines = args.deadline if len(args.deadline) == len(plan) else [args.deadline[0]] * len(plan)
    if args.class_shapes:  # the server's UI processes inherit it (class_server.Server)
        os.environ["ATTNLAB_CLASS_SHAPES"] = class_shapes(args.class_shapes)
    if args.serve:
        return serve_classes(args, plan, deadlines)
    for i, ((mode, n), deadline) in enumerate(zip(plan, deadlines, strict=True)):
        if args.in_process and args.clear_between and i:
            import streamlit as st

            st.cache_data.clear()  # every result computed again; compiled programs stay, as on a server up a while
        if args.in_process:
            probe = probe or QueueProbe(wrap=not args.no_queue_wrap)
            try:
                r = run_one(n, mode, args.timeout, args.press_buttons, args.seed, probe=probe,
                            raw_apptest=args.raw_apptest, deadline_s=deadline, sample_s=args.sample)
            except Exception:
                traceback.print_exc()
                raise
        else:
            r = _child(n, args, mode, deadline)
        results.append(r)
        if not args.quiet:
            print(summary_line(r) if "elapsed_s" in r and r.get("pages_planned") else r["error_messages"][0], flush=True)
            if r.get("profile"):
                print(profile_text(r["profile"]), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=str))
    if not args.quiet:
        print()
        print(table(results, cold=not args.in_process, clear=args.clear_between))
    ok = all(r["errors"] == 0 and r["pages_served"] == r["pages_planned"] for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # AppTest script threads still running after a timeout must not hold the exit
