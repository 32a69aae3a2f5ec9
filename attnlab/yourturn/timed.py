"""A learner's passing function at the learner's own shape, timed like any backend (entry point).

    time_solution("gqa", source, shape)  ->  runs.Result of implementation "yours"

The function is traced in the sandbox at the shape (attnlab/yourturn/sandbox.py), compiled here, refused
with the run layer's sentence if its memory does not fit the budget, and timed by the one harness
(`timing.time_compiled`: wall, throughput and, on a GPU, CUPTI device time) on the run layer's inputs:
the same arrays naive attention and cuDNN are timed on at that shape, so the rows compare.
"""

from __future__ import annotations

import dataclasses

from attnlab import admission, device
from attnlab.measure import compiled, runs, timing
from attnlab.shapes import NO_MASK, AttentionShape
from attnlab.yourturn import exercises, grade, sandbox

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
    specs = [(s.q_shape(), s.dtype), (s.kv_shape(), s.dtype), (s.kv_shape(), s.dtype)]
    try:
        (blob,) = sandbox.export(source, ex.entry, [(specs, {})], grade.platform())
        exe = grade._compile(blob, specs)
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
    try:
        with admission.DEVICE.use(held) as waited:
            inputs = runs.make_inputs(s)
            t = timing.time_compiled(exe, inputs)
            out = exe(*inputs)
            output_shape, output_dtype = tuple(out.shape), str(out.dtype)
            del out
    except Exception as e:
        status, reason = runs.failure(e)
        return runs.Result(s, "yours", status, reason, program=program)
    return runs.Result(s, "yours", runs.OK, program=program, output_shape=output_shape, output_dtype=output_dtype,
                       timing=dataclasses.replace(t, queue_wait_s=waited),
                       peak_tflops=timing.peak_tflops(s.dtype, device.info()))
