"""A learner's exported program in the device worker: compiled, admitted, run, and bounded while it does.

    exe = compile_program(blob, specs)        # untuned and quiet by default: no place in the device's line
    refused_before(blob, stats)               # None, or why it is not run (it crashed a worker; too much work)
    run(exe, inputs, digest(blob))            # in a turn on the device, watched (suspects.py's watchdog)

What a library does not: the program is remembered by its hash while it compiles and runs, so a native abort or
a run past ATTNLAB_RUN_SECONDS ends only this worker and the program is refused from then on; its FLOPs (the
sandbox's jaxpr walk, bounds.py) against the lab's cost model decide before it compiles.
"""

from __future__ import annotations

import contextlib
import hashlib

import jax
import numpy as np

from attnlab import admission
from attnlab.measure import compiled as compiled_mod
from attnlab.measure import cost
from attnlab.settings import settings
from attnlab.yourturn import bounds, exercises, suspects

COMPILE_S = 120.0  # a learner's compile in the device worker (the sandbox compiled it for its CPU within 10 s)


def platform() -> str:
    """The platform name jax.export lowers for, here."""
    backend = jax.default_backend()
    return {"gpu": "cuda"}.get(backend, backend)


def specs_of(case: exercises.Case) -> list[tuple[tuple[int, ...], str]]:
    return [(shape, dtype) for _, shape, dtype in case.arrays]


def digest(blob: bytes | bytearray) -> str:
    """The name a learner's exported program is remembered by (attnlab/yourturn/suspects.py)."""
    return hashlib.sha256(blob).hexdigest()[:32]


def compile_program(blob: bytearray, specs, quiet: bool = True):
    """A learner's program compiled here, remembered while it compiles (a compile that aborts or outlasts
    COMPILE_S stops this worker, and is refused from then on). quiet: compiled without autotuning, so it
    launches nothing on the device and holds no place in the device's line (admission.Device.building)."""
    exported = jax.export.deserialize(blob)
    args = [jax.ShapeDtypeStruct(s, d) for s, d in specs]
    with suspects.running(digest(blob), COMPILE_S), admission.DEVICE.building(quiet=quiet):
        lowered = jax.jit(exported.call).lower(*args)
        return lowered.compile(compiled_mod.check_options()) if quiet else lowered.compile()


def refused_before(blob: bytes | bytearray, stats: bounds.Stats | None) -> str | None:
    """Why a learner's program is not run here, decided before it is compiled: it stopped a worker before,
    or the lab's cost model says it would hold the device past ATTNLAB_RUN_SECONDS. None: it may run."""
    why = suspects.refusal(digest(blob))
    if why or stats is None or stats.flops < cost.WORTH_MEASURING:
        return why
    seconds = stats.flops / cost.matmul_rate("float32")
    limit = settings().run_seconds
    if seconds > limit:
        return (f"would hold the device for at least {seconds:,.0f} s ({stats.flops:.3g} operations), over the lab's "
                f"limit of {limit:,.0f} s for one run")
    return None


def held_bytes(exe) -> int:
    info = compiled_mod.describe_compiled(exe)
    return sum(b or 0 for b in (info.temp_bytes, info.argument_bytes, info.output_bytes))


def run(exe, inputs: list[np.ndarray], name: str = ""):
    """Run a compiled program in a turn on the device, admitted by its own memory; outputs as NumPy (their own
    dtype). While it holds the device it is remembered as `name`: past ATTNLAB_RUN_SECONDS the watchdog ends
    the worker (a device call cannot be stopped half way), and the program is refused from then on."""
    with admission.DEVICE.use(held_bytes(exe)), (suspects.running(name, settings().run_seconds) if name
                                              else contextlib.nullcontext()):
        out = jax.block_until_ready(exe(*inputs))
        return jax.tree.map(np.asarray, out)
