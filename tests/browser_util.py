"""Shared by the browser tests (tests/test_browser.py) and the load test (scripts/load_test.py):
a live `streamlit run app.py` on a free port, Debian's Chromium for Playwright, the app's pages (read from app.py),
and how to tell that Streamlit has finished a run.

Playwright cannot download its own browser here, so Chromium is Debian's (/usr/bin/chromium),
launched with flags that keep it from reaching for the (closed) network at start-up.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # scripts import this file from tests/
    sys.path.insert(0, str(ROOT))
from attnlab.procs import free_port  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm; many contexts need more
]
VIEWPORT = {"width": 1400, "height": 900}

def _app_pages() -> list[tuple[str, str]]:
    """(url path, the page's st.title) for every page of app.py's st.navigation, in its order, read from
    app.py (make_pages: `pages = [...]`, `aliases = [...]`) and the pages' sources (nothing imported, so no Streamlit is needed). The default page is
    served at the root URL, not at its own url_path, so its path here is the first alias app.py
    gives it (/formula)."""
    tree = ast.parse((ROOT / "app.py").read_text())
    found, aliases = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["pages"]:
            for call in node.value.elts:
                kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
                source = (ROOT / ast.literal_eval(call.args[0])).read_text()
                title = next(ast.literal_eval(n.args[0]) for n in ast.walk(ast.parse(source))
                             if isinstance(n, ast.Call) and ast.unparse(n.func) == "st.title")
                found.append((kw["url_path"], title, kw.get("default", False)))
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["aliases"]:
            aliases = list(ast.literal_eval(node.value.generators[0].iter))  # (path for path in (...))
    if not found:
        raise RuntimeError("no pages = [st.Page(...), ...] in app.py's make_pages")
    return [(aliases[0] if default and aliases else path, title) for path, title, default in found]


# (url path, the page's st.title): the order of app.py's st.navigation
PAGES: list[tuple[str, str]] = _app_pages()


# Selectors (Streamlit 1.40+: data-testid; the run state is an attribute of the app's root)
MAIN = '[data-testid="stMain"]'
TITLE = f"{MAIN} h1"
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
RUNNING = '[data-testid="stApp"]:not([data-test-script-state="notRunning"])'
STATUS_WIDGET = '[data-testid="stStatusWidget"]'  # "Running..." in the header while a script runs
EXCEPTION = '[data-testid="stException"]'
ERROR_BOX = '[data-testid="stAlertContentError"]'
SIDEBAR = '[data-testid="stSidebar"]'
SKELETON = '[data-testid="stSkeleton"]'  # a lazily loaded element not drawn yet


def launch_kwargs() -> dict:
    return {"executable_path": CHROMIUM, "args": CHROMIUM_ARGS, "headless": True}


def healthy(base_url: str, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/_stcore/health", timeout=timeout) as r:
            return r.status == 200 and r.read().strip() == b"ok"
    except Exception:
        return False


class StreamlitServer:
    """`python serve.py` (`streamlit run app.py` as `make run` and the container start it) from the repo
    root on a free port, its output in a log file.

    >>> with StreamlitServer(env={"ATTNLAB_TIMING_LOG": "/tmp/t.log"}) as server:
    ...     server.url  # http://localhost:<port>
    """

    def __init__(self, port: int | None = None, env: dict[str, str] | None = None, startup_timeout: float = 90.0,
                 prefix: list[str] | None = None, args: list[str] | None = None):
        self.prefix = prefix or []  # e.g. a shell that moves the server into a memory cgroup first
        self.args = args or []  # more streamlit options
        self.port = port or free_port()
        self.url = f"http://localhost:{self.port}"
        self.startup_timeout = startup_timeout
        # the app's own default, a device worker in a child process (the tests' own process calls it in-process)
        self.env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"), "ATTNLAB_DEVICE": "child",
                    **(env or {})}
        self.log_path = Path(tempfile.mkstemp(prefix="attnlab-streamlit-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def log(self, tail: int = 8000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def start(self) -> StreamlitServer:
        cmd = [*self.prefix, sys.executable, "serve.py", "--server.headless", "true",  # streamlit run app.py (see serve.py)
               "--server.port", str(self.port), "--browser.gatherUsageStats", "false", *self.args]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if healthy(self.url, timeout=2):
                return self
            time.sleep(0.5)
        code = self.proc.poll()
        self.stop()
        why = f"exited with code {code}" if code is not None else f"not healthy after {self.startup_timeout:.0f} s"
        raise RuntimeError(f"streamlit server {why}; its log:\n{self.log()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)

    def __enter__(self) -> StreamlitServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            self.log_path.unlink()


def warm_up(browser, base_url: str, timeout_ms: float = 120_000) -> None:
    """Run the app once at its root URL. Until st.navigation has run in some session, a fresh
    server does not know the pages, and the first visit to any other URL shows Streamlit's 'Page
    not found' modal over the right page (streamlit/streamlit#9992, still so in 1.67)."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.goto(base_url, wait_until="domcontentloaded", timeout=timeout_ms)
        page.locator(TITLE).first.wait_for(timeout=timeout_ms)
        wait_idle(page, timeout_ms)
    finally:
        context.close()


def page_url(base_url: str, path: str, query: str = "") -> str:
    return f"{base_url}/{path}" + (f"?{query.lstrip('?')}" if query else "")


def title_pattern(title: str) -> re.Pattern:
    return re.compile(r"^\s*" + re.escape(title) + r"\s*$")


# --------------------------------------------------------------------------------------------
# synchronous Playwright: wait for a run of the script to finish
# --------------------------------------------------------------------------------------------
def wait_idle(page, timeout_ms: float = 120_000) -> None:
    """Until the app's script is not running, the header's status widget is gone, and the elements
    the frontend loads lazily (charts, multiselects: grey skeletons at first) are drawn."""
    page.wait_for_selector(IDLE, state="attached", timeout=timeout_ms)
    page.wait_for_selector(STATUS_WIDGET, state="detached", timeout=timeout_ms)
    wait_drawn(page)


def wait_drawn(page, timeout_ms: float = 15_000) -> None:
    """Until no loading skeleton is left (a soft wait: on timeout the caller's checks decide)."""
    with contextlib.suppress(Exception):
        page.wait_for_function(f"() => !document.querySelector('{SKELETON}')", timeout=timeout_ms)


def open_page(page, base_url: str, path: str, title: str, query: str = "", timeout_ms: float = 120_000) -> None:
    """Load a page by its URL and wait until its script has run to the end."""
    page.goto(page_url(base_url, path, query), wait_until="domcontentloaded", timeout=timeout_ms)
    page.locator(TITLE).filter(has_text=title).first.wait_for(timeout=timeout_ms)
    wait_idle(page, timeout_ms)


def rerun_after(page, action, timeout_ms: float = 120_000, started_within_ms: float = 5_000) -> None:
    """Do `action` (a widget change, a click) and wait for the rerun it causes to finish.

    Streamlit marks the run only once the server has it, so first wait (briefly) for a run to
    start, then for it to end; a rerun too fast to catch is simply already over.
    """
    action()
    with contextlib.suppress(Exception):
        page.wait_for_selector(RUNNING, state="attached", timeout=started_within_ms)
    wait_idle(page, timeout_ms)


def screenshot(page, path: Path, max_height: int = 12_000) -> Path:
    """A full-page PNG. Streamlit scrolls its main area inside a container, not the document, and
    lays out some elements (charts, data grids) only once they are in view, so the viewport is
    grown until it holds the whole content, the shot taken, and the viewport put back."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # the bottom of the last element in the main area and in the sidebar (the containers themselves
    # are at least as tall as the viewport, so their own heights would grow with it)
    content = """() => Math.max(0, ...['[data-testid="stMainBlockContainer"] [data-testid="stElementContainer"]',
                                    '[data-testid="stSidebarUserContent"] [data-testid="stElementContainer"]']
        .flatMap(s => [...document.querySelectorAll(s)]).map(e => e.getBoundingClientRect().bottom))"""
    page.evaluate("""() => document.querySelectorAll('[data-testid="stMain"], [data-testid="stSidebarContent"]')
                             .forEach(e => e.scrollTo(0, 0))""")
    old = page.viewport_size
    try:
        height = old["height"]
        for _ in range(8):
            wanted = min(int(page.evaluate(content)) + 120, max_height)
            if wanted <= height:
                break
            height = wanted
            page.set_viewport_size({"width": old["width"], "height": height})
            page.wait_for_timeout(500)  # charts and data grids lay out at the new size
            wait_drawn(page)
        wait_drawn(page)
        page.wait_for_timeout(300)
        page.screenshot(path=str(path), full_page=True)
    finally:
        page.set_viewport_size(old)
    return path
