"""attnlab.procs, the benchmarks' and tests' one copy of each process helper: a free port, a process tree, its
CPU and memory (psutil), and py-spy's samples read back (scripts/capacity.py --sample, scripts/samples.py)."""

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from attnlab import procs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def test_a_free_port_can_be_listened_on():
    port = procs.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_a_tree_holds_the_process_and_its_children_with_their_cpu_and_memory():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pids = [p.pid for p in procs.tree(os.getpid())]
        assert pids[0] == os.getpid() and child.pid in pids
        assert procs.cpu_seconds(os.getpid()) > 0 and procs.rss_bytes(os.getpid()) > 0
    finally:
        child.kill()
        child.wait()
    assert procs.tree(child.pid) == [] and procs.cpu_seconds(child.pid) is None and procs.rss_bytes(child.pid) is None
    busy, total = procs.machine_cpu()
    assert 0 <= busy <= total


def test_read_raw_reads_py_spys_collapsed_stacks(tmp_path):
    raw = tmp_path / "pyspy-1.txt"
    raw.write_text('process 7:"python serve.py";process 9:"python -c \nimport a; a.b(2)\n";thread (0x1F): '
                   "ScriptRunner.scriptThread;Thread._bootstrap (/usr/lib/python3.11/threading.py:1002);"
                   "page (/app/pages/p4.py:12);Condition.wait (/usr/lib/python3.11/threading.py:331) 42\n")
    (s,) = procs.read_raw(raw)  # a command line with a newline and a semicolon (python -c) is one stack
    assert s.processes == ['7:"python serve.py"', '9:"python -c \nimport a; a.b(2)\n"']
    assert s.thread == "ScriptRunner.scriptThread" and s.count == 42 and len(s.frames) == 3
    assert s.frames[-1] == procs.Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 331)
    assert s.frames[1].path == "/app/pages/p4.py" and s.frames[1].line == 12


needs_py_spy = pytest.mark.skipif(procs.py_spy() is None, reason="py-spy is not installed")

TOY = textwrap.dedent("""
    import threading, time
    def page():
        threading.Event().wait(60)
    threading.Thread(target=page, name="ScriptRunner.scriptThread", daemon=True).start()
    print("ready", flush=True)
    time.sleep(60)
""")


@needs_py_spy
def test_py_spy_records_where_each_named_thread_waits(tmp_path):
    toy = subprocess.Popen([sys.executable, "-c", TOY], stdout=subprocess.PIPE, text=True)
    try:
        assert toy.stdout.readline().strip() == "ready"
        with procs.Record([toy.pid], every=0.02, folder=tmp_path) as rec:
            time.sleep(1.5)
    finally:
        toy.kill()
        toy.wait()
    if rec.error and ("ptrace" in rec.error.lower() or "permission" in rec.error.lower()):
        pytest.skip(f"py-spy may not read other processes here: {rec.error}")
    assert rec.error is None and rec.files == [tmp_path / f"pyspy-{toy.pid}.txt"]
    stacks = [s for s in procs.read_raw(rec.files[0]) if s.thread == "ScriptRunner.scriptThread"]
    assert stacks and sum(s.count for s in stacks) >= 20  # a waiting thread is sampled too (--idle)
    assert any(f.function == "page" for s in stacks for f in s.frames)

    import samples  # scripts/samples.py: the page thread, "elsewhere" (not attnlab's code), waiting in threading

    assert samples.main([str(tmp_path)]) == 0
    assert {samples.key(s)[:2] for s in stacks} == {("ScriptRunner", "elsewhere")}


@needs_py_spy
def test_capacitys_sampler_counts_page_threads_by_the_labs_frame_and_the_page_line():
    import capacity

    source = "import threading\ndef page():\n    threading.Event().wait(1.0)\n"
    space: dict = {}
    exec(compile(source, str(ROOT / "pages" / "not_a_page.py"), "exec"), space)  # a frame of pages/, as a page's
    page = threading.Thread(target=space["page"], name="ScriptRunner.scriptThread")
    other = threading.Thread(target=lambda: threading.Event().wait(1.0), name="somebody-else")
    watch_source = "import threading\ndef _watch():\n    threading.Event().wait(1.0)\n"
    exec(compile(watch_source, str(ROOT / "pages" / "session_watch.py"), "exec"), space)  # the lab's own watcher
    watcher = threading.Thread(target=space["_watch"], name="attnlab-session-watch")
    with capacity.Sampler(0.02) as sampler:
        time.sleep(0.3)  # py-spy attaches
        page.start(), other.start(), watcher.start()
        page.join(), other.join(), watcher.join()
    r = sampler.report()
    assert set(r) == {"every_s", "thread_s", "lab", "leaf", "pair", "page"}  # the JSON capacity.py writes
    assert r["lab"][0][0] == "pages/not_a_page.py:page" and r["page"][0][0] == "pages/not_a_page.py:page:3"
    assert 0.5 <= r["thread_s"] <= 1.5  # only the page thread, about one second of it (not somebody-else, not the watcher)
    assert "capacity" not in capacity.profile_text(r)


def test_samples_counts_page_threads_busy_compile_threads_and_requests_and_not_threads_that_only_wait():
    import samples

    lab, pool = procs.Frame("_lower_and_compile", "/app/attnlab/measure/compiled.py", 9), procs.Frame(
        "_worker", "/usr/lib/python3.11/concurrent/futures/thread.py", 81)
    wait = procs.Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 331)
    serve = procs.Frame("DeviceWorker.call", "/app/attnlab/service/worker.py", 61)
    read = procs.Frame("_read", "/app/attnlab/service/child.py", 120)
    stack = lambda thread, *frames: procs.Stack([], thread, list(frames), 1)  # noqa: E731
    assert samples.key(stack("ScriptRunner.scriptThread", wait)) == ("ScriptRunner", "elsewhere", "threading.py:wait")
    assert samples.key(stack("attnlab-compile_3", pool, lab)) == ("attnlab-compile", "compiled.py:_lower_and_compile",
                                                                 "compiled.py:_lower_and_compile")
    assert samples.key(stack("attnlab-compile_3", pool)) is None  # idle in its pool
    assert samples.key(stack("Thread-7", serve, wait))[:2] == ("Thread", "worker.py:call")  # a Ray actor's request
    assert samples.key(stack("attnlab-child-reader", read, wait)) is None  # only waits for messages
    # --inside: a device turn's samples only, by the line of the lab's frame they were at (which part of the turn)
    held = procs.Frame("_run_held", "/app/attnlab/measure/runs.py", 233)
    block = procs.Frame("block_until_ready", "/usr/lib/python3/site-packages/jax/_src/api.py", 2950)
    assert samples.key(stack("Thread-7", serve, held, block), "runs.py:_run_held") == (
        "Thread", "runs.py:_run_held:233", "api.py:block_until_ready")
    assert samples.key(stack("Thread-7", serve, wait), "runs.py:_run_held") is None  # a request outside a turn
