"""The one timing harness: what a call costs, measured four ways, each named for what it measures.

    compile_ms     first call: tracing, lowering and XLA compilation (paid once per shape)
    wall_ms        median of perf_counter() around one call + block_until_ready(): the codelab's
                   method. At small shapes this is mostly Python dispatch and synchronisation.
    throughput_ms  many calls dispatched, one wait at the end, divided by the count: dispatch
                   overlaps the GPU's work, as in a training loop.
    device_ms      the GPU's own kernel time per call, read through CUPTI (NVIDIA's profiling
                   interface) with `jax.experimental.mosaic.gpu.profiler.measure`; None on CPU.

TFLOP/s is FLOPs (AttentionShape.flops) over throughput_ms, and device_tflops over device_ms.
All device work goes through one queue (`DEVICE_QUEUE`) so that two learners timing at once on
one GPU do not corrupt each other's numbers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import jax
import jax.numpy as jnp
import pandas as pd

from attnlab import device as device_mod
from attnlab import implementations as impls
from attnlab import kernels
from attnlab.shapes import AttentionShape


# --------------------------------------------------------------------------------------------
# one GPU, many learners
# --------------------------------------------------------------------------------------------
class DeviceBusy(RuntimeError):
    """Raised when the queue for the device is full; the page says so and the learner retries."""


class DeviceQueue:
    """At most `slots` device jobs at a time, at most `max_waiting` waiting; re-entrant per thread."""

    def __init__(self, slots: int = 1, max_waiting: int = 64):
        self.slots, self.max_waiting = slots, max_waiting
        self._cond = threading.Condition()
        self._running = 0
        self._waiting = 0
        self._held = threading.local()

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._waiting

    @contextlib.contextmanager
    def slot(self, timeout: float | None = 600.0, on_wait: Callable[[int], None] | None = None):
        """Hold a device slot; yields the seconds spent waiting. `on_wait(n_ahead)` is called once if it must wait."""
        depth = getattr(self._held, "depth", 0)
        if depth:  # this thread already holds a slot (a sweep calling measure)
            self._held.depth = depth + 1
            try:
                yield 0.0
            finally:
                self._held.depth -= 1
            return
        start = time.perf_counter()
        with self._cond:
            if self._running >= self.slots:
                if self._waiting >= self.max_waiting:
                    raise DeviceBusy(f"The device is busy: {self._waiting} runs are already queued. Try again shortly.")
                if on_wait:
                    on_wait(self._running + self._waiting)
                self._waiting += 1
                try:
                    ok = self._cond.wait_for(lambda: self._running < self.slots, timeout=timeout)
                finally:
                    self._waiting -= 1
                if not ok:
                    raise DeviceBusy(f"Waited {timeout:.0f} s for the device without getting it. Try again shortly.")
            self._running += 1
        self._held.depth = 1
        try:
            yield time.perf_counter() - start
        finally:
            self._held.depth = 0
            with self._cond:
                self._running -= 1
                self._cond.notify()


DEVICE_QUEUE = DeviceQueue(slots=max(1, int(os.environ.get("ATTNLAB_MAX_CONCURRENT_GPU_JOBS", "1") or 1)))


def _log_timing(start: float, end: float) -> None:
    """With ATTNLAB_TIMING_LOG=path, append 'start end thread pid' (perf_counter seconds) for each
    measurement, so a load test can check from outside that no two measurements overlapped."""
    path = os.environ.get("ATTNLAB_TIMING_LOG")
    if path:
        try:
            with open(path, "a") as f:
                f.write(f"{start:.6f} {end:.6f} {threading.get_ident()} {os.getpid()}\n")
        except OSError:
            pass  # a diagnostic only: never fail a measurement over it


# --------------------------------------------------------------------------------------------
# what the compiler made
# --------------------------------------------------------------------------------------------
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


@functools.lru_cache(maxsize=64)
def compile_implementation(name: str, shape: AttentionShape, backward: bool = False):
    """(compiled executable, compile_ms) for a registry entry at a shape; cached, so paid once."""
    fn = impls.get(name).jit(shape)
    if backward:
        fn = forward_backward(fn)
    args = [jax.ShapeDtypeStruct(s, shape.dtype) for s in (shape.q_shape(), shape.kv_shape(), shape.kv_shape())]
    return compile_timed(fn, args)


def compile_timed(fn, args):
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, (time.perf_counter() - t0) * 1e3


def forward_backward(fn):
    """The gradient of sum(attention(q, k, v)) with respect to q, k and v: one forward, one backward."""
    return jax.grad(lambda q, k, v: fn(q, k, v).astype(jnp.float32).sum(), argnums=(0, 1, 2))


# --------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Timing:
    compile_ms: float
    wall_ms: float
    wall_ms_iqr: float  # spread: 75th minus 25th percentile of the wall-time samples
    throughput_ms: float
    device_ms: float | None
    kernels: tuple[tuple[str, float], ...]  # (kernel name, ms) for one call, in launch order
    device_note: str  # how device_ms was read, or why it could not be
    repeats: int
    queue_wait_s: float = 0.0


def kernel_times(compiled, args, iterations: int = 10) -> tuple[float | None, tuple, str]:
    """(device_ms per call, kernels of the median call, note) via CUPTI; (None, (), why) without."""
    if jax.default_backend() != "gpu":
        return None, (), f"no device time on {jax.default_backend()}: CUPTI reads NVIDIA GPU kernels only"
    try:
        from jax.experimental.mosaic.gpu import profiler

        _, per_iter = profiler.measure(compiled, aggregate=False, iterations=iterations)(*args)
    except Exception as e:
        return None, (), f"CUPTI unavailable: {type(e).__name__}: {str(e)[:200]}"
    if per_iter is None:
        return None, (), "CUPTI saw no kernel launches"
    if iterations == 1:
        per_iter = [per_iter]
    totals = [sum(ms for _, ms in it) for it in per_iter]
    median_i = sorted(range(len(totals)), key=totals.__getitem__)[len(totals) // 2]
    kernels = tuple((str(n), float(ms)) for n, ms in per_iter[median_i])
    return statistics.median(totals), kernels, f"CUPTI, median of {iterations} calls"


def time_compiled(
    compiled,
    args: Sequence,
    *,
    compile_ms: float = float("nan"),
    repeats: int = 30,
    warmup: int = 3,
    warmup_s: float | None = None,
    budget_s: float = 1.5,
    device_time: bool = True,
) -> Timing:
    """Time an already-compiled executable on its inputs, all four ways, holding the device slot."""
    with DEVICE_QUEUE.slot() as waited:
        measured_from = time.perf_counter()
        # warm up by count and by time: after a compile the GPU has idled and its clocks have
        # dropped; ~0.2 s of work brings them back before anything is recorded
        if warmup_s is None:
            warmup_s = 0.2 if jax.default_backend() == "gpu" else 0.0
        t_end, i = time.perf_counter() + warmup_s, 0
        while i < warmup or time.perf_counter() < t_end:
            jax.block_until_ready(compiled(*args))
            i += 1
        # fit the repeats to the budget: a 1 s CPU call is timed 3 times, a 10 µs GPU call 30
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        one = max(time.perf_counter() - t0, 1e-6)
        n = int(max(3, min(repeats, budget_s / 2 / one)))

        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            samples.append((time.perf_counter() - t0) * 1e3)

        rounds = []
        for _ in range(3):  # dispatch n calls, one wait; median of three rounds
            t0 = time.perf_counter()
            outs = [compiled(*args) for _ in range(n)]
            jax.block_until_ready(outs)
            rounds.append((time.perf_counter() - t0) * 1e3 / n)
            del outs

        if device_time:
            device_ms, kernels, note = kernel_times(compiled, args, iterations=min(n, 10))
        else:
            device_ms, kernels, note = None, (), "device time not asked for"
        _log_timing(measured_from, time.perf_counter())
    q = statistics.quantiles(samples, n=4) if len(samples) >= 2 else [samples[0]] * 3
    return Timing(
        compile_ms=compile_ms,
        wall_ms=statistics.median(samples),
        wall_ms_iqr=q[2] - q[0],
        throughput_ms=statistics.median(rounds),
        device_ms=device_ms,
        kernels=kernels,
        device_note=note,
        repeats=n,
        queue_wait_s=waited,
    )


@dataclasses.dataclass(frozen=True)
class ClockStates:
    """GPU kernel time per call in two states of the GPU, each with the SM clock it ran at.

    burst: after the GPU has idled (cool, at its boost clock), a few calls.
    sustained: after `sustain_s` of back-to-back calls, when power and heat have pulled the
    clock down (on the H200, flash attention at ~600 W: 1980 MHz fell to 1680-1890).
    """

    burst_ms: float | None
    burst_clock_mhz: int | None
    sustained_ms: float | None
    sustained_clock_mhz: int | None
    max_clock_mhz: int | None
    note: str


def clock_states(compiled, args: Sequence, *, idle_s: float = 1.0, sustain_s: float = 1.5,
                 iterations: int = 10) -> ClockStates:
    """Kernel time (CUPTI) of a compiled call at the GPU's boost clock and under sustained load."""
    if jax.default_backend() != "gpu":
        return ClockStates(None, None, None, None, None, kernel_times(compiled, args)[2])
    with DEVICE_QUEUE.slot():
        measured_from = time.perf_counter()
        time.sleep(idle_s)  # let the GPU cool and its clock come back up
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        one = max(time.perf_counter() - t0, 1e-6)
        burst_ms, _, note = kernel_times(compiled, args, iterations=iterations)
        clock = device_mod.sm_clock_mhz()
        burst_clock = clock[0] if clock else None
        t_end = time.perf_counter() + sustain_s
        while time.perf_counter() < t_end:
            jax.block_until_ready([compiled(*args) for _ in range(max(1, int(0.05 / one)))])
        # read the clock while the GPU is still busy: queue ~0.3 s of calls, ask, then wait
        outs = [compiled(*args) for _ in range(max(1, int(0.3 / one)))]
        clock = device_mod.sm_clock_mhz()
        jax.block_until_ready(outs)
        del outs
        sustained_ms, _, _ = kernel_times(compiled, args, iterations=iterations)
        _log_timing(measured_from, time.perf_counter())
    return ClockStates(burst_ms=burst_ms, burst_clock_mhz=burst_clock, sustained_ms=sustained_ms,
                       sustained_clock_mhz=clock[0] if clock else None, max_clock_mhz=clock[1] if clock else None,
                       note=note)


def peak_tflops(dtype: str, info: device_mod.DeviceInfo) -> float | None:
    """The datasheet peak that applies to this dtype on this device (None when unknown)."""
    if info.peak is None:
        return None
    if dtype == "float32":  # JAX's default precision lets XLA use TF32 tensor cores on NVIDIA GPUs
        return info.peak.tf32_tflops
    return info.peak.bf16_tflops


# --------------------------------------------------------------------------------------------
# one cell, and sweeps of cells
# --------------------------------------------------------------------------------------------
STATUS_OK, STATUS_UNSUPPORTED, STATUS_OOM, STATUS_ERROR = "ok", "unsupported", "out of memory", "error"


def is_out_of_memory(e: BaseException) -> bool:
    text = f"{type(e).__name__} {e}"
    return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower() or isinstance(e, MemoryError)


def run_cell(
    shape: AttentionShape,
    name: str,
    *,
    backward: bool = False,
    info: device_mod.DeviceInfo | None = None,
    seed: int = 0,
    device_time: bool = True,
    **timing_kw,
) -> dict:
    """Time one implementation at one shape. Never raises for a bad cell: the row says what happened."""
    info = info or device_mod.info()
    impl = impls.get(name)
    row = {
        "implementation": name,
        "label": impl.label,
        "pass": "forward+backward" if backward else "forward",
        **dataclasses.asdict(shape),
        "shape": shape.describe(),
        "status": STATUS_OK,
        "reason": "",
    }
    support = impl.supports(shape, info)
    if not support.ok:
        return {**row, "status": STATUS_UNSUPPORTED, "reason": support.reason}
    try:
        compiled, compile_ms = compile_implementation(name, shape, backward)
        args = impls.make_inputs(shape, seed)
        t = time_compiled(compiled, args, compile_ms=compile_ms, device_time=device_time, **timing_kw)
        mem = describe_compiled(compiled)
    except DeviceBusy as e:
        return {**row, "status": STATUS_ERROR, "reason": str(e)}
    except Exception as e:  # OOM or a backend error becomes a row, never an exception out of a sweep
        status = STATUS_OOM if is_out_of_memory(e) else STATUS_ERROR
        return {**row, "status": status, "reason": f"{type(e).__name__}: {str(e).strip()[:300]}"}
    flops = shape.flops(backward)
    peak = peak_tflops(shape.dtype, info)
    tflops = flops / (t.throughput_ms * 1e-3) / 1e12
    device_tflops = flops / (t.device_ms * 1e-3) / 1e12 if t.device_ms else None
    best = device_tflops or tflops
    return {
        **row,
        "compile_ms": t.compile_ms,
        "wall_ms": t.wall_ms,
        "wall_ms_iqr": t.wall_ms_iqr,
        "throughput_ms": t.throughput_ms,
        "device_ms": t.device_ms,
        "kernel_count": len(t.kernels) if t.kernels else None,
        "kernels": "; ".join(f"{kernels.describe(n)} {ms * 1e3:.1f}µs" for n, ms in t.kernels),
        "device_note": t.device_note,
        "gflop": flops / 1e9,
        "tflops": tflops,
        "device_tflops": device_tflops,
        "pct_of_peak": 100 * best / peak if peak else None,
        "temp_bytes": mem.temp_bytes,
        "custom_calls": ", ".join(mem.custom_calls),
        "repeats": t.repeats,
        "queue_wait_s": t.queue_wait_s,
    }


def sweep(
    base: AttentionShape,
    field: str,
    values: Iterable,
    implementations: Sequence[str],
    *,
    backward: bool = False,
    **cell_kw,
) -> Iterator[dict]:
    """One row per (value, implementation), yielded as each is measured, so a UI can show progress."""
    if field not in {f.name for f in dataclasses.fields(AttentionShape)}:
        raise ValueError(f"cannot sweep over {field!r}: not a field of AttentionShape")
    info = device_mod.info()
    for value in values:
        shape = base.replace(**{field: value})
        if field == "q_len" and base.q_len == base.kv_len:  # a "sequence length" sweep moves both
            shape = shape.replace(kv_len=value)
        for name in implementations:
            yield {"swept": field, "value": value, **run_cell(shape, name, backward=backward, info=info, **cell_kw)}


def to_frame(rows: Iterable[dict]) -> pd.DataFrame:
    """Rows as a DataFrame, with the measurement columns first."""
    return pd.DataFrame(list(rows))
