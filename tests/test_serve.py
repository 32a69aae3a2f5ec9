"""serve.py as a server: what a client may not do to everyone's session, and how it refuses bad options.
(The browser's view of `--workers`: tests/test_browser.py; the front itself: tests/test_front.py.)"""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser_util import StreamlitServer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from st_client import Tab, run  # noqa: E402


def test_a_client_cannot_clear_every_learners_cached_results():
    """Streamlit lets any websocket send "clear cache" (every result of every learner, and the
    warm-up's resources); serve.py refuses it and says so in the log."""
    from streamlit.proto.BackMsg_pb2 import BackMsg

    async def visit_clear_visit(url: str):
        tab = await Tab.open(url)
        first = await tab.visit("qkv", "q_len=32&kv_len=32")
        msg = BackMsg()
        msg.clear_cache = True
        await tab.ws.send(msg.SerializeToString())
        await asyncio.sleep(0.5)
        again = await tab.visit("qkv", "q_len=32&kv_len=32")
        await tab.close()
        return first, again

    with StreamlitServer(env={"ATTNLAB_WARM": "0"}) as srv:
        first, again = run(visit_clear_visit(srv.url))
        deadline = time.monotonic() + 10
        while "refused" not in srv.log() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert first.ok and again.ok, (first, again)
        assert "asked to clear the server's caches; refused" in srv.log()


def test_a_bad_number_of_workers_is_refused_with_a_sentence():
    out = subprocess.run([sys.executable, "serve.py", "--workers", "two"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0 and "takes a whole number of processes or 'auto', not 'two'" in out.stderr
    assert "Traceback" not in out.stderr


def test_auto_is_one_worker_per_two_cpus_and_at_most_four(monkeypatch):
    import serve

    for cpus, workers in [(1.0, 1), (2.0, 1), (5.0, 2), (8.0, 4), (224.0, 4)]:
        monkeypatch.setattr(serve, "usable_cpus", lambda c=cpus: c)
        assert serve.auto_workers() == workers


def test_workers_that_cannot_start_stop_the_server_instead_of_restarting_forever():
    out = subprocess.run([sys.executable, "serve.py", "--workers", "2", "--server.port", "0", "--server.bogus", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "within 20 s of starting; stopping the server" in out.stderr
    assert out.stderr.count("starting it again") == 0


def _serve_two(tmp_path):
    import os

    from browser_util import free_port, healthy

    port, log = free_port(), tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "serve.py", "--workers", "2", "--server.headless", "true",
                                 "--server.port", str(port)], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "ATTNLAB_WARM": "0"}, start_new_session=True)
    deadline = time.monotonic() + 120
    while not healthy(f"http://127.0.0.1:{port}", timeout=2) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(21)  # past the 20 s within which a worker's exit means it cannot start at all
    return proc, log


def _workers(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return sorted(int(p) for p in out.stdout.split())


def test_a_worker_that_dies_is_started_again_and_one_asked_to_stop_is_not(tmp_path):
    import os
    import signal

    proc, log = _serve_two(tmp_path)
    try:
        first, second = _workers(proc.pid)
        os.kill(first, signal.SIGKILL)  # as the kernel's OOM killer would
        os.kill(second, signal.SIGTERM)  # as someone stopping that one process would
        deadline = time.monotonic() + 30
        while "; starting it again" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(2)
        text = log.read_text()
        assert text.count("; starting it again") == 1 and "exited with -9; starting it again" in text, text[-2000:]
        assert "stopped (exit 0, asked to); not starting it again" in text
        assert len(_workers(proc.pid)) == 1  # the new one
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_a_signal_to_the_whole_group_stops_the_server_without_restarting_workers(tmp_path):
    """A signal to the process group (a benchmark's killpg, Ctrl-C in a terminal) reaches the workers
    and the front at once: the workers' exits are the server stopping, not workers to start again."""
    import os
    import signal

    proc, log = _serve_two(tmp_path)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "; starting it again" not in log.read_text(), log.read_text()[-2000:]


def test_workers_keep_compile_caches_of_their_own_each_capped(monkeypatch):
    # one folder shared by the workers: capped, every read and write of every worker queues for one file
    # lock; uncapped, JAX writes entries in place with no lock and a worker can read another's half-written
    # program. So each worker gets a folder of its own, capped (its share of the pod's cap) so JAX locks it.
    import serve

    monkeypatch.delenv("JAX_COMPILATION_CACHE_MAX_SIZE", raising=False)
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    env = serve.worker_env(0, 2, 8501)
    assert "JAX_COMPILATION_CACHE_MAX_SIZE" not in env and "JAX_COMPILATION_CACHE_DIR" not in env  # no cache
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/tmp/jax-cache")
    envs = [serve.worker_env(i, 4, 8501) for i in range(4)]
    assert [e["JAX_COMPILATION_CACHE_DIR"] for e in envs] == [f"/tmp/jax-cache/worker-{i}" for i in range(4)]
    assert {e["JAX_COMPILATION_CACHE_MAX_SIZE"] for e in envs} == {str(2 * 2**30)}  # 8 GiB split four ways
    monkeypatch.setenv("JAX_COMPILATION_CACHE_MAX_SIZE", "12345")
    assert serve.worker_env(1, 2, 8501)["JAX_COMPILATION_CACHE_MAX_SIZE"] == "6172"
    monkeypatch.setenv("JAX_COMPILATION_CACHE_MAX_SIZE", "8GiB")  # a message, not a traceback
    with pytest.raises(SystemExit, match="whole number of bytes"):
        serve.worker_env(1, 2, 8501)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_MAX_SIZE", "-1")  # JAX's "no cap" still gets one: the lock
    assert serve.worker_env(1, 2, 8501)["JAX_COMPILATION_CACHE_MAX_SIZE"] == str(4 * 2**30)


def test_the_server_turns_xlas_cuda_graphs_off_unless_told_otherwise():
    # many threads run programs at once; a CUDA graph being captured on one makes other threads' CUDA calls
    # fail (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) or crash the process, as measured on the H200
    import serve

    assert serve.server_xla_flags("") == "--xla_gpu_enable_command_buffer="
    assert serve.server_xla_flags("--xla_gpu_autotune_level=0") == (
        "--xla_gpu_autotune_level=0 --xla_gpu_enable_command_buffer=")
    own = "--xla_gpu_enable_command_buffer=FUSION"
    assert serve.server_xla_flags(own) == own


def test_timings_say_when_the_server_launches_kernels_without_cuda_graphs(monkeypatch):
    import serve
    from attnlab.measure import timing

    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level=4")
    assert timing.launch_note() == ""
    monkeypatch.setenv("XLA_FLAGS", serve.server_xla_flags("--xla_gpu_autotune_level=4"))
    assert "CUDA graphs off" in timing.launch_note()
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_command_buffer=FUSION")
    assert timing.launch_note() == ""


def asgi_get(app, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[dict, bytes]:
    """One GET through an ASGI app: its response start message and its whole body."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    request = app({"type": "http", "method": "GET", "path": path, "headers": headers}, receive, send)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a loop of its own: Playwright may run one in this thread
        pool.submit(asyncio.run, request).result()
    return sent[0], b"".join(m.get("body", b"") for m in sent[1:])


def test_a_pages_html_says_where_the_server_is_so_the_browser_does_not_probe_the_pages_path():
    import serve

    asked = []

    async def streamlit(scope, receive, send):  # index.html in two parts, compressed when the client allows it
        asked.append(dict(scope["headers"]))
        body = b"<html><head><title>x</title></head></html>"
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body[:10], "more_body": True})
        await send({"type": "http.response.body", "body": body[10:]})

    for base, path in (("", "/causal"), ("", "/causal/"), ("lab", "/lab/causal")):
        start, body = asgi_get(serve.Harden(streamlit, base=base), path, [(b"accept-encoding", b"gzip")])
        assert body.startswith(b"<html><head>" + serve.BASE_URL_HINT + b"<title>"), body
        assert dict(start["headers"])[b"content-length"] == str(len(body)).encode()
        assert dict(start["headers"])[b"x-frame-options"] == b"SAMEORIGIN"
        assert b"accept-encoding" not in asked[-1]  # asked uncompressed, so it can be edited
    for base, path in (("", "/"), ("", "/favicon.png"), ("", "/_stcore/health"), ("", "/static/js/x.js"),
                       ("lab", "/lab"), ("lab", "/causal"), ("", "/a/b")):
        start, body = asgi_get(serve.Harden(streamlit, base=base), path, [(b"accept-encoding", b"gzip")])
        assert serve.BASE_URL_HINT not in body, path
        assert asked[-1].get(b"accept-encoding") == b"gzip", path


def test_the_hint_points_the_browser_at_the_pages_parent():
    # the script's own arithmetic, run by Node where there is one: /causal -> /, /lab/causal/ -> /lab/
    import shutil

    import serve

    if not shutil.which("node"):
        pytest.skip("no node to run the script")
    script = serve.BASE_URL_HINT.decode().removeprefix("<script>").removesuffix("</script>")
    for pathname, expected in (("/causal", "http://h:1/"), ("/causal/", "http://h:1/"), ("/lab/causal", "http://h:1/lab/")):
        js = (f"var window={{}};var location={{pathname:{pathname!r},origin:'http://h:1'}};{script}"
              "console.log(window.__streamlit.BACKEND_BASE_URL)")
        out = subprocess.run(["node", "-e", js], capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == expected, out.stderr
