"""The sandbox's fork server (attnlab/yourturn/forks.py): what a forked sandbox process holds, and the server's life."""

import os
import pickle
import signal
import time

import psutil

from attnlab.yourturn import exercises, forks, grade, sandbox


def _request(source: str) -> bytes:
    ex = exercises.ATTENTION
    cases = [(grade._specs(c), dict(c.numbers)) for c in ex.cases[:1]]
    return pickle.dumps((source, ex.entry, cases, "cpu", None, "highest"))


def test_a_sandbox_is_forked_by_the_server_with_only_its_pipes_and_the_sandboxs_environment(monkeypatch):
    monkeypatch.setenv("ATTNLAB_SECRET_OF_THE_SERVER", "not for learners")
    forks._stop()  # a server started now, under this environment
    proc = forks.start(*sandbox._environment())
    child = psutil.Process(proc.pid)
    deadline = time.monotonic() + 30
    while child.nice() != sandbox.NICE and time.monotonic() < deadline:  # main() lowers it first, then reads stdin
        time.sleep(0.05)
    watcher = child.parent()
    server = watcher.parent()
    assert server.pid == forks._server[0].pid and server.ppid() == os.getpid()  # never a fork of this process
    assert "attnlab.yourturn.forks" in " ".join(server.cmdline())
    env = child.environ()
    assert "ATTNLAB_SECRET_OF_THE_SERVER" not in env and env["JAX_PLATFORMS"] == "cpu"
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["XLA_FLAGS"] == ""
    assert sorted(int(fd) for fd in os.listdir(f"/proc/{proc.pid}/fd")) == [0, 1, 2]  # nothing of the server's
    assert child.nice() == sandbox.NICE
    stdout, stderr = proc.communicate(_request(exercises.ATTENTION.solution), timeout=60)
    assert proc.returncode == 0 and pickle.loads(stdout)[0] == "ok", stderr[-2000:]
    assert 0.05 < proc.cpu_s < sandbox.CPU_S  # its own CPU seconds, as its watcher read them when it ended


def test_a_killed_sandbox_reports_its_signal_and_the_server_serves_the_next():
    proc = forks.start(*sandbox._environment())
    os.kill(proc.pid, signal.SIGKILL)
    stdout, _ = proc.communicate(_request(exercises.ATTENTION.solution), timeout=30)
    assert proc.returncode == -signal.SIGKILL and stdout == b""
    assert grade.check("attention", exercises.ATTENTION.solution).passed


def test_a_dead_server_is_started_again_and_one_whose_socket_closes_ends():
    assert grade.check("attention", exercises.ATTENTION.solution).passed
    first = forks._server[0]
    first.kill()
    first.wait(10)
    assert grade.check("attention", exercises.ATTENTION.solution).passed  # the next check starts a new server
    second = forks._server[0]
    assert second.pid != first.pid
    forks._stop()  # as when the device worker ends: the server reads the end of its socket
    assert second.wait(30) == 0
