"""Compiled programs, once per process (`PROGRAMS`), and what the compiler made of a call: its kernels and scratch.

Scratch is XLA's `temp_size_in_bytes`; a library XLA hands work to (cuDNN, a CPU library fusion) may hold more.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import os
import re
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from attnlab import oldest_first
from attnlab.admission import DEVICE
from attnlab.backends import get, known_aborts
from attnlab.backends.base import abstract_inputs, lower
from attnlab.measure import disk_cache
from attnlab.settings import settings
from attnlab.shapes import AttentionShape
from attnlab.spans import log_span

if TYPE_CHECKING:  # pandas only where a table is made: a device worker's start needs none (threads.py says why)
    import pandas as pd


@dataclasses.dataclass(frozen=True)
class CompiledInfo:
    temp_bytes: int | None  # scratch XLA allocates beyond inputs and outputs
    argument_bytes: int | None
    output_bytes: int | None
    custom_calls: tuple[str, ...]  # library kernels called from the program, e.g. '__cudnn$fmha...'
    fusions: int  # XLA fusions (each becomes one or more generated kernels on a GPU)
    library_fusions: tuple[str, ...] = ()  # fusions XLA hands to a library (kind=kCustom, e.g. ynn_fusion on CPU)

    @property
    def uses_cudnn_attention(self) -> bool:
        return any("cudnn$fmha" in c or "fused_attn" in c for c in self.custom_calls)


def describe_compiled(compiled) -> CompiledInfo:
    """Memory from `compiled.memory_analysis()` and the library calls in the optimised HLO."""
    try:
        m = compiled.memory_analysis()
    except Exception:
        m = None
    try:
        text = compiled.as_text() or ""
    except Exception:
        text = ""
    calls = tuple(dict.fromkeys(re.findall(r'custom_call_target="([^"]+)"', text)))
    fusions = len(re.findall(r"^\s*(?:ROOT\s+)?\S+\s*=\s*\S+\s+fusion\(", text, flags=re.MULTILINE))
    library = tuple(dict.fromkeys(re.sub(r"\.\d+$", "", n) for n in re.findall(
        r"^\s*(?:ROOT\s+)?%?(\S+)\s*=\s*\S+\s+fusion\(.*kind=kCustom", text, flags=re.MULTILINE)))
    get = lambda a: int(getattr(m, a)) if m is not None and getattr(m, a, None) is not None else None  # noqa: E731
    return CompiledInfo(get("temp_size_in_bytes"), get("argument_size_in_bytes"), get("output_size_in_bytes"), calls,
                        fusions, library)


def compile_backend(name: str, shape: AttentionShape, backward: bool = False, tuned: bool | None = True):
    """compile_timed for a backend at a shape, kept in PROGRAMS (asked again: the first compile's answer).
    tuned=None: only checked or described, so untuned unless the tuned one is kept; False: exactly the untuned."""
    if tuned is None:
        tuned = PROGRAMS.named(("backend", name, shape, backward, True)) is not None
    name_key = ("backend", name, shape, backward, tuned)
    kept = PROGRAMS.named(name_key)
    if kept is not None:
        return kept
    from attnlab import device

    why = known_aborts.refusal(name, shape, device.info())  # every path to a compile, not only the run layer's
    if why:
        raise ValueError(why)
    if backward:
        fn, args = forward_backward(get(name).jit(shape)), abstract_inputs(shape)
    else:  # the function its check traced: the lowering finds that trace
        fn, args = get(name).program(shape)
    return compile_timed(fn, args, f"{name}{' backward' if backward else ''} at {shape.describe()}",
                         None if tuned else check_options(), name=name_key)


# Only what is timed is autotuned (its candidates run on the device): docs/design-notes.md, "Autotuning".
CHECK_OPTIONS = {"xla_gpu_autotune_level": 0}


def check_options() -> dict | None:
    """Compiler options for a program only run to check results: no autotuning on a GPU (None elsewhere)."""
    return CHECK_OPTIONS if jax.default_backend() == "gpu" else None


def untuned(options: dict | None) -> bool:
    """Whether these compiler options turn XLA's autotuning off (CHECK_OPTIONS and any that include it)."""
    return (options or {}).get("xla_gpu_autotune_level") == 0


class ForCheck:
    """`fn` compiled for checking (`check_options()`): `ahead(*structs)` compiles it before a run takes the device,
    a call with arrays of those shapes runs it."""

    def __init__(self, fn, static_argnames: tuple[str, ...] = ()):
        self.fn, self.static_argnames = fn, static_argnames
        functools.update_wrapper(self, fn)

    def ahead(self, *args, **static):
        name = ("check", self, tuple((tuple(a.shape), str(a.dtype)) for a in args), tuple(sorted(static.items())))
        kept = PROGRAMS.named(name)
        if kept is None:
            kept = compile_timed(functools.partial(self.fn, **static), args, self.fn.__name__, check_options(), name=name)
        return kept[0]

    def __call__(self, *args, **static):
        exe = self.ahead(*(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args), **static)
        DEVICE.launch(f"{self.fn.__name__}'s compiled program")
        return exe(*args)


def for_check(fn=None, *, static_argnames: tuple[str, ...] = ()):
    """Decorator: `ForCheck(fn)`, a program whose output is shown or checked, never timed."""
    if fn is None:
        return lambda f: ForCheck(f, static_argnames)
    return ForCheck(fn, static_argnames)


class Programs:
    """Every program this process compiled, once, keyed by lowered text and options and found by name; single flight,
    one bound. Beyond functools.lru_cache: the single flight, one program under several names, its first compiler."""

    def __init__(self, size: int = 256):
        self.size = size
        self._programs: collections.OrderedDict[int, tuple[str, object]] = collections.OrderedDict()
        self._names: dict[tuple, tuple[int, tuple]] = {}  # name -> (program key, what compile_timed answered)
        self._compiling: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def named(self, name: tuple) -> tuple | None:
        """What compile_timed answered when `name` was compiled, while its program is kept; else None."""
        with self._lock:
            found = self._names.get(name)
            if found is None or found[0] not in self._programs:
                return None
            self._programs.move_to_end(found[0])
            return found[1]

    def name(self, name: tuple, key: int, answer: tuple) -> None:
        with self._lock:
            if key in self._programs:
                self._names[name] = (key, answer)

    def compile(self, lowered, who: str, options: dict | None) -> tuple[object, str | None, int]:
        """(the executable, who compiled it first when it was kept already else None, the program's key)."""
        # the module's name is the Python function's: two backends' identical programs are one program
        key = hash((_MODULE_NAME.sub("module", lowered.as_text(), count=1), tuple(sorted((options or {}).items()))))
        while True:
            with self._lock:
                seen = self._programs.get(key)
                if seen is not None:
                    self._programs.move_to_end(key)
                    return seen[1], seen[0] or "an earlier call", key
                busy = self._compiling.get(key)
                if busy is None:
                    self._compiling[key] = threading.Event()
                    break
            busy.wait()  # kept, or failed and this thread tries
        try:
            with _COMPILES:  # compile_threads() at once, every caller's together: the oldest page's first
                began = time.perf_counter()
                compiled = lowered.compile(compiler_options=options)
            log_span("compile", began, time.perf_counter(), f"{'untuned' if untuned(options) else 'tuned'} {who}")
            with self._lock:
                self._programs[key] = (who, compiled)
                while len(self._programs) > self.size:
                    gone, _ = self._programs.popitem(last=False)
                    for n in [n for n, (k, _) in self._names.items() if k == gone]:
                        del self._names[n]
        finally:
            with self._lock:
                self._compiling.pop(key).set()
        disk_cache.compiled_one()  # the persistent cache's bound, now and then
        return compiled, None, key

    def __len__(self) -> int:
        return len(self._programs)


PROGRAMS = Programs()
_MODULE_NAME = re.compile(r"^module @\S+", re.MULTILINE)


def compile_timed(fn, args, who: str = "", options: dict | None = None, name: tuple | None = None):
    """(compiled, compile_ms, compiled_before): a kept program comes back in about a millisecond, `compiled_before`
    naming its first compiler (a page says so rather than show a lookup as a compile); kept under `name` if given."""
    t0 = time.perf_counter()
    quiet = untuned(options)  # no autotuning: nothing runs on the device
    lowered = lower(fn if hasattr(fn, "trace") else jax.jit(fn), args)  # no turn: lowering launches nothing
    with DEVICE.building(quiet, who):  # the autotuner runs kernels: between runs
        compiled, first, key = PROGRAMS.compile(lowered, who, options)
    answer = (compiled, (time.perf_counter() - t0) * 1e3, first)
    if name is not None:
        PROGRAMS.name(name, key, answer)
    return answer


_LOCK = threading.Lock()  # the compile pool's creation


def compile_threads() -> int:
    """Programs compiled at once, all requests together: ATTNLAB_COMPILE_THREADS, else this process's CPUs."""
    if threads := settings().compile_threads:
        return threads
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_COMPILES = oldest_first.Ordered(compile_threads)  # the pool's threads and a request's own compiles alike


def compile_many(jobs: Iterable[tuple]) -> dict[tuple, BaseException | None]:
    """compile_backend for each (name, shape, backward[, tuned]), `compile_threads()` at a time: job -> error or None."""
    global _POOL
    jobs, t0 = list(dict.fromkeys(jobs)), time.perf_counter()
    threads = compile_threads()
    # the device's holder compiles inline: pool threads would wait for the turn it holds
    if threads == 1 or len(jobs) < 2 or DEVICE.held_here():
        errors = {job: _try(compile_backend, *job) for job in jobs}
        DEVICE.spend("compile_s", time.perf_counter() - t0)
        return errors
    with _LOCK:
        if _POOL is None:  # one pool per process: learners' runs share it, so compiles stay bounded
            _POOL = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="attnlab-compile")
    futures = {job: _POOL.submit(_pooled, job, threading.get_ident(), oldest_first.since()) for job in jobs}
    done = {job: f.result() for job, f in futures.items()}
    for kind in ("build_wait_s", "build_s"):  # side by side: the longest of each
        DEVICE.spend(kind, max(spent[kind] for _, spent in done.values()))
    DEVICE.spend("compile_s", time.perf_counter() - t0)
    return {job: error for job, (error, _) in done.items()}


def _pooled(job: tuple, owner: int, since: float) -> tuple[BaseException | None, dict]:
    with DEVICE.building_for(owner), oldest_first.page_began(since), DEVICE.ledger() as spent:
        return _try(compile_backend, *job), spent


def _try(fn, *args) -> BaseException | None:
    try:
        fn(*args)
    except Exception as e:  # the caller words it (a backend that fails to compile is a row)
        return e
    return None


def forward_backward(fn):
    """The gradient of sum(attention(q, k, v)) with respect to q, k and v: one forward, one backward."""
    return jax.grad(lambda q, k, v: fn(q, k, v).astype(jnp.float32).sum(), argnums=(0, 1, 2))


def which_kernel(info: CompiledInfo) -> str:
    """In words, what the compiled program runs: cuDNN's fused attention, or XLA's own fusions."""
    if info.uses_cudnn_attention:
        call = next(c for c in info.custom_calls if "cudnn$fmha" in c or "fused_attn" in c)
        return f"cuDNN fused attention (custom call {call})"
    others = f"; library calls: {', '.join(info.custom_calls)}" if info.custom_calls else ""
    if info.library_fusions:
        others += (f"; handed to a library: {', '.join(info.library_fusions)} (its own scratch is not in XLA's "
                   "temp bytes)")
    return f"XLA's own code: {info.fusions} fusion{'s' if info.fusions != 1 else ''}{others}"


def growth(df: pd.DataFrame, y: str = "temp_bytes", x: str = "q_len") -> pd.DataFrame:
    """Per implementation: y at the shortest and longest x, their ratio, the log-log slope (2 for O(T²))."""
    import pandas as pd

    rows: list[dict] = []
    if not len(df) or y not in df:
        return pd.DataFrame(rows)
    ok = df[(df["status"] == "ok") & (df[y].fillna(0) > 0)]
    for name, part in ok.groupby("implementation", sort=False):
        part = part.sort_values(x)
        if len(part) < 2:
            continue
        (x0, y0), (x1, y1) = part[[x, y]].iloc[0], part[[x, y]].iloc[-1]
        rows.append({"implementation": name, "from": int(x0), "to": int(x1), "ratio": y1 / y0,
                     "slope": float(np.log(y1 / y0) / np.log(x1 / x0))})
    return pd.DataFrame(rows)
