"""The one timing harness: what a call costs, measured four ways, each named for what it measures.

    compile_ms     first call: tracing, lowering and XLA compilation (paid once per shape and process)
    wall_ms        median of perf_counter() around one call + block_until_ready(): the codelab's method;
                   at small shapes mostly Python dispatch and synchronisation.
    throughput_ms  many calls dispatched, one wait at the end, divided by the count: dispatch overlaps the
                   device's work, as in a training loop.
    device_ms      the GPU's own kernel time per call through CUPTI (`jax.experimental.mosaic.gpu.profiler`),
                   read first, right after the warm-up, as NVIDIA's benchmarks do; None on CPU.

JAX dispatches asynchronously, so a timer must wait for the result (`block_until_ready`) or it measures only
the queueing. Every measurement holds the device to itself (`admission.DEVICE`), so timings never overlap."""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from collections.abc import Sequence
from typing import cast

import jax

from attnlab import device
from attnlab.admission import DEVICE
from attnlab.settings import settings
from attnlab.spans import log_span


def launch_note() -> str:
    """A sentence when this process launches GPU kernels other than as XLA does by default, else ''."""
    values = [t.split("=", 1)[1] for t in os.environ.get("XLA_FLAGS", "").split()
              if t.startswith("--xla_gpu_enable_command_buffer=")]
    if values and values[-1] == "":
        return ("This server runs XLA with CUDA graphs off (`--xla_gpu_enable_command_buffer=`, so that many "
                "learners' programs can run side by side safely): each kernel is launched on its own, which adds a "
                "few microseconds per kernel to wall and throughput times. The shipped H200 tables were measured "
                "outside the server (`python -m attnlab bench`, no XLA_FLAGS), where XLA's defaults keep CUDA "
                "graphs on.")
    return ""


DEVICE_CALLS = 20  # CUPTI's calls for device_ms (a kernel's time varies a few % from call to call)


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
    warmup_ms: float = float("nan")  # how long the warm-up's calls took
    clock_mhz: int | None = None  # the GPU's SM clock as the warm-up by the clock ended (NVML), where it can be read


def kernel_times(compiled, args, iterations: int = DEVICE_CALLS) -> tuple[float | None, tuple, str]:
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
    if iterations == 1:  # one call's list of (kernel, ms): jax's overload for iterations=1 (ours is an int)
        per_iter = [cast(list[tuple[str, float]], per_iter)]
    totals = [sum(ms for _, ms in it) for it in per_iter]
    median_i = sorted(range(len(totals)), key=totals.__getitem__)[len(totals) // 2]
    kernels = tuple((str(n), float(ms)) for n, ms in per_iter[median_i])
    return statistics.median(totals), kernels, f"CUPTI, median of {iterations} calls"


WARM_S = 0.2  # after a compile the GPU has idled and its clocks have dropped: ~0.2 s of work brings them back
WARM_CLOCK = 0.9  # with ATTNLAB_WARM_BY_CLOCK, the warm-up also ends once the SM clock reads this share of its most


def warm_up(compiled, args: Sequence, calls: int, seconds: float, by_clock: bool = False) -> tuple[float, int | None]:
    """Call `compiled` at least `calls` times and for `seconds`, or (`by_clock`) until the SM clock reads WARM_CLOCK
    of its maximum once the `calls` are done, `seconds` at most; (ms it took, the SM clock at its end or None).

    The time rule is what a timing does by default: every GPU timing holds the device WARM_S at least, so a class's
    sixty timings hold it 12 s before they measure anything. The clock rule ends as soon as the clock it waits for
    is there (device.nvml_sm_clock, microseconds a read); where NVML cannot be read it is the time rule."""
    t0 = time.perf_counter()
    t_end, i = t0 + seconds, 0
    while True:
        if i >= calls:
            if time.perf_counter() >= t_end:
                break
            clock = device.nvml_sm_clock() if by_clock else None
            if clock is not None and clock[0] >= WARM_CLOCK * clock[1]:
                break
        jax.block_until_ready(compiled(*args))
        i += 1
    clock = device.nvml_sm_clock() if by_clock else None  # NVML stays unread by default until a GPU has run it
    return (time.perf_counter() - t0) * 1e3, clock[0] if clock else None


MIN_CALLS = 10  # the fewest calls time_compiled makes: 3 warm-up, 1 to fit the repeats, 3 timed, 3 rounds of 1


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
    """Time an already-compiled executable on its inputs, all four ways, with the device to itself (a caller
    that already holds it, as the run layer does while it draws the inputs, keeps it: no second wait)."""
    with DEVICE.use() as waited:
        measured_from = time.perf_counter()
        # warm up by count and by time (or by the clock it waits for) before anything is recorded
        if warmup_s is None:
            warmup_s = WARM_S if jax.default_backend() == "gpu" else 0.0
        warmup_ms, clock = warm_up(compiled, args, warmup, warmup_s, settings().warm_by_clock)
        # fit the repeats to the budget: a 1 s CPU call is timed 3 times, a 10 µs GPU call 30
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        one = max(time.perf_counter() - t0, 1e-6)
        n = int(max(3, min(repeats, budget_s / 2 / one)))
        # the device time first, right after the warm-up, as NVIDIA's benchmarks read it: after the wall samples
        # and rounds a long kernel has heated the GPU and its clock has fallen (issue 41: causal 1.96 ms there
        # against 1.78 ms here on the H200, the same kernel and inputs)
        if device_time:
            device_ms, kernels, note = kernel_times(compiled, args, iterations=min(n, DEVICE_CALLS))
        else:
            device_ms, kernels, note = None, (), "device time not asked for"

        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            samples.append((time.perf_counter() - t0) * 1e3)

        rounds, m = [], max(1, n // 3)
        for _ in range(3):  # dispatch m calls, one wait; median of three rounds
            t0 = time.perf_counter()
            outs = [compiled(*args) for _ in range(m)]
            jax.block_until_ready(outs)
            rounds.append((time.perf_counter() - t0) * 1e3 / m)
            del outs
        log_span("timing", measured_from, time.perf_counter())
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
        warmup_ms=warmup_ms,
        clock_mhz=clock,
    )


@dataclasses.dataclass(frozen=True)
class ClockStates:
    """GPU kernel time per call in two states of the GPU, each with the SM clock it ran at. burst: after the
    GPU has idled (at its boost clock); sustained: after `sustain_s` of back-to-back calls (power and heat
    pull the clock down)."""

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
    with DEVICE.use():
        measured_from = time.perf_counter()
        time.sleep(idle_s)  # let the GPU cool and its clock come back up
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        one = max(time.perf_counter() - t0, 1e-6)
        burst_ms, _, note = kernel_times(compiled, args, iterations=iterations)
        clock = device.sm_clock_mhz()
        burst_clock = clock[0] if clock else None
        t_end = time.perf_counter() + sustain_s
        while time.perf_counter() < t_end:
            jax.block_until_ready([compiled(*args) for _ in range(max(1, int(0.05 / one)))])
        # read the clock while the GPU is still busy: queue ~0.3 s of calls, ask, then wait
        outs = [compiled(*args) for _ in range(max(1, int(0.3 / one)))]
        clock = device.sm_clock_mhz()
        jax.block_until_ready(outs)
        del outs
        sustained_ms, _, _ = kernel_times(compiled, args, iterations=iterations)
        log_span("timing", measured_from, time.perf_counter())
    return ClockStates(burst_ms=burst_ms, burst_clock_mhz=burst_clock, sustained_ms=sustained_ms,
                       sustained_clock_mhz=clock[0] if clock else None, max_clock_mhz=clock[1] if clock else None,
                       note=note)


def peak_tflops(dtype: str, info: device.DeviceInfo, fp8: bool = False) -> float | None:
    """The datasheet peak for this dtype here (None if unknown); the FP8 peak for a kernel in FP8 (`fp8`)."""
    if info.peak is None:
        return None
    if fp8:
        return info.peak.fp8_tflops
    if dtype == "float32":  # JAX's default precision lets XLA use TF32 tensor cores on NVIDIA GPUs
        return info.peak.tf32_tflops
    return info.peak.bf16_tflops
