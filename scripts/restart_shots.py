#!/usr/bin/env python
"""A screenshot of the spinner a learner sees while the device worker is started again after a crash (for a person to look at).

    python scripts/restart_shots.py [--out artifacts/screenshots/restart] [--kills 1]

Starts `python serve.py` (the device worker in its child process, as `make run`), opens page 4 at the default shape,
SIGKILLs the idle child worker and at once opens page 4 at a new shape, whose device request waits for the new child.
Shoots the viewport every ~0.3 s for ~10 s; the first shot showing `waiting.RESTARTING` is restart_spinner.png, the
page once served is served_after_restart.png. --kills 2 kills the new child once more as it appears (before it
answers), for a machine where one restart is over before the spinner's caption is drawn.

--ray serves the device worker from a Ray actor on a local Ray (ATTNLAB_DEVICE=ray ATTNLAB_RAY_ADDRESS=local) and kills
the actor's device worker; --slow-restart S makes each Ray worker process and device worker child started after the
kill sleep S seconds first (a sitecustomize.py in a temporary folder on PYTHONPATH), standing in for a GPU worker's
slower start; --no-spare starts each device worker anew (ATTNLAB_SPARE_WORKER=0: a spare takes over in well under a
second, before the caption may be drawn).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from browser_util import (  # noqa: E402
    ERROR_BOX,
    EXCEPTION,
    IDLE,
    MAIN,
    STATUS_WIDGET,
    VIEWPORT,
    StreamlitServer,
    launch_kwargs,
    open_page,
    page_url,
    wait_idle,
)
from playwright.sync_api import sync_playwright  # noqa: E402

from attnlab import procs  # noqa: E402
from pages import waiting  # noqa: E402

PATH, TITLE = "naive-vs-fused", "4 · Naive vs fused"
NEW_SHAPE = "batch=2&q_len=192"  # not the default's (B4 T128): nothing kept, so its requests go to the new child
WORDS = " ".join(waiting.RESTARTING.split()[:6])  # "The device worker is being started"


def child_pids(server_pid: int, ray: bool = False) -> list[int]:
    """The server's device worker that holds the device: its descendant running `python -m attnlab.service.child`
    that started first, the spare left out (attnlab.procs.device_workers); under Ray, the DeviceActor's (`ray`
    says only where to look: the same process kind either way)."""
    try:
        below = psutil.Process(server_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [p.pid for p in procs.device_workers(below)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "artifacts" / "screenshots" / "restart")
    ap.add_argument("--kills", type=int, default=1, choices=(1, 2))
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--ray", action="store_true", help="the worker as a Ray actor on a local Ray")
    ap.add_argument("--slow-restart", type=float, default=0.0, help="seconds each worker started after the kill sleeps")
    ap.add_argument("--no-spare", action="store_true", help="no spare device worker (ATTNLAB_SPARE_WORKER=0)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    env = {"ATTNLAB_WARM": "0"} | ({"ATTNLAB_SPARE_WORKER": "0"} if a.no_spare else {})
    slow = Path(tempfile.mkdtemp(prefix="attnlab-slow-"))  # removed at the end (shutil.rmtree below)
    if a.ray:
        env |= {"ATTNLAB_DEVICE": "ray", "ATTNLAB_RAY_ADDRESS": "local"}
    if a.slow_restart:
        (slow / "sitecustomize.py").write_text(
            f"import os, sys, time\nif os.path.exists({str(slow / 'ON')!r}) and any('default_worker' in a for a in "
            f"sys.argv or 'attnlab.service.child' in open('/proc/self/cmdline').read()):\n    time.sleep({a.slow_restart})\n")
        env["PYTHONPATH"] = str(slow)
    with StreamlitServer(env=env, startup_timeout=180) as srv, sync_playwright() as p:
        browser = p.chromium.launch(**launch_kwargs())
        page = browser.new_context(viewport=VIEWPORT).new_page()
        open_page(page, srv.url, PATH, TITLE)
        page.wait_for_timeout(1500)  # requests asked ahead are answered too: the child is idle
        (old,) = child_pids(srv.pid, a.ray)
        (slow / "ON").touch()  # the Ray workers started from now on are slow (--slow-restart)
        os.kill(old, signal.SIGKILL)
        t0 = time.monotonic()
        print(f"killed child {old} (idle); opening ?{NEW_SHAPE}", flush=True)
        page.goto(page_url(srv.url, PATH, NEW_SHAPE), wait_until="commit")
        kills, new, seen, shots, served = 1, None, [], 0, None
        while (t := time.monotonic() - t0) < a.seconds:
            if new is None and (pids := [q for q in child_pids(srv.pid, a.ray) if q != old]):
                new = pids[0]
                print(f"{t:5.2f} s  new child {new}", flush=True)
                if kills < a.kills:
                    os.kill(new, signal.SIGKILL)
                    kills, old, new = kills + 1, new, None
                    print(f"{t:5.2f} s  killed it too (before it answered)", flush=True)
            text = page.inner_text(MAIN) if page.locator(MAIN).count() else ""
            png = page.screenshot(full_page=False)
            shots += 1
            if WORDS in text:
                seen.append((t, png))
            if served is None and "B2 T192" in text and page.locator(IDLE).count() and not page.locator(STATUS_WIDGET).count():
                served = t
            time.sleep(max(0.0, 0.3 - (time.monotonic() - t0 - t)))
        print(f"{shots} shots in {a.seconds:.0f} s; the restart sentence ({WORDS!r} ...) in {len(seen)}"
              + (f", at {', '.join(f'{t:.1f}' for t, _ in seen)} s" if seen else ": never (the restart was over first)"),
              flush=True)
        if seen:
            (a.out / "restart_spinner.png").write_bytes(seen[0][1])
            print("wrote", a.out / "restart_spinner.png", flush=True)
        wait_idle(page)
        page.screenshot(path=str(a.out / "served_after_restart.png"), full_page=False)
        print(f"served at {served or time.monotonic() - t0:.1f} s; wrote", a.out / "served_after_restart.png", flush=True)
        print(f"on the served page: {page.locator(ERROR_BOX).count()} error boxes, "
              f"{page.locator(EXCEPTION).count()} exceptions", flush=True)
        print("server log:", *[ln for ln in srv.log().splitlines() if "device worker" in ln], sep="\n  ", flush=True)
        browser.close()
    shutil.rmtree(slow, ignore_errors=True)
    return 0 if seen else 1


if __name__ == "__main__":
    sys.exit(main())
