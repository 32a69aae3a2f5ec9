"""A learner's passing function at the learner's own shape, timed like any backend (entry point).

    time_solution("gqa", source, shape)  ->  runs.Result of implementation "yours"

The function is traced in the sandbox at the shape (attnlab/yourturn/sandbox.py), compiled here, refused
with the run layer's sentence if its memory does not fit the budget, and timed by the one harness
(`timing.time_compiled`: wall, throughput and, on a GPU, CUPTI device time) on the run layer's inputs:
the same arrays naive attention and cuDNN are timed on at that shape, so the rows compare. Nothing is timed
that was not checked: the output at the learner's shape is compared with the float64 reference first (on a
slice of its rows when the whole would not fit, `checks.float64_reference`), and a wrong one is not timed.
It is compiled without XLA's autotuner, as the lab's rows beside it are (pages/yourturn_ui.py): a tuned compile runs
kernels on the GPU, so it waits for a place in the device's line and holds every run while it builds, and no
learner's compile may hold the class's GPU (up to its 120 s bound).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from jax import Array

from attnlab import admission, device
from attnlab.math import checks
from attnlab.measure import compiled, runs, timing
from attnlab.settings import settings
from attnlab.shapes import NO_MASK, AttentionShape
from attnlab.yourturn import bounds, exercises, sandbox, suspects
from attnlab.yourturn import program as learner

TIMING_CALLS = 10  # a timing's calls at least (warm-up, repeats, the device-time pass): the watchdog's bound is
# this many runs' ATTNLAB_RUN_SECONDS
CHECK_MAX_BYTES = 32 * 2**20  # the float64 reference of the timed shape: on a slice of rows when larger

TIMED = ("attention", "gqa", "decode")  # whose function computes attention's output (its FLOPs, its rows)


def shape_for(name: str, shape: AttentionShape) -> AttentionShape:
    """The shape the exercise's function takes, from the page's: MHA wants K = N, a decode step one query."""
    s = shape.replace(mask=NO_MASK)
    if name == "attention":
        return s.replace(kv_heads=s.heads)
    if name == "decode":
        return s.replace(q_len=1)
    return s


def time_solution(name: str, source: str, shape: AttentionShape) -> runs.Result:
    """The learner's function `name` at `shape` (see shape_for), as a run-layer Result of "yours"."""
    if name not in TIMED:
        raise ValueError(f"the {name} exercise returns weights or a step, not attention's output: it is checked, "
                         "not timed against the kernels")
    ex = exercises.get(name)
    s = shape_for(name, shape)
    problems = s.validate()
    if problems:
        return runs.Result(s, "yours", runs.INVALID, " ".join(problems))
    specs: list[tuple[tuple[int, ...], str]] = [(s.q_shape(), s.dtype), (s.kv_shape(), s.dtype),
                                                (s.kv_shape(), s.dtype)]
    stats: list[bounds.Stats] = []
    try:
        (blob,) = sandbox.export(source, ex.entry, [(specs, {})], learner.platform(),
                                 limits=[bounds.limits_for(ex, specs)], stats=stats)
        why = learner.refused_before(blob, stats[0])
        if why:
            return runs.Result(s, "yours", runs.TOO_SLOW if why.startswith("would") else runs.ERROR, why)
        exe = learner.compile_program(blob, specs)  # untuned: a learner's compile holds no place in the line
    except sandbox.Stopped as e:
        return runs.Result(s, "yours", runs.ERROR, str(e))
    except Exception as e:
        return runs.Result(s, "yours", *runs.failure(e))
    program = compiled.describe_compiled(exe)
    held = sum(b or 0 for b in (program.temp_bytes, program.argument_bytes, program.output_bytes)) \
        + s.input_bytes() * (4 // s.itemsize)  # and the float32 draws of the inputs
    why = admission.DEVICE.check(held, 0)
    if why:
        return runs.Result(s, "yours", runs.OVER_BUDGET, why, program=program)
    bound_s = TIMING_CALLS * settings().run_seconds
    try:
        with admission.DEVICE.use(held) as waited, suspects.running(learner.digest(blob), bound_s):
            inputs = runs.make_inputs(s)
            out = exe(*inputs)
            wrong = _wrong_at(s, ex.entry, out, inputs)  # checked at this very shape before it is timed
            output_shape, output_dtype = tuple(getattr(out, "shape", ())), str(getattr(out, "dtype", type(out)))
            del out
            if wrong:
                return runs.Result(s, "yours", runs.ERROR, wrong, program=program)
            t = timing.time_compiled(exe, inputs)
    except Exception as e:
        status, reason = runs.failure(e)
        return runs.Result(s, "yours", status, reason, program=program)
    return runs.Result(s, "yours", runs.OK, program=program, output_shape=output_shape, output_dtype=output_dtype,
                       timing=dataclasses.replace(t, queue_wait_s=waited),
                       peak_tflops=timing.peak_tflops(s.dtype, device.info()))


def _wrong_at(s: AttentionShape, entry: str, out, inputs: tuple[Array, Array, Array]) -> str | None:
    """Why the learner's output at the timed shape is not attention's (None: it is, within the lab's tolerances),
    on the float64 reference's slice of rows."""
    if isinstance(out, (tuple, list)) or not hasattr(out, "shape"):
        return f"{entry} does not return one array at your shape, so it is not timed"
    if tuple(out.shape) != s.q_shape():
        return f"{entry} returns shape {tuple(out.shape)} at your shape, expected {s.q_shape()}: not timed"
    if np.issubdtype(np.dtype(out.dtype), np.complexfloating):
        return f"{entry} returns complex numbers at your shape: not timed"
    ref = checks.float64_reference(s, *inputs, max_bytes=CHECK_MAX_BYTES)
    acc = ref.check(out)
    if not acc.allclose:
        return (f"at your shape {entry}'s output differs from the float64 reference (max abs error "
                f"{acc.max_abs_error:.3g}, relative {acc.relative_error:.3g}; {ref.note or 'every row checked'}), "
                "so it is not timed: only a function that is right at the shape it is timed at gets a time")
    return None
