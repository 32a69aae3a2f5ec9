"""A learner's code traced in a disposable process: only its compiled program comes back.

    blobs = export(source, "attention", [specs_of_case_1, ...], platform="cuda")   # -> [bytes, ...]

The code passes the allowlist (attnlab/yourturn/allowlist.py) before it gets here and again here. A fresh
process that sees no GPU (forked from a server that loaded JAX once: attnlab/yourturn/forks.py) runs it with only
the allowed names, under limits set first: CPU seconds, address space, no file written (RLIMIT_FSIZE 0), no new
descriptor (RLIMIT_NOFILE). It traces the function at each case, refuses a program past the exercise's limits
(attnlab/yourturn/bounds.py), compiles it for its CPU (a compile that aborts or never ends ends here) and
exports it with `jax.export`; the parent kills it after WALL_S, or after BUSY_WALL_S where it spent that time
waiting for a CPU (a busy server, not the learner's code). The learner's Python never runs in a process that
holds a GPU or a learner's session.

The limits are hand-written (`resource`): no library sets them on a process before it runs untrusted code; the
process is forked from a fresh interpreter, never from the device worker (JAX's threads, a GPU context)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from types import SimpleNamespace

from attnlab.yourturn import forks

WALL_S = 30.0  # to trace and export at every case (a solution: 1-2 s of CPU on a laptop's core)
# ...and, where by WALL_S it had less than CPU_S / 2 of CPU (it ran at NICE on busy cores), at most this in all: killed
# and retried it would start again from nothing (at 5 % of a core on a loaded 2-core machine, a solution needs 60 s)
BUSY_WALL_S = 120.0
CPU_S = 10
ADDRESS_SPACE_EXTRA = 3 * 2**30  # bytes the process may grow by once JAX is loaded
NICE = 10  # the process's CPU priority below the server's and the worker's


class Stopped(RuntimeError):
    """The learner's code ran into a limit (time, memory) or raised while being traced."""


class Refused(Stopped):
    """The learner's traced program is past the exercise's bounds (attnlab/yourturn/bounds.py): never compiled."""


def export(source: str, entry: str, cases: list[tuple[list[tuple[tuple[int, ...], str]], dict]],
           platform: str, precision: str | None = None, limits: list | None = None,
           stats: list | None = None) -> list[bytearray]:
    """The serialised program of `entry` at each case: (input (shape, dtype) list, Python numbers) -> bytes.
    Raises Stopped with a sentence (a limit, or the code's own error while tracing).

    `limits`: a `bounds.Limits` per case: a traced program past them is refused, and it is compiled for this
    CPU before export, so a compile that never ends or aborts ends this process only. `stats`: receives each
    case's `bounds.Stats`. `precision`: JAX's default matmul precision while tracing ("highest" for a check:
    TF32's rounding alone fails a correct function at its large logits; None for a timing)."""
    from attnlab.yourturn import allowlist

    why = allowlist.refusal(source, entry)
    if why:
        raise Stopped(why)
    request = pickle.dumps((source, entry, cases, platform, limits, precision))
    try:
        proc = forks.start(*_environment())
    except OSError as e:
        raise Stopped(f"the lab could not start a process to trace your function ({e}): press Check again") from None
    try:
        stdout, stderr = _communicate(proc, request)
    except subprocess.TimeoutExpired:
        used = _cpu_s(proc.pid)
        proc.kill()
        proc.communicate()
        if used is not None and used < CPU_S / 2:  # it waited for a CPU: the server's load, not the learner's code
            raise Stopped(f"the lab's server was too busy to trace your function within {BUSY_WALL_S:.0f} s (it had "
                          f"{used:.1f} s of CPU; a solution needs 1-2): press Check again in a moment") from None
        raise Stopped(f"tracing your function took more than {WALL_S:.0f} s, so the lab stopped it "
                      "(a loop or recursion that does not end?)") from None
    except BaseException:  # as subprocess.run does: never leave the process behind
        proc.kill()
        proc.communicate()
        raise
    code = proc.returncode if proc.returncode is not None else 1
    if code != 0 or not stdout:
        tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        if "MemoryError" in tail[0] or code in (-9, -6, -11):
            raise Stopped(f"tracing or compiling your function ran out of the memory the lab gives it, or its "
                          f"compiler gave up ({how}): a huge number or array?")
        if code == -24 or (proc.cpu_s or 0.0) >= CPU_S - 0.5:  # SIGXCPU, or the CPU it had (the limit's hard kill)
            raise Stopped(f"tracing and compiling your function used more than {CPU_S} s of CPU, so the lab stopped "
                          "it (a solution takes about one): a huge program, or a huge constant to fold?")
        raise Stopped(f"the lab could not trace your function ({how}): {tail[0][:300]}")
    status, payload = pickle.loads(stdout)
    if status == "refused":
        raise Refused(payload)
    if status != "ok":
        raise Stopped(payload)
    blobs, walked = payload
    if stats is not None:
        stats.extend(walked)
    return blobs


def _environment() -> tuple[dict[str, str], str]:
    """The sandbox's environment (the CPU alone, no GPU, no flags, none of the server's variables) and directory."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH", "")])),
           "HOME": os.environ.get("TMPDIR", "/tmp"), "PYTHONDONTWRITEBYTECODE": "1",
           "XLA_FLAGS": "", "JAX_ENABLE_X64": "0", "OPENBLAS_NUM_THREADS": "1"}
    return env, root


def start_server() -> None:
    """The fork server started now (attnlab/yourturn/forks.py: JAX's import, 1-2 s of CPU), not at a first check."""
    forks.start_server(*_environment())


def _communicate(proc: forks.Forked, request: bytes) -> tuple[bytes, bytes]:
    """The process's output once it ends: within WALL_S, or within BUSY_WALL_S where by WALL_S it had had
    less than CPU_S / 2 of CPU (still waiting its turn: nothing it ran could block, the allowlist sees to that).
    Raises subprocess.TimeoutExpired past either, the process still running."""
    try:
        return proc.communicate(request, timeout=WALL_S)
    except subprocess.TimeoutExpired:
        used = _cpu_s(proc.pid)
        if used is None or used >= CPU_S / 2 or BUSY_WALL_S <= WALL_S:
            raise
    return proc.communicate(timeout=BUSY_WALL_S - WALL_S)  # the input was sent; the output so far is kept


def _cpu_s(pid: int) -> float | None:
    """CPU seconds the process `pid` has used (user and system), or None once it is gone."""
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return t.user + t.system


# -- the disposable process ------------------------------------------------------------------------
class _TooLong(Exception):
    pass


TRACE_OVER_EQNS = 4  # operations JAX may record while tracing, over the walk's limit, before tracing stops


def _count_operations():
    """A counter of the operations JAX records while tracing (its trace's process_primitive): past
    `counter.most` tracing stops at once, before the walk would see the whole program. None on a JAX without
    that method (the walk still refuses, only later)."""
    try:
        from jax._src.interpreters import partial_eval as pe

        original = pe.DynamicJaxprTrace.process_primitive
    except (ImportError, AttributeError):
        return None
    counter = SimpleNamespace(seen=0, most=0)

    def counted(self, *args, **kwargs):  # whatever this JAX's signature is
        counter.seen += 1
        if counter.most and counter.seen > counter.most:
            raise _TooLong(counter.seen)
        return original(self, *args, **kwargs)

    pe.DynamicJaxprTrace.process_primitive = counted
    return counter


def _limit() -> None:
    """From here on: no new files or sockets, nothing written, bounded CPU and memory."""
    import resource

    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (vm + ADDRESS_SPACE_EXTRA, vm + ADDRESS_SPACE_EXTRA))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    # a new descriptor takes the lowest free number: with the limit at that number, none can be made
    listed = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    lowest_free = next(n for n in range(listed[-1] + 2) if not _is_open(n))
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, lowest_free))


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def main() -> None:
    os.nice(NICE)  # a learner's tracing and CPU compile yield the cores to the class's pages and runs
    request = sys.stdin.buffer.read()
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing the traced code does can write to the answer's channel
    import functools

    import jax

    from attnlab.yourturn import allowed_names, allowlist

    source, entry, cases, platform, limits, precision = pickle.loads(request)
    jax.config.update("jax_default_matmul_precision", precision)
    why = allowlist.refusal(source, entry)
    if why:
        out.write(pickle.dumps(("refused", why)))
        return
    code = compile(source, "<your code>", "exec")
    scope = allowed_names.scope()
    jax.export.export  # noqa: B018  (loaded before the limits: its modules are imported now)
    import jax.extend.core  # noqa: F401  (bounds.walk reads it: imported before the limits forbid opening files)
    from jax._src.export import serialization  # noqa: F401

    from attnlab.yourturn import bounds

    # trace, compile and export a trivial program once: JAX's lowering and CPU client load before the limits
    trivial = jax.jit(lambda x: x + 1)
    trivial.trace(jax.ShapeDtypeStruct((1,), "float32")).lower().compile()
    jax.export.export(trivial, platforms=[platform])(jax.ShapeDtypeStruct((1,), "float32")).serialize()
    counter = _count_operations() if limits is not None else None
    _limit()
    try:
        exec(code, scope)
        fn = scope[entry]
        blobs, walked = [], []
        for i, (specs, numbers) in enumerate(cases):
            args = [jax.ShapeDtypeStruct(tuple(s), d) for s, d in specs]
            jitted = jax.jit(functools.partial(fn, **numbers))
            if limits is not None:
                if counter is not None:
                    counter.seen, counter.most = 0, TRACE_OVER_EQNS * limits[i].max_eqns
                try:
                    traced = jitted.trace(*args)
                finally:
                    if counter is not None:
                        counter.most = 0  # the lab's own lowering and export are not counted
                stats = bounds.walk(traced.jaxpr)
                why = bounds.refusal(stats, limits[i], f"{entry}()")
                if why:
                    out.write(pickle.dumps(("refused", why)))
                    return
                traced.lower().compile()  # for this CPU: a compile that does not end ends here, by the CPU limit
                walked.append(stats)
            exported = jax.export.export(jitted, platforms=[platform])(*args)
            blobs.append(exported.serialize())
        answer: tuple[str, tuple[list[bytearray], list[bounds.Stats]] | str] = ("ok", (blobs, walked))
    except _TooLong as e:
        answer = ("refused", f"{entry}() traces to more than {e.args[0] - 1:,} operations, and a solution needs far "
                             f"fewer (at most {limits[i].max_eqns:,} here): is a loop unrolling into a huge program? "
                             "Use array operations")
    except RecursionError:
        answer = ("stopped", "your function calls itself without end (RecursionError)")
    except NameError as e:  # a name the code never set, or a built-in the lab does not offer
        name = getattr(e, "name", None) or ""
        import builtins as py

        answer = ("stopped", f"NameError while tracing your function: {e}" if not hasattr(py, name) else
                  f"the lab's rule: Python's built-in {name} is not among what its exercises run (they offer "
                  f"{', '.join(sorted(scope['__builtins__']))}, and jnp, jax.nn, jax.lax and math functions)")
    except MemoryError:
        answer = ("stopped", "tracing your function ran out of the memory the lab gives it: a huge number or array?")
    except Exception as e:
        text = str(e).strip().splitlines()
        answer = ("stopped", f"{type(e).__name__} while tracing your function: {text[0][:300] if text else ''}")
    out.write(pickle.dumps(answer))


if __name__ == "__main__":
    main()
