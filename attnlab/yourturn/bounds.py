"""What a learner's traced program may be before it reaches the device: its size, its length and its cost.

    limits = bounds.limits_for(exercise, specs, numbers)       # from the case's shapes and the lab's solution
    stats = bounds.walk(jax.jit(fn).trace(*args).jaxpr)         # in the sandbox, on the learner's program
    why = bounds.refusal(stats, limits)                         # None, or a sentence

The walk reads every operation of the traced program (jaxpr), sub-programs included as often as they are
called (a function called in a loop counts once per call), and takes every result's shape and dtype: the
element count and bytes are Python integers, so a shape whose element count overflows int64 is seen as the
huge number it is instead of aborting XLA ("overflow in static extent product"). The bounds come from the
exercise: a result may be at most `BYTES_OVER_INPUT` times the case's largest input, or `BYTES_OVER_LAB`
times the lab's own solution's largest, and at least `MIN_BYTES`; the cost (FLOPs: 2·m·n·k a matmul, one an
element otherwise) at most `FLOPS_OVER_LAB` times the lab's, at least `MIN_FLOPS`; at most `MAX_EQNS`
operations (the lab's solutions have a few dozen). Why the lab's own walk and not XLA's cost analysis: the
walk runs before anything is compiled, which is the step a hostile program made last minutes or abort.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

MAX_EQNS = 2000
MIN_BYTES = 16 * 2**20
BYTES_OVER_INPUT = 64
BYTES_OVER_LAB = 4
MIN_FLOPS = 1e9
FLOPS_OVER_LAB = 64
REAL = ("float16", "bfloat16", "float32", "float64")


@dataclasses.dataclass(frozen=True)
class Limits:
    max_bytes: int
    max_flops: float
    max_eqns: int = MAX_EQNS
    outputs: int = 1  # arrays the function returns


MAX_SHAPES = 512


@dataclasses.dataclass(frozen=True)
class Stats:
    eqns: int = 0
    flops: float = 0.0
    peak_bytes: int = 0
    peak_what: str = ""  # the largest result: "broadcast_in_dim -> float32[1099511627776, 8]"
    outputs: tuple[tuple[tuple[int, ...], str], ...] = ()  # (shape, dtype) of each output
    shapes: frozenset = frozenset()  # the distinct shapes of every result inside (at most MAX_SHAPES): what it built


def _size(shape) -> int:
    return math.prod(int(d) for d in shape)  # a Python int: exact however large


def _itemsize(dtype) -> int:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return 4  # a dtype NumPy does not name (bfloat16 is named by ml_dtypes): as float32


def _subjaxprs(params):
    from jax.extend import core

    for v in params.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(x, core.ClosedJaxpr):
                yield x.jaxpr
            elif isinstance(x, core.Jaxpr):
                yield x


def walk(jaxpr) -> Stats:
    """The program's operations, cost and largest result (a ClosedJaxpr or Jaxpr), sub-programs inlined."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    memo: dict[int, tuple[int, float, int, str]] = {}
    shapes: set[tuple[int, ...]] = set()

    def one(j) -> tuple[int, float, int, str]:
        if id(j) in memo:
            return memo[id(j)]
        eqns, flops, peak, what = 0, 0.0, 0, ""
        for e in j.eqns:
            eqns += 1
            for sub in _subjaxprs(e.params):
                n, f, p, w = one(sub)
                eqns, flops = eqns + n, flops + f
                if p > peak:
                    peak, what = p, w
            out_elems = 0
            for v in e.outvars:
                aval = v.aval
                shape = getattr(aval, "shape", ())
                elems = _size(shape)
                if len(shapes) < MAX_SHAPES:
                    shapes.add(tuple(int(d) for d in shape))
                out_elems += elems
                nbytes = elems * _itemsize(getattr(aval, "dtype", "float32"))
                if nbytes > peak:
                    peak, what = nbytes, f"{e.primitive.name} -> {getattr(aval, 'dtype', '?')}{list(shape)}"
            if e.primitive.name == "dot_general":
                lhs_contract = e.params["dimension_numbers"][0][0]
                lhs = e.invars[0].aval.shape
                flops += 2.0 * out_elems * _size(lhs[d] for d in lhs_contract)
            else:
                flops += float(max(out_elems, max((_size(getattr(v.aval, "shape", ())) for v in e.invars
                                                   if hasattr(v, "aval")), default=0)))
        memo[id(j)] = (eqns, flops, peak, what)
        return memo[id(j)]

    eqns, flops, peak, what = one(jaxpr)
    outputs = tuple((tuple(int(d) for d in getattr(v.aval, "shape", ())), str(getattr(v.aval, "dtype", "?")))
                    for v in jaxpr.outvars)
    return Stats(eqns, flops, peak, what, outputs, frozenset(shapes))


def refusal(stats: Stats, limits: Limits, entry: str = "your function") -> str | None:
    """The sentence that refuses a program past its limits, or None."""
    if stats.eqns > limits.max_eqns:
        return (f"{entry} traces to {stats.eqns:,} operations, and a solution needs far fewer (at most "
                f"{limits.max_eqns:,} here): is a loop unrolling into a huge program? Use array operations")
    if stats.peak_bytes > limits.max_bytes:
        return (f"{entry} builds an array of {_fmt(stats.peak_bytes)} ({stats.peak_what}), far more than this "
                f"exercise needs (at most {_fmt(limits.max_bytes)} here): check the shapes you broadcast or build")
    if stats.flops > limits.max_flops:
        return (f"{entry} costs {stats.flops:.3g} operations, far more than this exercise needs (at most "
                f"{limits.max_flops:.3g} here): is something computed many times over?")
    if len(stats.outputs) != limits.outputs:
        if not stats.outputs:
            return f"{entry} returns nothing (None): it must return {_arrays(limits.outputs)}"
        return f"{entry} returns {len(stats.outputs)} arrays; it must return {_arrays(limits.outputs)}"
    for _, dtype in stats.outputs:
        if dtype not in REAL:
            return (f"{entry} returns a {dtype} array: the lab checks real numbers (floating point), so return "
                    "a float array" + (" without an imaginary part" if "complex" in dtype else ""))
    return None


def _arrays(n: int) -> str:
    return "one array" if n == 1 else f"{n} arrays"


def _fmt(n: int) -> str:
    for unit, size in (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.3g} {unit}" if n < 2**70 else f"2^{n.bit_length() - 1} bytes"
    return f"{n} bytes"


def limits_for(exercise, specs, numbers: dict | None = None) -> Limits:
    """The limits of one case: `specs` the (shape, dtype) of each input, `numbers` the Python numbers."""
    return _limits(exercise.name, tuple((tuple(s), str(d)) for s, d in specs),
                   tuple(sorted((numbers or {}).items(), key=lambda kv: kv[0])))


@functools.lru_cache(maxsize=256)
def _limits(name: str, specs, numbers) -> Limits:
    import jax

    from attnlab.yourturn import allowed_names, exercises

    ex = exercises.get(name)
    largest_input = max(_size(s) * _itemsize(d) for s, d in specs)
    scope = allowed_names.scope()  # the lab's own solution, in the namespace a learner's code gets
    exec(compile(ex.solution, "<the lab's solution>", "exec"), scope)
    fn = functools.partial(scope[ex.entry], **dict(numbers))
    lab = walk(jax.jit(fn).trace(*[jax.ShapeDtypeStruct(s, d) for s, d in specs]).jaxpr)
    return Limits(max_bytes=max(MIN_BYTES, BYTES_OVER_INPUT * largest_input, BYTES_OVER_LAB * lab.peak_bytes),
                  max_flops=max(MIN_FLOPS, FLOPS_OVER_LAB * lab.flops), outputs=len(lab.outputs))
