"""Serve AttnLab: `streamlit run app.py`, with every session, the first one too, run the st.navigation way.

    python serve.py [streamlit options]      e.g.  python serve.py --server.port 8501

Why not plain `streamlit run app.py`: with a `pages/` folder beside the entry script, Streamlit
decides when it creates its first session that the app uses the old pages-directory navigation
(`PagesManager.uses_pages_directory`, set from the folder's existence), and only the first call
of `st.navigation` turns that off. Until then a session runs the pages folder's own navigation,
which knows no page called /causal, and so the first visitor after a (re)start who follows a
shared link gets a 'Page not found' modal ('Running the app's main page') over the right page
(streamlit/streamlit#9992). The lab needs its top-level `pages/` folder, so this launcher tells
Streamlit before the server starts what `st.navigation` would tell it on its first run.
It also puts a small ASGI middleware in front of Streamlit's own (`Harden`): security headers on
every HTTP response (no framing by other sites, no MIME sniffing, no referrer to other sites) and
Streamlit's `/_stcore/metrics` closed (404), since it describes every learner's session and cache to
anyone who asks; ATTNLAB_METRICS=1 opens it again for an instructor who scrapes it. It also tells a
page's HTML where the server is (BASE_URL_HINT), so a page opened by its link connects at once.
Everything else is `streamlit run app.py` as is (same options, same config.toml), plus a head
start: while the server starts, a background thread imports what the first page needs and compiles
its tiny example (attnlab.studies.warm.head_start; off with ATTNLAB_WARM=0, as the app's own warm-up).

    python serve.py --workers 4 [streamlit options]     (or ATTNLAB_WORKERS=4; `auto`: a CPU count's)

runs four such servers on local ports behind one front on --server.port (front.py: each browser
stays on one worker), for a class on one GPU: one Python process runs one page script at a time.
The workers share the GPU's memory budget (a quarter each), time alone across processes (a lock
file), and share results (attnlab.store, ATTNLAB_RESULTS_DIR); each keeps its compiled programs in a
folder of its own under JAX_COMPILATION_CACHE_DIR (worker_env says why); a worker that dies is started again.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"


def use_st_navigation_from_the_first_session() -> None:
    from streamlit.runtime.pages_manager import PagesManager

    if not hasattr(PagesManager, "uses_pages_directory"):  # a Streamlit that no longer has the v1 switch
        print("serve.py: this Streamlit has no PagesManager.uses_pages_directory; nothing to set", file=sys.stderr)
        return
    PagesManager.uses_pages_directory = False  # what st.navigation sets on its first run


HEADERS = [  # what every HTTP response carries (the websocket upgrade is not an HTTP response)
    (b"x-frame-options", b"SAMEORIGIN"),
    (b"content-security-policy", b"frame-ancestors 'self'; object-src 'none'; base-uri 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


# Streamlit's frontend finds its server by trying the page's own path first: a learner who opens
# /causal waits for /causal/_stcore/health to fail (404) and then 100 ms more before it tries
# /_stcore/health (its retry delay): in a network trace the websocket opened 0.13 s later than with the
# hint below (the page as a whole was 0.05-0.1 s slower: the browser had other work meanwhile).
# A page's HTML says where the server is instead (window.__streamlit.BACKEND_BASE_URL, Streamlit's
# own setting for hosts that embed it): the page's URL without its last segment.
BASE_URL_HINT = (b"<script>(function(){var p=location.pathname.replace(/\\/+$/,'');"
                 b"window.__streamlit={BACKEND_BASE_URL:location.origin+p.slice(0,p.lastIndexOf('/')+1)};})();</script>")


def is_page_path(path: str, base: str) -> bool:
    """A page's own URL: one segment below the server's base path, not a file or Streamlit's endpoint
    (/causal, /lab/causal with base 'lab'; not /, /favicon.png, /_stcore, /static/...)."""
    prefix = "/" + base.strip("/") if base.strip("/") else ""
    if not path.startswith(prefix + "/"):
        return False
    rest = path[len(prefix) + 1:].rstrip("/")
    return bool(rest) and "/" not in rest and "." not in rest and not rest.startswith("_stcore")


class Harden:
    """ASGI middleware: HEADERS on every HTTP response; /_stcore/metrics answered 404 unless ATTNLAB_METRICS=1;
    a page's HTML (not the root's) carries BASE_URL_HINT."""

    def __init__(self, app, base: str = ""):
        self.app = app
        self.base = base  # Streamlit's server.baseUrlPath

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["method"] == "GET" and is_page_path(scope["path"], self.base):
            return await self.page_html(scope, receive, send)
        if scope["path"].rstrip("/").endswith("/_stcore/metrics") and os.environ.get("ATTNLAB_METRICS") != "1":
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain"),
                                                                                   *HEADERS]})
            await send({"type": "http.response.body", "body": b"not found"})
            return

        async def with_headers(message):
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []),
                                                  *(h for h in HEADERS if h[0] not in names)]}
            await send(message)

        await self.app(scope, receive, with_headers)

    async def page_html(self, scope, receive, send):
        """Streamlit's answer (index.html, asked for uncompressed: it is 8 kB) with BASE_URL_HINT first in
        its head and HEADERS added; any other answer (a 304, a file) passes as it is, headers added."""
        scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != b"accept-encoding"]}
        start, chunks = {}, []

        async def edit(message):
            if message["type"] == "http.response.start":
                start.update(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            headers, body = start.get("headers", []), b"".join(chunks)
            html = any(k.lower() == b"content-type" and v.startswith(b"text/html") for k, v in headers)
            if start.get("status") == 200 and html and b"<head>" in body:
                body = body.replace(b"<head>", b"<head>" + BASE_URL_HINT, 1)
                headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode()))
            names = {k.lower() for k, _ in headers}
            await send({**start, "headers": [*headers, *(h for h in HEADERS if h[0] not in names)]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, edit)


def harden_the_server() -> None:
    """Put `Harden` first in Streamlit's middleware stack (Streamlit >= 1.5x serves with Starlette)."""
    try:
        from starlette.middleware import Middleware
        from streamlit.web.server.starlette import starlette_app
    except ImportError:
        print("serve.py: this Streamlit does not serve with Starlette; headers not added", file=sys.stderr)
        return
    from streamlit import config

    own = starlette_app.create_streamlit_middleware
    starlette_app.create_streamlit_middleware = lambda: [
        Middleware(Harden, base=config.get_option("server.baseUrlPath") or ""), *own()]


def head_start() -> None:
    """The first run's one-time costs, in the background, overlapping the server's start and the
    first browser's download of Streamlit's JavaScript (2-3 s of the first page's run otherwise,
    measured with cProfile on a 2-core machine): page 1's imports and JAX compiles, and two costs
    Streamlit pays on the first run of a process."""
    if os.environ.get("ATTNLAB_WARM", "1") != "1":
        return

    def run() -> None:
        try:
            import inspect

            from attnlab.studies import warm

            warm.head_start()
            import streamlit.emojis  # noqa: F401  (st.set_page_config's icon check loads this catalogue)

            # Streamlit's first element of a process calls inspect.stack() (its is-this-a-REPL check),
            # which resolves the path of every loaded module (0.3-0.6 s); inspect caches them.
            inspect.stack()
        except Exception as e:  # only a head start: the first run does all of it itself when this fails
            print(f"serve.py: head start failed: {type(e).__name__}: {e}", file=sys.stderr)

    threading.Thread(target=run, name="attnlab-head-start", daemon=True).start()


def refuse_cache_clearing() -> None:
    """Any client may send Streamlit's "clear cache" message (a developer's menu item), and the
    server then drops every cached result of every learner and every cached resource (the warm-up
    runs again): one learner's websocket could empty a class's results over and over. Refused here,
    with a log line; ATTNLAB_ALLOW_CLEAR_CACHE=1 lets an instructor's browser clear them."""
    if os.environ.get("ATTNLAB_ALLOW_CLEAR_CACHE") == "1":
        return
    from streamlit.runtime.app_session import AppSession

    def refuse(self) -> None:
        print("serve.py: a client asked to clear the server's caches; refused (ATTNLAB_ALLOW_CLEAR_CACHE=1 allows it)",
              file=sys.stderr, flush=True)

    AppSession._handle_clear_cache_request = refuse


# --------------------------------------------------------------------------------------------
# several workers behind one front
# --------------------------------------------------------------------------------------------
def take_option(args: list[str], name: str) -> tuple[str | None, list[str]]:
    """The value of `--name V` or `--name=V` in args, and args without it."""
    value, rest, i = None, [], 0
    while i < len(args):
        a = args[i]
        if a == f"--{name}" and i + 1 < len(args):
            value, i = args[i + 1], i + 2
            continue
        if a.startswith(f"--{name}="):
            value = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return value, rest


def usable_cpus() -> float:
    """CPUs this process may use: its cgroup's quota (a container's CPU limit) or its affinity."""
    cpus = float(len(os.sched_getaffinity(0)))
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()
        if quota != "max":
            cpus = min(cpus, int(quota) / int(period))
    except (OSError, ValueError):
        pass
    return cpus


def auto_workers() -> int:
    """--workers auto: one worker per two CPUs, at most four (on a 2x H200 host's 16 cores, four
    workers served a class of twenty best; eight did no better: deploy/README.md, capacity)."""
    return max(1, min(4, int(usable_cpus() // 2)))


START_S = 20.0  # a worker that exits sooner after its start is not restarted: the server stops
COMPILE_CACHE_MAX_BYTES = 8 * 2**30  # the pod's cap (deploy/Dockerfile) when none is set, split among the workers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(i: int, k: int, port: int) -> dict[str, str]:
    tmp = tempfile.gettempdir()
    env = dict(os.environ, ATTNLAB_WORKER=str(i), ATTNLAB_WORKERS=str(k),
               ATTNLAB_DEVICE_LOCK=os.path.join(tmp, f"attnlab-device-{port}.lock"),
               XLA_PYTHON_CLIENT_PREALLOCATE="false")  # K processes cannot each take 75% of the GPU
    # results computed by one worker are read by the others (attnlab.store)
    env.setdefault("ATTNLAB_RESULTS_DIR", os.path.join(tmp, f"attnlab-results-{port}"))
    if env.get("JAX_COMPILATION_CACHE_DIR"):
        # One folder of JAX's persistent compilation cache per worker (worker-0, worker-1, ... under the
        # cache folder; a restarted worker i finds its own programs again). A capped cache takes one file
        # lock for every read and write and, on each write, reads every entry's access time to evict the
        # oldest: one folder shared by K workers made every worker's compiles queue for that lock (an
        # own-shape class of 20 on four workers, H200: compile threads waited for it 1.6 times as long as
        # they compiled). Uncapped, JAX writes entries in place with no lock, and a process can read
        # another's half-written program. So: a folder each, capped (each its share of the cap), locked
        # only against the worker's own threads.
        env["JAX_COMPILATION_CACHE_DIR"] = os.path.join(env["JAX_COMPILATION_CACHE_DIR"], f"worker-{i}")
        raw = env.get("JAX_COMPILATION_CACHE_MAX_SIZE", "").strip()
        if raw and not raw.lstrip("-").isdigit():
            sys.exit(f"serve.py: JAX_COMPILATION_CACHE_MAX_SIZE takes a whole number of bytes, not {raw!r}")
        total = int(raw) if raw else -1
        if total < 0:
            total = COMPILE_CACHE_MAX_BYTES
        env["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(max(total // k, 1))
    return env


def serve_workers(k: int, args: list[str]) -> int:
    import asyncio
    import signal

    import front

    port, args = take_option(args, "server.port")
    address, args = take_option(args, "server.address")
    port = int(port or os.environ.get("STREAMLIT_SERVER_PORT", "8501"))
    address = address or os.environ.get("STREAMLIT_SERVER_ADDRESS") or None
    ports = [free_port() for _ in range(k)]
    procs: list[subprocess.Popen | None] = [None] * k
    stopping = threading.Event()

    started = [0.0] * k
    failed: list[int] = []  # the exit code of a worker that could not start

    def start(i: int) -> subprocess.Popen:
        cmd = [sys.executable, str(Path(__file__).resolve()), *args, "--server.port", str(ports[i]),
               "--server.address", "127.0.0.1", "--server.headless", "true"]
        started[i] = time.monotonic()
        return subprocess.Popen(cmd, env=worker_env(i, k, port))

    def supervise() -> None:  # a worker that dies (an OOM kill, a crash) is started again; its learners reconnect
        while not stopping.wait(1.0):
            exited = [i for i, p in enumerate(procs) if p is not None and p.poll() is not None]
            if exited and stopping.wait(0.5):  # the whole group was signalled: the front stops too
                return
            for i in exited:
                p = procs[i]
                if p.returncode == 0:  # Streamlit exits 0 only when asked to stop (a signal): leave it stopped
                    print(f"serve.py: worker {i} stopped (exit 0, asked to); not starting it again", file=sys.stderr)
                    procs[i] = None
                    continue
                if time.monotonic() - started[i] < START_S:  # it cannot start (a bad option): restarting won't help
                    print(f"serve.py: worker {i} exited with {p.returncode} within {START_S:.0f} s of starting; "
                          "stopping the server (its output is above)", file=sys.stderr, flush=True)
                    failed.append(p.returncode or 1)
                    os.kill(os.getpid(), signal.SIGTERM)
                    return
                print(f"serve.py: worker {i} exited with {p.returncode}; starting it again", file=sys.stderr)
                procs[i] = start(i)

    for i in range(k):
        procs[i] = start(i)
    threading.Thread(target=supervise, name="attnlab-supervise", daemon=True).start()
    print(f"serve.py: {k} workers (ports {', '.join(map(str, ports))}) behind http://{address or '0.0.0.0'}:{port}",
          file=sys.stderr, flush=True)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        def stop() -> None:  # before anything else: a worker stopped by the same signal is not restarted
            stopping.set()
            task.cancel()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        await front.serve(address, port, [("127.0.0.1", p) for p in ports])

    try:
        asyncio.run(run())
    except (asyncio.CancelledError, KeyboardInterrupt):
        pass
    finally:
        stopping.set()
        for p in procs:
            if p is not None and p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 10
        for p in procs:
            if p is not None:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
    return failed[0] if failed else 0


# XLA runs a GPU program's kernels as a CUDA graph, captured on the program's first run. A server runs many
# learners' programs from many threads, and while one thread captures, another thread's CUDA call (a compile
# loading its kernels, a launch) is refused or crashes: on the H200 an own-shape class of 20 got "Failed to
# launch CUDA graph: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: operation not permitted when stream is capturing"
# and a worker killed by SIGSEGV inside a program's call. Off for the server (each kernel launched on its
# own: a few microseconds more per kernel); an instructor's own XLA_FLAGS naming the flag win.
NO_CUDA_GRAPHS = "--xla_gpu_enable_command_buffer="


def server_xla_flags(flags: str) -> str:
    """XLA_FLAGS for the server's processes: `flags` plus CUDA graphs off, unless `flags` already sets them."""
    if "xla_gpu_enable_command_buffer" in flags:
        return flags
    return f"{flags} {NO_CUDA_GRAPHS}".strip()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    os.environ["XLA_FLAGS"] = server_xla_flags(os.environ.get("XLA_FLAGS", ""))  # before anything starts JAX
    k, args = take_option(args, "workers")
    k = k or os.environ.get("ATTNLAB_WORKERS", "1")
    if k == "auto":
        k = str(auto_workers())
    if not k.isdigit() or int(k) < 1:
        sys.exit(f"serve.py: --workers (or ATTNLAB_WORKERS) takes a whole number of processes or 'auto', not {k!r}")
    k = 1 if "ATTNLAB_WORKER" in os.environ else int(k)  # a worker serves, it does not start workers
    if k > 1:
        sys.exit(serve_workers(k, args))
    import faulthandler

    from streamlit.web import cli

    faulthandler.enable()  # a crash in native code (XLA, a kernel compiler) prints every thread's Python stack
    use_st_navigation_from_the_first_session()
    harden_the_server()
    refuse_cache_clearing()
    head_start()
    sys.argv = ["streamlit", "run", str(APP), *args]
    cli.main(prog_name="streamlit")


if __name__ == "__main__":
    main()
