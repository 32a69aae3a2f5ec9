"""The sandbox's processes, forked from a server that has loaded JAX once: a check pays for tracing and compiling
the learner's function, not for importing JAX again (a check of the attention exercise: its sandbox used 2.2-3.0 s
of CPU as a new interpreter, 1.1-1.3 s forked, on this 2-core machine).

    proc = start(env, cwd)    # a new sandbox process, like subprocess.Popen([python, "-m", sandbox], ...)
    proc.communicate(request, timeout) -> (stdout, stderr)    # raises subprocess.TimeoutExpired
    proc.pid, proc.kill(); once it has ended: proc.returncode, proc.cpu_s (its CPU seconds, user and system)

The server (`python -m attnlab.yourturn.forks`) is a fresh interpreter started with the sandbox's environment, never
a fork of the device worker (whose JAX holds threads and a GPU). It imports JAX (no backend: importing makes none)
and waits on a socket; for each process it is sent the ends of four pipes and forks a watcher, which forks the
sandbox on those pipes (stdin, stdout, stderr) and writes the sandbox's pid, then its exit status and CPU
seconds, on the fourth. It ends when the process that started it closes the socket; one that died is started
again on the next call.

Hand-written, not multiprocessing's forkserver: each of that server's children first re-imports the parent's
`__main__` (the device worker's own module; under Ray, Ray's worker), and none gets its own stdin, stdout and
stderr, which the sandbox's limits and messages are built on (attnlab/yourturn/sandbox.py)."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

PRELOAD = ("jax", "jax.numpy", "jax.export", "jax.extend.core", "jax._src.export.serialization",
           "attnlab.yourturn.allowed_names", "attnlab.yourturn.allowlist", "attnlab.yourturn.bounds",
           "attnlab.yourturn.sandbox")

_lock = threading.Lock()
_server: tuple[subprocess.Popen, socket.socket, tuple] | None = None


class Forked:
    """A sandbox process forked by the server: the subset of subprocess.Popen the sandbox uses."""

    def __init__(self, pid: int, stdin: int, stdout: int, stderr: int, status: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.cpu_s: float | None = None
        self._in, self._status = stdin, status
        self._out: dict[int, bytearray] = {stdout: bytearray(), stderr: bytearray()}
        self._stdout, self._stderr = stdout, stderr
        self._pending = b""
        self._sel = selectors.DefaultSelector()
        self._sel.register(stdout, selectors.EVENT_READ)
        self._sel.register(stderr, selectors.EVENT_READ)
        self._sel.register(status, selectors.EVENT_READ)
        self._status_text = b""

    def communicate(self, input: bytes | None = None, timeout: float | None = None) -> tuple[bytes, bytes]:
        if input is not None and self._in >= 0:
            self._pending = input
            self._sel.register(self._in, selectors.EVENT_WRITE)
            if not input:
                self._close_stdin()
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._sel.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("sandbox", timeout or 0.0)
            for key, _ in self._sel.select(left):
                self._step(key.fd)
        self._sel.close()
        return bytes(self._out[self._stdout]), bytes(self._out[self._stderr])

    def _step(self, fd: int) -> None:
        if fd == self._in:
            try:
                sent = os.write(fd, self._pending[:1 << 16])
            except BrokenPipeError:
                sent = len(self._pending)
            self._pending = self._pending[sent:]
            if not self._pending:
                self._close_stdin()
            return
        chunk = os.read(fd, 1 << 16)
        if chunk and fd == self._status:
            self._status_text += chunk
        elif chunk:
            self._out[fd] += chunk
        else:
            self._sel.unregister(fd)
            os.close(fd)
            if fd == self._status:  # the watcher wrote the exit status and ended
                words = self._status_text.split()  # its exit code and CPU seconds (start() read the pid)
                if len(words) == 2:
                    self.returncode, self.cpu_s = int(words[0]), float(words[1])
                else:  # the watcher itself was killed: the sandbox's end is not known
                    self.returncode = 1

    def _close_stdin(self) -> None:
        if self._in in self._sel.get_map():
            self._sel.unregister(self._in)
        os.close(self._in)
        self._in = -1

    def kill(self) -> None:
        """SIGKILL to the sandbox, unless its watcher has reported its end (then its pid may be another's)."""
        if self.returncode is not None:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start(env: dict[str, str], cwd: str) -> Forked:
    """A new sandbox process (`python -m attnlab.yourturn.sandbox`, forked), its stdin, stdout and stderr pipes."""
    with _lock:
        for attempt in (0, 1):
            server = _ensure(env, cwd)
            pipes = [os.pipe() for _ in range(4)]
            theirs = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1]]
            try:
                socket.send_fds(server[1], [b"f"], theirs)
            except OSError:
                for fd in (pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0]):
                    os.close(fd)
                _stop()
                if attempt:
                    raise
                continue
            finally:
                for fd in theirs:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            break
    stdin, stdout, stderr, status = pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0]
    text = b""
    while b"\n" not in text:  # the watcher's first line: the sandbox's pid
        chunk = os.read(status, 64)
        if not chunk:
            for fd in (stdin, stdout, stderr, status):
                os.close(fd)
            raise OSError("the sandbox's fork server ended before it forked")
        text += chunk
    pid, rest = text.split(b"\n", 1)
    proc = Forked(int(pid), stdin, stdout, stderr, status)
    proc._status_text = rest  # where the sandbox ended already, its exit line came with the pid
    return proc


def start_server(env: dict[str, str], cwd: str) -> None:
    """Start the server now, where none runs (a device worker's start does, in a quiet moment), not at a first check."""
    with _lock:
        _ensure(env, cwd)


def _ensure(env: dict[str, str], cwd: str) -> tuple[subprocess.Popen, socket.socket, tuple]:
    """The running server for this environment (under _lock), started where there is none or it died."""
    global _server
    if _server is None or _server[0].poll() is not None or _server[2] != (env, cwd):
        _stop()
        _server = _start_server(env, cwd)
    return _server


def _start_server(env: dict[str, str], cwd: str) -> tuple[subprocess.Popen, socket.socket, tuple]:
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-m", "attnlab.yourturn.forks", str(theirs.fileno())], env=env,
                            cwd=cwd, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
    theirs.close()
    return proc, ours, (env, cwd)


def _stop() -> None:
    global _server
    if _server is not None:
        _server[1].close()  # the server reads the end of its socket and exits
        _server = None


# -- the server --------------------------------------------------------------------------------------------------
def serve(sock: socket.socket) -> None:
    """Fork a watcher for each message, on the pipes it brought; end when the socket closes."""
    for name in PRELOAD:
        __import__(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # watchers are reaped by the kernel
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 16, 4)
        except OSError:
            return
        if not msg:
            return
        if len(fds) == 4 and os.fork() == 0:
            _watch(sock, fds)  # never returns
        for fd in fds:
            os.close(fd)


def _watch(sock: socket.socket, fds: list[int]) -> None:
    """In the watcher: fork the sandbox on the pipes, write its pid and then its exit status, and end."""
    code = 1
    try:
        sock.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        stdin, stdout, stderr, status = fds
        pid = os.fork()
        if pid == 0:
            for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
                os.dup2(fd, target)
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            from attnlab.yourturn import sandbox

            try:
                sandbox.main()  # its answer, on the stdout it had (it moves sys.stdout to stderr): flushed here
                for stream in (sys.__stdout__, sys.__stderr__):
                    if stream is not None:
                        stream.flush()
                os._exit(0)
            except BaseException:  # noqa: BLE001 (the traceback is the parent's to read)
                import traceback

                traceback.print_exc()
                sys.stderr.flush()
                os._exit(1)
        for fd in (stdin, stdout, stderr):
            os.close(fd)
        os.write(status, f"{pid}\n".encode())
        _, wait_status, usage = os.wait4(pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
        os.write(status, f"{os.waitstatus_to_exitcode(wait_status)} {cpu:.3f}\n".encode())
        code = 0
    finally:
        os._exit(code)


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
