#!/usr/bin/env python
"""Load test: N concurrent browser sessions going through every page of one AttnLab server.

    python scripts/load_test.py                    # start a server, 20 sessions, print the figures
    python scripts/load_test.py --sessions 40 --json artifacts/load.json
    python scripts/load_test.py --url http://host:8501 [--pid PID] [--timing-log PATH]   # a running server

One Chromium (Debian's), N browser contexts (separate cookies, separate Streamlit sessions), all
started at once. Each session opens one page by its URL, with one of a few small shapes in the
query string, then goes through the other eight by the sidebar's links (as a learner does), waiting
on each until Streamlit has finished the run. Some sessions press a measurement button: the
sequence sweep in the Benchmarks page's Sweeps tab, or "Time naive, ..." on page 4; the Benchmarks page also
times every implementation at the session's shape by itself (small shapes are measured without a
click).

Meanwhile: the server's resident memory is sampled every 0.5 s (psutil),
and /_stcore/health is fetched every 0.5 s. The server runs with ATTNLAB_TIMING_LOG, so that
attnlab.measure.timing.time_compiled logs each measurement's start and end; afterwards no two measurements
may overlap (one run at a time holds the device: attnlab.admission.DEVICE, in the device worker).

Exit status 0 when: no errors, no exception on any page, every health check answered, no
overlapping measurements, peak RSS under --max-rss-mb.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[1] / "tests")]

from browser_util import (  # noqa: E402
    ERROR_BOX,
    EXCEPTION,
    IDLE,
    MAIN,
    PAGES,
    ROOT,
    RUNNING,
    SIDEBAR,
    SKELETON,
    STATUS_WIDGET,
    TITLE,
    VIEWPORT,
    StreamlitServer,
    healthy,
    launch_kwargs,
    page_url,
)

from attnlab.procs import cpu_seconds, machine_cpu, rss_bytes, tree  # noqa: E402

# Shapes the sessions use (query strings): small, so a CPU serves 20 sessions; several, so that
# several different measurements queue for the device at once. Index 1 sweeps (N = 1: cheap at T = 1024).
SHAPES = [
    "",  # the codelab's shape, B4 T128 N8 H64
    "batch=1&heads=1&kv_heads=1",
    "batch=2&q_len=64&kv_len=64",
    "batch=1&q_len=96&kv_len=96&heads=4&kv_heads=2",
    "q_len=32&kv_len=32&causal=true",
]
SWEEP_SHAPE, P4_SHAPE = 1, 2
ARTIFACTS = ROOT / "artifacts" / "load"  # screenshots of any page that showed an exception
MB = 1024 * 1024


@dataclasses.dataclass
class Figures:
    sessions: int = 0
    pages_planned: int = 0
    pages_served: int = 0
    errors: int = 0
    exceptions: int = 0
    error_boxes: int = 0  # st.error messages seen (pages may show some by design, e.g. cuDNN on a CPU)
    buttons_clicked: int = 0
    peak_rss_mb: float | None = None
    rss_start_mb: float | None = None
    rss_end_mb: float | None = None
    wall_s: float = 0.0
    health_checks: int = 0
    health_failures: int = 0  # no "ok" within health_timeout_s
    health_slow: int = 0  # answered, but slower than 5 s (the readiness probe's timeout)
    health_max_s: float = 0.0
    health_p95_s: float | None = None
    health_timeout_s: float = 30.0
    # the longest stretch in which no check got "ok" within 5 s: GKE's readiness probe (every 10 s,
    # 5 s timeout, 3 failures) takes a pod out of service only after about 30 s of that
    health_unresponsive_s: float = 0.0
    server_cpu_s: float | None = None  # CPU time the server used during the run
    machine_cpu_busy_pct: float | None = None  # all cores, everything (server, Chromium, this script)
    cores: int | None = None
    client_nice: int = 0  # the browsers' CPU priority (nice); the server keeps its own
    measurements: int | None = None
    overlapping_timings: int | None = None
    page_s_median: float | None = None
    page_s_p95: float | None = None
    page_s_max: float | None = None
    error_messages: list[str] = dataclasses.field(default_factory=list)
    exception_messages: list[str] = dataclasses.field(default_factory=list)
    health_samples: list[tuple[float, float, bool]] = dataclasses.field(default_factory=list)  # (t, s, ok)
    timings: list[tuple[float, float]] = dataclasses.field(default_factory=list)  # measurements (start, end)

    def ok(self, max_rss_mb: float | None = None) -> bool:
        return (self.errors == 0 and self.exceptions == 0 and self.health_failures == 0
                and self.health_unresponsive_s < 30.0
                and self.pages_served == self.pages_planned and not self.overlapping_timings
                and (max_rss_mb is None or self.peak_rss_mb is None or self.peak_rss_mb < max_rss_mb))

    def table(self) -> str:
        def f(x, unit=""):
            return "n/a" if x is None else (f"{x:,.1f}{unit}" if isinstance(x, float) else f"{x:,}{unit}")

        rows = [
            ("sessions (concurrent browser contexts)", f(self.sessions)),
            ("pages served / planned", f"{self.pages_served} / {self.pages_planned}"),
            ("measurement buttons pressed", f(self.buttons_clicked)),
            ("errors (timeouts, wrong page, JS errors, dialogs)", f(self.errors)),
            ("exceptions (stException on a page)", f(self.exceptions)),
            ("error messages shown (st.error, by design)", f(self.error_boxes)),
            ("server RSS at start (MB)", f(self.rss_start_mb)),
            ("server peak RSS (MB)", f(self.peak_rss_mb)),
            ("server RSS at end (MB)", f(self.rss_end_mb)),
            ("wall time (s)", f(self.wall_s)),
            ("page time under load: median / p95 / max (s)",
             " / ".join(f(x) for x in (self.page_s_median, self.page_s_p95, self.page_s_max))),
            (f"health checks / no answer in {self.health_timeout_s:.0f} s / slower than 5 s",
             f"{self.health_checks} / {self.health_failures} / {self.health_slow}"),
            ("health answer: p95 / slowest (s)", f"{f(self.health_p95_s)} / {self.health_max_s:.2f}"),
            ("longest stretch without an answer within 5 s (s)", f"{self.health_unresponsive_s:.1f}"),
            ("browsers' nice (server: 0)", f(self.client_nice)),
            ("server CPU time (s) / machine CPU busy (% of {} cores)".format(self.cores or "?"),
             f"{f(self.server_cpu_s)} / {f(self.machine_cpu_busy_pct)}"),
            ("measurements logged by attnlab.measure.timing", f(self.measurements)),
            ("overlapping measurements", f(self.overlapping_timings)),
        ]
        w = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def overlaps(intervals: list[tuple[float, float]]) -> int:
    """How many intervals start before an earlier-starting one has ended."""
    n, end = 0, float("-inf")
    for s, e in sorted(intervals):
        if s < end:
            n += 1
        end = max(end, e)
    return n


def read_timing_log(path: Path, kind: str = "timing") -> list[tuple[float, float]]:
    """The spans of one kind from ATTNLAB_TIMING_LOG (spans.log_span): measurements by default."""
    return [(s, e) for s, e, _, k in read_spans(path) if k == kind]


def read_spans(path: Path) -> list[tuple[float, float, str, str]]:
    """(start, end, 'pid:thread', kind) for every line of ATTNLAB_TIMING_LOG."""
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5:
            out.append((float(parts[0]), float(parts[1]), f"{parts[3]}:{parts[2]}", parts[4]))
    return out


def device_rule(path: Path) -> dict:
    """Issue 41's class check, from the spans every device worker logged: each timing lies inside a turn of its own
    thread, and no other thread's turn or tuned build overlaps it (one GPU per worker: spans of other workers,
    other pids, are on other GPUs and are not compared)."""
    spans = read_spans(path) if path.is_file() else []
    timings = [x for x in spans if x[3] == "timing"]
    bad = []
    for s, e, who, _ in timings:
        pid = who.split(":")[0]
        if not any(k == "turn" and w == who and ts <= s and e <= te for ts, te, w, k in spans):
            bad.append(f"timing {s:.3f}-{e:.3f} ({who}) outside a turn of its own thread")
        for ts, te, w, k in spans:
            if k in ("turn", "build") and w != who and w.split(":")[0] == pid and ts < e and s < te:
                bad.append(f"timing {s:.3f}-{e:.3f} ({who}) overlapped a {k} of {w} {ts:.3f}-{te:.3f}")
    return {"timings": len(timings), "turns": sum(k == "turn" for *_, k in spans),
            "tuned_builds": sum(k == "build" for *_, k in spans), "violations": len(bad), "examples": bad[:5]}


# --------------------------------------------------------------------------------------------
# one learner
# --------------------------------------------------------------------------------------------
async def wait_run(page, title: str, timeout_ms: float) -> None:
    await page.locator(TITLE).filter(has_text=title).first.wait_for(timeout=timeout_ms)
    await page.wait_for_selector(IDLE, state="attached", timeout=timeout_ms)
    await page.wait_for_selector(STATUS_WIDGET, state="detached", timeout=timeout_ms)
    with contextlib.suppress(Exception):  # lazily loaded elements (charts) drawn: what a learner waits for
        await page.wait_for_function(f"() => !document.querySelector('{SKELETON}')", timeout=30_000)


async def press(page, button_name, done, timeout_ms: float) -> None:
    """Press a button (its name, or a pattern of it), wait for the run it starts to end and for `done` to show
    (a text, or a function of the page giving a locator)."""
    await page.locator(MAIN).get_by_role("button", name=button_name).first.click(timeout=timeout_ms)
    try:
        await page.wait_for_selector(RUNNING, state="attached", timeout=5_000)
    except Exception:
        pass  # over before we looked
    await page.wait_for_selector(IDLE, state="attached", timeout=timeout_ms)
    shown = done(page) if callable(done) else page.locator(MAIN).get_by_text(done).first
    await shown.wait_for(timeout=timeout_ms)


async def learner(i: int, browser, base_url: str, fig: Figures, page_times: list[float], go: asyncio.Event,
                  timeout_ms: float) -> None:
    shape = SHAPES[i % len(SHAPES)]
    order = list(range(len(PAGES)))
    order = order[i % len(order):] + order[: i % len(order)]  # sessions start on different pages
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()

    def problem(what: str) -> None:
        fig.errors += 1
        fig.error_messages.append(f"session {i}: {what}")

    async def on_dialog(dialog) -> None:  # an alert() is an error: nothing in the app opens one
        problem(f"dialog {dialog.message!r}")
        await dialog.dismiss()

    page.on("dialog", on_dialog)
    page.on("pageerror", lambda e: problem(f"JS error {e}"))
    await go.wait()
    try:
        for step, k in enumerate(order):
            path, title = PAGES[k]
            t0 = time.perf_counter()
            try:
                if step == 0:  # a shared link; the first page is at the root URL
                    await page.goto(page_url(base_url, "" if k == 0 else path, shape), wait_until="domcontentloaded",
                                    timeout=timeout_ms)
                else:  # the sidebar's link, as a learner moves on
                    await page.locator('[data-testid="stSidebarNav"] a').nth(k).click(timeout=timeout_ms)
                await wait_run(page, title, timeout_ms)
                page_times.append(time.perf_counter() - t0)
                if path == "benchmarks" and i % len(SHAPES) == SWEEP_SHAPE:
                    fig.buttons_clicked += 1
                    await page.locator(MAIN).get_by_role("tab", name="Sweeps").click(timeout=timeout_ms)
                    await wait_run(page, title, timeout_ms)  # the tab reruns the page to draw itself
                    # done: the live sweep's y-axis picker, a third beside the two shipped sweeps' pickers
                    await press(page, re.compile(r"^Run the sequence sweep"),
                                lambda p: p.locator(MAIN).get_by_text("y axis", exact=True).nth(2), timeout_ms * 2)
                if path == "naive-vs-fused" and i % len(SHAPES) == P4_SHAPE:
                    fig.buttons_clicked += 1
                    await press(page, re.compile(r"^Time naive"), "Download CSV", timeout_ms)
                n_exc = await page.locator(EXCEPTION).count()
                if n_exc:
                    fig.exceptions += n_exc
                    text = await page.locator(EXCEPTION).first.inner_text()
                    sidebar = await page.locator(f"{SIDEBAR} input").evaluate_all(
                        "els => els.map(e => (e.getAttribute('aria-label') || '') + '=' + e.value).join(' ')")
                    fig.exception_messages.append(f"session {i} /{path} (url {page.url}; sidebar {sidebar}): "
                                                  f"{text[:1500]}")
                    with contextlib.suppress(Exception):
                        ARTIFACTS.mkdir(parents=True, exist_ok=True)
                        await page.screenshot(path=str(ARTIFACTS / f"exception-session{i}-{path}.png"), full_page=True)
                fig.error_boxes += await page.locator(f"{MAIN} {ERROR_BOX}").count()
                fig.pages_served += 1
            except Exception as e:
                fig.errors += 1
                fig.error_messages.append(f"session {i} /{path}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    finally:
        await context.close()


# --------------------------------------------------------------------------------------------
# the watchers
# --------------------------------------------------------------------------------------------
async def watch_memory(pid: int, fig: Figures, stop: asyncio.Event) -> None:
    while not stop.is_set():
        rss = rss_bytes(pid)
        if rss is not None:
            fig.peak_rss_mb = max(fig.peak_rss_mb or 0.0, rss / MB)
        await asyncio.sleep(0.5)


# The health probe runs in a process of its own, like a kubelet's: in this script's process it
# would share the GIL with Playwright's client, and measure this script as much as the server.
PROBE = """
import sys, time, urllib.request
url, every, timeout = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
while True:
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(url + "/_stcore/health", timeout=timeout) as r:
            ok = r.status == 200 and r.read().strip() == b"ok"
    except Exception:
        ok = False
    took = time.perf_counter() - t0
    print(f"{t0:.6f} {took:.6f} {int(ok)}", flush=True)
    time.sleep(max(0.0, every - took))
"""


def start_probe(base_url: str, out: Path, every: float = 0.5, timeout: float = 10.0) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PROBE, base_url, str(every), str(timeout)],
                            stdout=out.open("w"), stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)


def read_probe(out: Path, fig: Figures) -> None:
    for line in out.read_text().splitlines():
        try:
            t, took, ok = float(line.split()[0]), float(line.split()[1]), line.split()[2] == "1"
        except (IndexError, ValueError):
            continue
        fig.health_samples.append((t, took, ok))
        fig.health_checks += 1
        fig.health_max_s = max(fig.health_max_s, took)
        if not ok:
            fig.health_failures += 1
        elif took > 5.0:
            fig.health_slow += 1
    samples = sorted(fig.health_samples)
    if samples:
        took = sorted(s for _, s, _ in samples)
        fig.health_p95_s = took[min(len(took) - 1, int(0.95 * len(took)))]
    fig.health_unresponsive_s = unresponsive_stretch(samples)


def unresponsive_stretch(samples: list[tuple[float, float, bool]], limit_s: float = 5.0) -> float:
    """The longest time from the start of a check that got no "ok" within `limit_s` to the end of
    the last such check in an unbroken run of them."""
    longest, start = 0.0, None
    for t, took, ok in sorted(samples):
        if ok and took <= limit_s:
            start = None
            continue
        start = t if start is None else start
        longest = max(longest, t + took - start)
    return longest


def renice_clients(nice: int, server_pid: int | None) -> int:
    """Lower the CPU priority of this script's other children (Playwright's driver, Chromium and
    the renderers it starts, which inherit it), never the server's: in use, the browsers run on
    the learners' machines, so they should not take the server's CPU here. Returns how many."""
    spared = {p.pid for p in tree(server_pid)} if server_pid else set()
    n = 0
    for pid in {p.pid for p in tree(os.getpid())[1:]} - spared:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, nice)
            n += 1
    return n


async def drive(base_url: str, sessions: int, pid: int | None, timeout_ms: float, client_nice: int = 10) -> Figures:
    from playwright.async_api import async_playwright

    fig = Figures(sessions=sessions, pages_planned=sessions * len(PAGES), cores=os.cpu_count(),
                  client_nice=client_nice)
    page_times: list[float] = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(**launch_kwargs())
        if client_nice:
            renice_clients(client_nice, pid)
        try:
            # one run at the root first: until st.navigation has run once, a fresh server shows
            # 'Page not found' on the first visit to any other URL (streamlit/streamlit#9992)
            ctx = await browser.new_context(viewport=VIEWPORT)
            warm = await ctx.new_page()
            await warm.goto(base_url, wait_until="domcontentloaded", timeout=timeout_ms)
            await wait_run(warm, PAGES[0][1], timeout_ms)
            await ctx.close()

            if pid:
                rss = rss_bytes(pid)
                fig.rss_start_mb = rss / MB if rss else None
            cpu0, machine0 = (cpu_seconds(pid) if pid else None), machine_cpu()
            stop, go = asyncio.Event(), asyncio.Event()
            probe_out = Path(tempfile.mkstemp(prefix="attnlab-health-", suffix=".log")[1])
            probe = start_probe(base_url, probe_out, timeout=fig.health_timeout_s)
            watchers = [asyncio.create_task(watch_memory(pid, fig, stop))] if pid else []
            tasks = [asyncio.create_task(learner(i, browser, base_url, fig, page_times, go, timeout_ms))
                     for i in range(sessions)]
            await asyncio.sleep(1.0)  # contexts created; now all at once
            t0 = time.perf_counter()
            go.set()
            await asyncio.gather(*tasks)
            fig.wall_s = time.perf_counter() - t0
            stop.set()
            await asyncio.gather(*watchers)
            probe.terminate()
            probe.wait(timeout=30)
            read_probe(probe_out, fig)
            probe_out.unlink()
            cpu1, machine1 = (cpu_seconds(pid) if pid else None), machine_cpu()
            if cpu0 is not None and cpu1 is not None:
                fig.server_cpu_s = cpu1 - cpu0
            if machine0 and machine1 and machine1[1] > machine0[1]:
                fig.machine_cpu_busy_pct = 100.0 * (machine1[0] - machine0[0]) / (machine1[1] - machine0[1])
        finally:
            await browser.close()
    if not healthy(base_url, fig.health_timeout_s):  # and still answering afterwards
        fig.health_failures += 1
        fig.error_messages.append("the server did not answer /_stcore/health after the run")
    if pid:
        rss = rss_bytes(pid)
        fig.rss_end_mb = rss / MB if rss else None
    if page_times:
        ordered = sorted(page_times)
        fig.page_s_median = statistics.median(ordered)
        fig.page_s_p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        fig.page_s_max = ordered[-1]
    return fig


def run_load(sessions: int = 20, url: str | None = None, pid: int | None = None, timing_log: str | None = None,
             timeout_s: float = 240.0, client_nice: int = 10) -> Figures:
    """Run the load test; start a server of our own unless `url` is given. Returns the figures."""
    if url:
        fig = asyncio.run(drive(url.rstrip("/"), sessions, pid, timeout_s * 1e3, client_nice))
        log = Path(timing_log) if timing_log else None
    else:
        log = Path(tempfile.mkstemp(prefix="attnlab-timings-", suffix=".log")[1])
        log.write_text("")
        server = StreamlitServer(env={"ATTNLAB_TIMING_LOG": str(log)})
        with server:
            try:
                fig = asyncio.run(drive(server.url, sessions, server.pid, timeout_s * 1e3, client_nice))
            finally:
                if server.proc and server.proc.poll() is not None:
                    print(f"The server died; its log:\n{server.log()}", file=sys.stderr)
    if log and log.exists():
        intervals = read_timing_log(log)
        fig.measurements, fig.overlapping_timings = len(intervals), overlaps(intervals)
        fig.timings = intervals
        if not url:
            log.unlink()
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", "-n", type=int, default=20, help="concurrent browser contexts (default 20)")
    ap.add_argument("--url", help="a running server instead of starting one")
    ap.add_argument("--pid", type=int, help="with --url: the server's process id, for its memory")
    ap.add_argument("--timing-log", help="with --url: the ATTNLAB_TIMING_LOG file the server writes")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds one page may take under load")
    ap.add_argument("--max-rss-mb", type=float, default=3072.0, help="fail above this peak server RSS")
    ap.add_argument("--client-nice", type=int, default=10,
                    help="CPU priority (nice) of the browsers, so they do not starve the server (0: equal)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    fig = run_load(args.sessions, args.url, args.pid, args.timing_log, args.timeout, args.client_nice)
    print(fig.table())
    for m in fig.error_messages[:20] + fig.exception_messages[:10]:
        print("  ", m)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dataclasses.asdict(fig), indent=2))
    return 0 if fig.ok(args.max_rss_mb) else 1


if __name__ == "__main__":
    sys.exit(main())
