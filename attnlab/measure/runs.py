"""The run layer: implementations run at a shape, each giving one typed `Result`.

    run(shape, ["naive", "sdpa_cudnn"], accuracy=True, timed=True)  ->  [Result, Result]

The only place that makes inputs, takes this process's turn on the device, builds the float64 reference, words
errors and turns results into a table, so a result means the same on every page, the CLI and the studies
(results.py: Result, Status, `COLUMNS` and the wording of failures, re-exported here).

A run never raises for a bad cell: an invalid shape, a backend that cannot run here, a run over the memory
budget, a GPU out of memory or a busy queue is each a `Result` whose `status` says which and `reason` why."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterable, Iterator, Sequence

import jax

from attnlab import device
from attnlab.admission import DEVICE
from attnlab.backends import REGISTRY, get
from attnlab.math import checks, gradients
from attnlab.measure import compiled, cost, timing
from attnlab.measure.inputs import HOST_DRAW_MAX, drawn_on_host, host_inputs, make_inputs  # noqa: F401
from attnlab.measure.results import (  # noqa: F401  (re-exported: callers keep reading them from runs)
    BAD_GRADIENTS,
    BUSY,
    COLUMNS,
    ERROR,
    INVALID,
    OK,
    OOM,
    OVER_BUDGET,
    TOO_SLOW,
    UNSUPPORTED,
    Result,
    Status,
    failure,
    max_difference,
    out_of_memory,
    records,
    to_frame,
)
from attnlab.settings import settings
from attnlab.shapes import PARAM_KEYS, AttentionShape
from attnlab.spans import log_span

# -- inputs and memory ---------------------------------------------------------------------------
# The largest float64 reference (its host bytes) computed before the device turn, from Q, K and V drawn on the
# host: NumPy then holds no GPU. A larger one is computed in the turn, under the turn's host budget.
AHEAD_MAX_BYTES = 32 * 2**20


@contextlib.contextmanager
def inputs(shape: AttentionShape, seed: int = 0, *, device_bytes: int = 0, host_bytes: int = 0):
    """Hold the device for Q, K and V (and their float32 draws) plus what the caller will compute from
    them (`device_bytes`, `host_bytes`); yield Q, K, V. Raises OverBudget or DeviceBusy."""
    with DEVICE.use(shape.input_bytes() * (1 + 4 // shape.itemsize) + device_bytes, host_bytes):
        yield make_inputs(shape, seed)


def memory_needed(shape: AttentionShape, names: Sequence[str], *, accuracy: bool, backward: bool) -> tuple[int, int]:
    """(device bytes, host bytes) a run of `names` at `shape` holds at its peak: the largest implementation's
    estimate (they run in turn) plus the inputs' float32 draws; on the host, the float64 reference, slices."""
    dev = max((get(n).device_bytes(shape) for n in names), default=0) * (3 if backward else 1)
    dev += shape.input_bytes() * (4 // shape.itemsize)
    host = 0
    if accuracy:
        sl = checks.choose_slice(shape)
        host = sl.host_bytes(shape) + 8 * len(names) * sl.batch * len(sl.rows) * sl.kv_heads * sl.heads_per_group \
            * shape.head_dim
        if backward and gradients.reference_bytes(shape) <= gradients.MAX_BYTES:  # the gradients' float64 check
            host += gradients.reference_bytes(shape)
    return dev, host


@contextlib.contextmanager
def one_turn(shapes: Sequence[AttentionShape], names: Sequence[str], *, accuracy: bool = True):
    """Hold the device once for runs of several shapes (each `run` inside keeps the turn), for the biggest
    that fits, so a page checking three variants waits once. Compile first (`compiled.compile_many`). Their
    references (seed 0) are computed before the turn, AHEAD_MAX_BYTES of them at most; the rest in it."""
    needs = [memory_needed(s, names, accuracy=accuracy, backward=False) for s in shapes]
    fits = [(d, h) for d, h in needs if DEVICE.check(d, h) is None] or [(0, 0)]
    _PREPARED.refs, room = {}, AHEAD_MAX_BYTES
    for s in shapes if accuracy else ():
        if (s, 0) not in _PREPARED.refs and (ahead := _reference_ahead(s, 0, room)) is not None:
            _PREPARED.refs[(s, 0)] = ahead
            room -= checks.choose_slice(s).host_bytes(s)
    try:
        with DEVICE.use(max(d for d, _ in fits), max(h for _, h in fits)):
            yield
    finally:
        _PREPARED.refs = None


# -- running -------------------------------------------------------------------------------------
def run(
    shape: AttentionShape,
    names: Sequence[str] | None = None,
    *,
    accuracy: bool = True,
    timed: bool = False,
    program: bool = False,
    backward: bool = False,
    tuned: bool | None = None,
    seed: int = 0,
    **timing_kw,
) -> list[Result]:
    """Run `names` (default: every backend) at `shape` with the parts asked for; one Result each.

    accuracy: the output against the float64 reference; timed: the four timings; program: what the compiler
    made. tuned: None autotunes only what is timed, as JAX does; True autotunes anyway (a memory study of the
    timed program); False times the untuned program, said in `timing_note` (a tuned compile holds the device).
    Compiles come first, off the device; then one turn on the device checks and times them all."""
    names = list(names or REGISTRY)
    problems = shape.validate()
    if problems:
        return [Result(shape, n, INVALID, " ".join(problems), backward) for n in names]
    info = device.info()
    results = _screen(shape, names, info, accuracy=accuracy, timed=timed, backward=backward)
    if tuned is None:  # None below: untuned, or the tuned program if this process has it
        tuned = True if timed else None
    runnable = [n for n in names if n not in results]
    results.update(_compile_first(shape, runnable, accuracy, timed or program, backward, tuned))
    runnable = [n for n in runnable if n not in results]
    if runnable:
        results.update(_turn(shape, runnable, info, accuracy, timed, program, backward, tuned, seed,
                             timing_kw))
    return [results[n] for n in names]


def _screen(shape, names, info, *, accuracy: bool, timed: bool, backward: bool) -> dict[str, Result]:
    """The refusals before any work, by name: cannot run here, over the memory budget, too slow here."""
    refused: dict[str, Result] = {}
    allocates = accuracy or timed  # compiling a program allocates nothing on the device
    calls = int(accuracy) + (timing.MIN_CALLS if timed else 0)
    slow = cost.too_slow(shape, calls, settings().run_seconds, backward) if calls else None
    for n in names:
        why = get(n).unmet(shape, info)
        if why:
            refused[n] = Result(shape, n, UNSUPPORTED, why, backward)
            continue
        dev, host = memory_needed(shape, [n], accuracy=accuracy, backward=backward)
        why = DEVICE.check(dev, host) if allocates else None
        if why:
            refused[n] = Result(shape, n, OVER_BUDGET, why, backward)
        elif slow:
            refused[n] = Result(shape, n, TOO_SLOW, slow, backward)
    return refused


def _compile_first(shape, names, accuracy: bool, compile_: bool, backward: bool, tuned) -> dict[str, Result]:
    """Compile every program the turn will run, side by side, before taking the device (a turn held through a
    compile makes everyone behind it wait); a failed compile is a Result. Only timed ones are tuned."""
    jobs = [(n, shape, False, tuned) for n in names if accuracy and not backward]
    jobs += [(n, shape, True, tuned) for n in names if accuracy and backward and not compile_]
    jobs += [(n, shape, backward, tuned) for n in names if compile_]
    failed: dict[str, Result] = {}
    for (n, *_), error in compiled.compile_many(jobs).items():
        if error is not None and n not in failed:
            failed[n] = Result(shape, n, *failure(error), backward)
    return failed


def _turn(shape, names, info, accuracy, timed, program, backward, tuned, seed, timing_kw) -> dict:
    """One device turn for every output, the reference and the timings; programs are described after it."""
    allocates = accuracy or timed
    dev, host = memory_needed(shape, names, accuracy=accuracy, backward=backward) if allocates else (0, 0)
    results: dict[str, Result] = {}
    programs: dict = {}
    try:
        ahead = _reference_ahead(shape, seed) if accuracy and not backward else None
        with DEVICE.use(dev, host) if allocates else contextlib.nullcontext(0.0) as waited:
            results.update(_run_held(shape, names, accuracy, timed or program, tuned, backward, seed, waited,
                                     programs, ahead))
            # the timings in the same turn: each turn waits in line (each timing is brief while others wait)
            for n in names if timed else ():
                if results[n].ok or results[n].status == BAD_GRADIENTS:  # timed, and the row says why not ok
                    results[n] = _time(results[n], info, seed, timing_kw, tuned is not False)
    except Exception as e:  # busy queue, or the inputs/reference did not fit after all
        status, reason = failure(e)
        results.update({n: Result(shape, n, status, reason, backward) for n in names if n not in results})
    for n, exe in programs.items():
        if results[n].ok or results[n].status == BAD_GRADIENTS:
            results[n] = dataclasses.replace(results[n], program=compiled.describe_compiled(exe))
    return results


@contextlib.contextmanager
def _part(what: str):
    """A part of a device turn, a 'part' span in ATTNLAB_TIMING_LOG (scripts/request_log.py --spans sums them)."""
    began = time.perf_counter()
    try:
        yield
    finally:
        log_span("part", began, time.perf_counter(), what)


_PREPARED = threading.local()  # `refs`: the references one_turn computed for the runs inside it (this thread's)


def _reference_ahead(shape: AttentionShape, seed: int, room: int | None = None) -> tuple | None:
    """(Q, K, V on the host, their float64 reference) before the device turn, where the inputs are drawn on the host
    and the reference is at most `room` bytes (AHEAD_MAX_BYTES), or one_turn prepared it; else None (the turn
    computes it). In the turn the GPU waited for NumPy: 1.7-3.0 of the 5.0-6.6 s the device was held as a class of 20
    moved to new shapes on an H200; a check's turn held 47-55 ms with it, 7 ms without, on an H100
    (scripts/gil_turns.py --ahead on off)."""
    prepared = getattr(_PREPARED, "refs", None) or {}
    if (shape, seed) in prepared:
        return prepared[(shape, seed)]
    room = AHEAD_MAX_BYTES if room is None else room
    if not drawn_on_host(shape) or checks.choose_slice(shape).host_bytes(shape) > room:
        return None
    began = time.perf_counter()
    q, k, v = host = host_inputs(shape, seed)
    ref = checks.float64_reference(shape, q, k, v)
    log_span("ahead", began, time.perf_counter(), "reference")
    return host, ref


def _run_held(shape, names, accuracy, compile_, tuned, backward, seed, waited, programs: dict,
              ahead: tuple | None = None) -> dict:
    with _part("inputs"):
        q, k, v = make_inputs(shape, seed, ahead[0] if ahead else None) if accuracy else (None, None, None)
    grads_checked = accuracy and backward and gradients.reference_bytes(shape) <= gradients.MAX_BYTES
    with _part("reference"):
        ref = ahead[1] if ahead else checks.float64_reference(shape, q, k, v) if accuracy and not backward else None
    out = {}
    for n in names:
        parts: dict = {"queue_wait_s": waited}
        try:
            if ref is not None:  # accuracy, forward; tuned when timed: the program the timing uses, compiled once
                with _part(f"run {n}"):  # its first run on the device (a new program's first: loaded, set up)
                    y = jax.block_until_ready(compiled.compile_backend(n, shape, False, tuned)[0](q, k, v))
                with _part(f"check {n}"):  # the copy back and the comparison with the reference
                    parts.update(output_shape=tuple(y.shape), output_dtype=str(y.dtype), accuracy=ref.check(y),
                                 reference_note=ref.note, output_slice=ref.take(y))
                del y
            status, reason = OK, ""
            if accuracy and backward:  # the gradients of the very program that is timed, by FlashAttention's rule
                exe = compiled.compile_backend(n, shape, True, tuned)[0]
                g = gradients.check(shape, exe(q, k, v), q, k, v) if grads_checked else None
                status, reason = (OK, "" if g else "gradients not checked: their float64 reference would not fit") \
                    if g is None or g.ok else (BAD_GRADIENTS, g.sentence())
            if compile_:
                exe, ms, before = compiled.compile_backend(n, shape, backward, tuned)
                parts.update(compile_ms=ms, compiled_before=before)
                programs[n] = exe  # described after the turn (run)
            out[n] = Result(shape, n, status, reason, backward, **parts)
        except Exception as e:  # an out-of-memory or a backend error is a row, never an exception
            status, reason = failure(e)
            out[n] = Result(shape, n, status, reason, backward, **parts)
    return out


UNTUNED = "compiled without XLA's autotuning: its matmul kernels may differ from JAX's default"


def _time(result: Result, info, seed: int, timing_kw: dict, tuned: bool = True) -> Result:
    """The four timings of a compiled implementation inside the run's turn (`DEVICE.use` keeps the holder's
    turn), brief when others are waiting; the inputs are drawn again (the same seed gives the same arrays)."""
    shape, n, backward = result.shape, result.implementation, result.backward
    dev, host = memory_needed(shape, [n], accuracy=False, backward=backward)
    try:
        with DEVICE.use(dev, host) as waited:
            waiting = DEVICE.waiting
            if waiting:  # others are queued behind this measurement: measure briefly and say so
                timing_kw = {"budget_s": 0.2, "repeats": 10, "warmup_s": 0.05, **timing_kw}
            exe, ms, _ = compiled.compile_backend(n, shape, backward, tuned)
            t = timing.time_compiled(exe, make_inputs(shape, seed), compile_ms=ms, **timing_kw)
    except Exception as e:  # busy queue, out of memory while timing
        status, reason = failure(e)
        return dataclasses.replace(result, status=status, reason=reason)
    notes = [f"measured briefly ({t.repeats} calls): {waiting} other runs were waiting"] if waiting else []
    if not tuned and compiled.check_options():  # on a GPU: the untuned program differs from JAX's default
        notes.append(UNTUNED)
    return dataclasses.replace(
        result, timing=dataclasses.replace(t, queue_wait_s=result.queue_wait_s + waited),
        peak_tflops=timing.peak_tflops(shape.dtype, info, fp8=get(n).fp8), timing_note="; ".join(notes))


def sweep(base: AttentionShape, field: str, values: Iterable, names: Sequence[str], **run_kw) -> Iterator[Result]:
    """One Result per (value, implementation), yielded as each value is done, so a UI can show progress.

    Sweeping q_len on a shape with q_len == kv_len moves both (a sequence-length sweep)."""
    if field not in PARAM_KEYS:
        raise ValueError(f"cannot sweep over {field!r}: not a field of AttentionShape")
    for value in values:
        shape = base.replace(**{field: value})
        if field == "q_len" and base.q_len == base.kv_len:
            shape = shape.replace(kv_len=value)
        yield from run(shape, names, **run_kw)
