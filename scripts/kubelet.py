"""One pod run as a kubelet runs it, on this machine (scripts/rehearse.py starts one per pod of the manifests).

    k = Kubelet(pod, logs, on_ready=lambda ready: ...)   # a cluster_pods.Pod
    k.start(); ...; k.kill(); ...; k.stop()

Init containers run in order, each to completion (a failure is retried with the back-off below); then the
container runs, and is started again whenever it exits (restartPolicy: Always): the first time at once, then
after 10 s, 20 s, 40 s ... at most 300 s (CrashLoopBackOff), the delay forgotten after 10 minutes of running.
Init containers do not run again when only the container restarts (they would for a new pod). Killing a
container kills its whole process tree, as ending a container's cgroup does. As root, each container runs in a
PID namespace of its own (`unshare`), so that it sees only its own processes, as in a pod.

Probes as the kubelet runs them: a startup probe holds back the others until it passes and restarts the
container after `failures` misses; a liveness probe restarts it after `failures` consecutive misses; a readiness
probe makes the pod an endpoint after a pass and takes it out after `failures` consecutive misses (`on_ready`).
An HTTP probe passes on a status 200-399 within its timeout. Every probe result is kept (`results`).
Hand-written because no kubelet runs without a node and a container runtime, and this machine has neither.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil
from cluster_pods import ROOT, Pod, Probe

BACKOFF_S, BACKOFF_MAX_S, BACKOFF_RESET_S = 10.0, 300.0, 600.0


def _unshare() -> list[str]:
    """unshare's argv for a PID namespace of the container's own, or [] where this machine cannot make one (not
    root, or a container without CAP_SYS_ADMIN, as on the H200 machine may be)."""
    tool = shutil.which("unshare") if os.geteuid() == 0 else None
    argv = [tool, "--pid", "--fork", "--mount-proc", "--kill-child"] if tool else []
    if argv and subprocess.run([*argv, "true"], capture_output=True, timeout=10).returncode != 0:
        return []
    return argv


UNSHARE = _unshare()


def http_probe(probe: Probe) -> tuple[bool, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{probe.port}{probe.path}", timeout=probe.timeout) as r:
            return 200 <= r.status < 400, str(r.status)
    except urllib.error.HTTPError as e:
        return 200 <= e.code < 400, str(e.code)
    except (OSError, ValueError, http.client.HTTPException) as e:  # whatever answered was not a pod's HTTP
        return False, type(e).__name__


class Kubelet:
    def __init__(self, pod: Pod, logs: Path, on_ready: Callable[[bool], None] | None = None):
        self.pod, self.on_ready = pod, on_ready or (lambda ready: None)
        self.log = open(logs / f"{pod.name}.log", "ab")
        self.proc: subprocess.Popen | None = None
        self.ready = False
        self.restarts = 0
        self.results: list[tuple[float, str, str, bool, str]] = []  # (time, probe kind, source, passed, detail)
        self.events: list[tuple[float, str]] = []
        self.init_exits: dict[str, int] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._started_at = 0.0
        self._hold_s = 0.0
        self._thread = threading.Thread(target=self._run, name=f"kubelet-{pod.name}", daemon=True)

    def event(self, text: str) -> None:
        self.events.append((time.monotonic(), text))
        self.log.write(f"[kubelet {time.strftime('%H:%M:%S')}] {text}\n".encode())
        self.log.flush()

    def start(self) -> Kubelet:
        self._thread.start()
        return self

    def _spawn(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        # A container sees only its own processes: `ray start` refuses to start a head while it sees a raylet of
        # another pod pointing at its port, which no pod can see in a cluster. As root, a PID namespace of its own.
        if UNSHARE:
            argv = [*UNSHARE, *argv]
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    def _init(self) -> bool:
        delay = 0.0
        for name, argv, env in self.pod.init:
            while not self._stop.is_set():
                self.event(f"init container {name}: {' '.join(argv)[:200]}")
                code = self._spawn(argv, env).wait()
                self.init_exits[name] = code
                if code == 0:
                    break
                delay = min(BACKOFF_MAX_S, delay * 2 or BACKOFF_S)
                self.event(f"init container {name} exited {code}; again in {delay:.0f} s")
                if self._stop.wait(delay):
                    return False
        return not self._stop.is_set()

    def _run(self) -> None:
        if not self._init():
            return
        delay = 0.0
        while not self._stop.is_set():
            with self._lock:
                self.proc = self._spawn(self.pod.command, self.pod.env)
                self._started_at = time.monotonic()
            self.event(f"container started (pid {self.proc.pid}): {' '.join(self.pod.command)[:300]}")
            self._probe_until_exit()
            code = self.proc.wait()
            self._kill_all()  # what the container's main process left running ends with it
            self._set_ready(False)
            if self._stop.is_set():
                return
            ran = time.monotonic() - self._started_at
            delay = 0.0 if ran > BACKOFF_RESET_S else delay
            self.restarts += 1
            wait, self._hold_s = max(delay, self._hold_s), 0.0
            self.event(f"container exited {code} after {ran:.1f} s; restart {self.restarts} in {wait:.0f} s")
            if self._stop.wait(wait):
                return
            delay = min(BACKOFF_MAX_S, delay * 2 or BACKOFF_S)

    def _probe_until_exit(self) -> None:
        started = not any(p.kind == "startup" for p in self.pod.probes)
        t0 = time.monotonic()
        next_at = {id(p): t0 + p.initial_delay for p in self.pod.probes}
        misses = {id(p): 0 for p in self.pod.probes}
        while self.proc.poll() is None and not self._stop.is_set():
            now = time.monotonic()
            for p in self.pod.probes:
                if (p.kind == "startup") == started or now < next_at[id(p)]:
                    continue
                next_at[id(p)] = now + p.period
                passed, detail = http_probe(p)
                self.results.append((now, p.kind, p.source, passed, detail))
                misses[id(p)] = 0 if passed else misses[id(p)] + 1
                if p.kind == "startup" and passed:
                    started = True
                    for q in self.pod.probes:
                        next_at[id(q)] = max(next_at[id(q)], time.monotonic())
                elif p.kind == "readiness":
                    if passed or misses[id(p)] >= p.failures:
                        self._set_ready(passed)
                elif misses[id(p)] >= p.failures:  # startup or liveness: the kubelet kills the container
                    self.event(f"{p.kind} probe failed {misses[id(p)]} times ({detail}): killing the container")
                    self.kill(reason=f"{p.kind} probe")
                    return
            time.sleep(0.1)

    def _set_ready(self, ready: bool) -> None:
        if ready != self.ready:
            self.ready = ready
            self.event("ready" if ready else "not ready")
            self.on_ready(ready)

    def kill(self, reason: str = "fault", hold_s: float = 0.0) -> int | None:
        """SIGKILL the container's whole process tree (what its cgroup's end does); the loop starts it again, after
        `hold_s` at least (a pod made again on another node takes that long)."""
        self._hold_s = hold_s
        with self._lock:
            proc = self.proc
        if proc is None or proc.poll() is not None:
            return None
        self.event(f"killing the container ({reason}): {self._kill_all(proc.pid)} processes")
        return proc.pid

    def _kill_all(self, pid: int | None = None) -> int:
        """SIGKILL the container's processes: its main process's tree and every process that carries the pod's own
        TMPDIR (Ray's processes outlive their parent when it dies first; a container's end takes them all)."""
        victims = {}
        try:
            victims = {q.pid: q for q in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]} if pid else {}
        except psutil.Error:
            pass
        for q in psutil.process_iter():
            try:
                if q.pid not in victims and q.environ().get("TMPDIR") == str(self.pod.folder):
                    victims[q.pid] = q
            except psutil.Error:
                continue
        for q in victims.values():
            try:
                q.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        try:
            psutil.wait_procs(list(victims.values()), timeout=5)
        except OSError:  # psutil's pidfd_open on a pid already reaped (seen on the H200 machine)
            pass
        return len(victims)

    def stop(self) -> None:
        self._stop.set()
        self.kill(reason="stop")
        self._thread.join(timeout=30)
        self.log.close()

    def time_to_ready(self, since: float) -> float | None:
        """Seconds from `since` to the first time this pod became ready after it."""
        return next((t - since for t, text in self.events if t >= since and text == "ready"), None)
