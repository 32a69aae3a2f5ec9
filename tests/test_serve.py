"""serve.py as a server: its device worker in a child process, what a client may not do to everyone's
session, and what every response carries. (The device service itself: tests/test_service.py.)"""

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

from pages.st_client import Tab, run  # noqa: E402


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


def _device_workers(pid: int) -> list:
    """The server's device worker that holds the device (its spare left out)."""
    import psutil

    from attnlab import procs

    return procs.device_workers(psutil.Process(pid).children(recursive=True))


CRASH_LINKS = [("cudnn", "head_dim=1"), ("naive-vs-fused", "dtype=bfloat16&head_dim=1")]  # XLA's CPU compiler aborts


def test_the_device_work_runs_in_a_child_process_and_a_native_abort_costs_one_page():
    """The issue's crash links, with the known-abort refusal off so that the worker meets the abort: the
    server answers, the page says what failed, the next page renders, and the worker is a new process."""
    async def learner(url: str):
        tab = await Tab.open(url)
        seen = [await tab.visit(page, query, 120) for page, query in CRASH_LINKS]
        seen.append(await tab.visit("qkv", "q_len=32&kv_len=32", 120))
        seen.append(await tab.visit("naive-vs-fused", "", 120))
        await tab.close()
        return seen

    with StreamlitServer(env={"ATTNLAB_WARM": "0", "ATTNLAB_REFUSE_KNOWN_ABORTS": "0"}) as srv:
        before = [w.pid for w in _device_workers(srv.pid)]
        assert len(before) == 1 and before[0] != srv.pid
        seen = run(learner(srv.url))
        assert all(s.ok for s in seen), seen  # every page came back, with no exception
        assert "was killed by signal 6 (SIGABRT)" in srv.log()
        deadline = time.monotonic() + 30  # the new worker may still be starting (a loaded CI machine)
        while len(after := [w.pid for w in _device_workers(srv.pid)]) != 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(after) == 1 and after != before, (after, before, srv.log()[-3000:])
        assert seen[-1].elements > 20  # the page after the crashes is whole


def test_with_the_known_abort_refused_the_crash_links_say_why_and_the_worker_lives():
    async def learner(url: str):
        tab = await Tab.open(url)
        seen = [await tab.visit(page, query, 120) for page, query in CRASH_LINKS]
        await tab.close()
        return seen

    with StreamlitServer(env={"ATTNLAB_WARM": "0"}) as srv:
        before = [w.pid for w in _device_workers(srv.pid)]
        assert all(s.ok for s in run(learner(srv.url)))
        assert [w.pid for w in _device_workers(srv.pid)] == before and "was killed" not in srv.log()


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


# -- readiness: /_attnlab/ready says whether the device service can be reached ---------------------------
async def _nothing(scope, receive, send):  # Streamlit behind Harden: never reached by the readiness path
    raise AssertionError("the readiness path went past Harden")


def _ready(path: str = "/_attnlab/ready") -> tuple[int, str, float]:
    import serve

    t0 = time.monotonic()
    start, body = asgi_get(serve.Harden(_nothing), path, [])
    return start["status"], body.decode(), time.monotonic() - t0


@pytest.fixture
def fresh_service():
    from attnlab import service

    service.reset()
    yield service
    service.reset()


def test_ready_with_the_in_process_device(fresh_service):
    from attnlab import settings

    with settings.override(device="inprocess"):
        assert _ready()[:2] == (200, "ok")
        assert _ready("/lab/_attnlab/ready")[:2] == (200, "ok")  # below a base path too


def test_ready_with_the_child_device_once_its_worker_answers_and_while_it_is_started_again(fresh_service):
    import os
    import signal

    from attnlab import service, settings

    service.WORKER_ENV.update(JAX_PLATFORMS="cpu", ATTNLAB_WARM="0")
    try:
        with settings.override(device="child"):
            status, body, _ = _ready()
            assert status == 503 and "starting" in body or status == 200, body  # the first start: not ready yet
            assert service.client().wait_ready(120)
            time.sleep(2.1)  # past the kept answer
            assert _ready()[:2] == (200, "ok")
            child = service.client()
            os.kill(child.proc.pid, signal.SIGKILL)  # a crash: one request lost, the server still ready
            deadline = time.monotonic() + 10
            while not child.restarts and time.monotonic() < deadline:
                time.sleep(0.05)
            assert child.restarts == 1 and child.ready() is None  # being started again (JAX imports for seconds)
            time.sleep(2.1)
            assert _ready()[:2] == (200, "ok")
    finally:
        service.WORKER_ENV.clear()


def test_not_ready_with_a_sentence_when_ray_cannot_be_reached(fresh_service, monkeypatch):
    from browser_util import free_port

    from attnlab import settings

    monkeypatch.setenv("RAY_CLIENT_RECONNECT_GRACE_PERIOD", "5")  # what RayWorkers would set, put back afterwards
    address = f"ray://127.0.0.1:{free_port()}"  # nothing listens there
    with settings.override(device="ray", ray_address=address):
        status, body, seconds = _ready()
        assert status == 503 and "cannot be reached" in body and address in body, body
        assert seconds < 4.5  # inside the probe's 5 s timeout


def test_readiness_never_raises_and_never_waits_past_its_budget(fresh_service, monkeypatch):
    import threading

    from attnlab import service

    class Broken:
        def ready(self):
            raise RuntimeError("no such thing")

    class Hung:
        def ready(self):
            threading.Event().wait(30)

    monkeypatch.setattr(service, "client", lambda: Broken())
    status, body, _ = _ready()
    assert status == 503 and "RuntimeError: no such thing" in body
    service.reset()
    monkeypatch.setattr(service, "client", lambda: Hung())
    status, body, seconds = _ready()
    assert status == 503 and "did not answer within 2 s" in body and seconds < 3


def test_a_server_stays_live_but_not_ready_while_ray_cannot_be_reached():
    import urllib.error
    import urllib.request

    from browser_util import free_port

    address = f"ray://127.0.0.1:{free_port()}"
    with StreamlitServer(env={"ATTNLAB_WARM": "0", "ATTNLAB_DEVICE": "ray", "ATTNLAB_RAY_ADDRESS": address}) as srv:
        with urllib.request.urlopen(f"{srv.url}/_stcore/health", timeout=5) as r:
            assert r.status == 200  # liveness: the UI itself is fine
        t0 = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{srv.url}/_attnlab/ready", timeout=5)
        assert e.value.code == 503 and "cannot be reached" in e.value.read().decode() and time.monotonic() - t0 < 5


def test_a_head_that_accepts_but_does_not_answer_costs_a_ui_seconds_not_ray_clients_minute(tmp_path):
    # a head whose client port accepts TCP while its server is still starting: Ray's client, left to its defaults,
    # waits 5 + 10 + 15 s before it gives up, and the UI could not try again (nor be ready) for all that time
    import os
    import socket
    import subprocess
    import sys

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepts, never answers
    try:
        code = ("import sys, time; from attnlab.service.ray_workers import RayWorkers; t = time.monotonic(); "
                "w = RayWorkers(sys.argv[1]); print(round(time.monotonic() - t, 1)); print(w.broken)")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_CLIENT_")}
        out = subprocess.run([sys.executable, "-c", code, f"ray://127.0.0.1:{listener.getsockname()[1]}"], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=120)
    finally:
        listener.close()
    seconds, broken = out.stdout.splitlines()[:2]
    assert broken, out.stdout + out.stderr[-2000:]  # it said why it could not connect (and retries on a request)
    assert float(seconds) < 15, (seconds, broken)


def test_the_warm_up_opens_every_page_at_the_class_shapes_so_a_first_visit_there_computes_nothing(tmp_path):
    """ATTNLAB_CLASS_SHAPES (an instructor's): the warm-up opens every page at each shape through the server's own
    door (here the quick mode's token door), logs a line per shape and a sentence for an entry that is not a shape;
    a learner's first visit at a class shape then sends the device worker nothing it has to compute (its request
    log). Before the warm-up visited, that visit compiled and ran programs of its own."""
    import json

    from attnlab.studies import warm

    requests = tmp_path / "requests.jsonl"
    query = "q_len=48&kv_len=48&heads=2&kv_heads=1"
    env = {"ATTNLAB_WARM": "1", "ATTNLAB_ACCESS_TOKEN": "s3cret", "ATTNLAB_REQUEST_LOG": str(requests),
           "ATTNLAB_CLASS_SHAPES": f"{query} kvheads=2"}
    cookie = {"Cookie": "attnlab_token=s3cret"}

    async def visit(url: str, pages: list[str]):
        tab = await Tab.open(url, headers=cookie)
        try:
            return [await tab.visit(p, query) for p in pages]
        finally:
            await tab.close()

    with StreamlitServer(env=env) as srv:
        assert run(visit(srv.url, [""]))[0].ok  # the first page's run starts the warm-up (app.py)
        deadline = time.monotonic() + 600
        while "warm class shape" not in srv.log(100_000) and warm.STOPPED not in srv.log() and time.monotonic() < deadline:
            time.sleep(1)
        log = srv.log(100_000)
        line = next((x for x in log.splitlines() if x.startswith("warm class shape")), log[-2000:])
        assert line.startswith(f"warm class shape {query}: 11 of 11 pages"), line
        assert "'kvheads=2' is not a shape (kvheads: not a setting of the shape)" in log
        before = len(requests.read_text().splitlines())
        seen = run(visit(srv.url, ["naive-vs-fused", "cudnn", "causal", "benchmarks", "mha-gqa-mqa"]))
        assert all(s.ok for s in seen), seen
        after = [json.loads(x) for x in requests.read_text().splitlines()[before:]]
        computed = [x["what"] for x in after if x["how"] == "computed" and x["fn"] != "warm_shape"]  # the presets' own
        assert computed == [], computed
