"""What a backend is: ``fn(q, k, v, shape) -> out`` (Q B,T,N,H; K, V B,S,K,H; the shape's mask and KV heads),
the mask types it takes, its requirements as `Requirement` rows, and the device bytes one call holds.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax

from attnlab import oldest_first
from attnlab.device import DeviceInfo
from attnlab.masks import MaskType
from attnlab.shapes import AttentionShape
from attnlab.spans import log_span


@dataclasses.dataclass(frozen=True)
class Requirement:
    what: str  # "dtype"
    needed: str  # "bfloat16 or float16"
    here: str  # "float32"
    met: bool

    def sentence(self) -> str:
        return f"needs {self.what}: {self.needed} (here: {self.here})"


@dataclasses.dataclass(frozen=True)
class Backend:
    name: str
    label: str
    fn: Callable  # (q, k, v, shape) -> out
    needs: Callable[[AttentionShape, DeviceInfo], list[Requirement]]  # its own requirements, masks aside
    masks: tuple[type[MaskType], ...]  # the mask types `fn` honours (attnlab.masks); any other is refused
    device_bytes: Callable[[AttentionShape], int]  # what one forward call holds on the device
    description: str
    adds: str = ""  # what this rung of the ladder adds over the one below it, in a sentence
    fp8: bool = False  # computes in FP8 on the tensor cores: its TFLOP/s are a share of the FP8 peak
    _checked: Any = dataclasses.field(init=False, repr=False, compare=False)  # fn jitted, the shape static

    def requirements(self, shape: AttentionShape, device: DeviceInfo) -> list[Requirement]:
        """Every requirement of this backend at `shape` on `device`, the mask types it takes last."""
        return [*self.needs(shape, device), masks_taken(shape, self.masks)]

    def unmet(self, shape: AttentionShape, device: DeviceInfo) -> str | None:
        """None when this backend can run `shape` here; else why not, in a sentence."""
        for r in self.requirements(shape, device):
            if not r.met:
                return r.sentence()
        error = trace_error(self, shape)
        return f"{self.label} refuses this shape: {error}" if error else None

    def __post_init__(self):
        # JAX's own trace cache keeps each shape's trace: a check asked again traces nothing
        object.__setattr__(self, "_checked", jax.jit(self.fn, static_argnums=3))

    def program(self, shape: AttentionShape) -> tuple[Any, list]:
        """(the jitted function, its arguments) to lower for this backend at `shape`: the very function a check
        traces (`unmet`), so JAX's trace cache hands the lowering the jaxpr the check made rather than tracing
        again. A fresh `jit(shape)` traced every program twice: on this CPU a program's lowering took 16.5-16.9 ms
        that way and 12.1-12.3 ms this way, its thread's CPU 34 -> 26 ms (check, then compile, 40 programs at new
        shapes). Its compiled program is called with Q, K and V alone (the shape is static)."""
        return self._checked, [*abstract_inputs(shape), shape]

    def jit(self, shape: AttentionShape):
        """This backend at `shape`, jitted (the shape is static: masks and grouping are baked in); a fresh jit, so
        compile it through `measure.compiled` (PROGRAMS) to keep it."""
        return jax.jit(lambda q, k, v: self.fn(q, k, v, shape))


def abstract_inputs(shape: AttentionShape) -> list[jax.ShapeDtypeStruct]:
    """Q, K, V as shapes and dtypes only: enough to trace or compile, nothing allocated."""
    return [jax.ShapeDtypeStruct(s, shape.dtype) for s in (shape.q_shape(), shape.kv_shape(), shape.kv_shape())]


def lower(jitted, args):
    """`jitted.lower(*args)`, one thread at a time (Mosaic GPU's lowering is not thread-safe), the oldest page's
    first (`oldest_first.PYTHON`); no device turn."""
    with oldest_first.PYTHON:
        began = time.perf_counter()
        try:
            return jitted.lower(*args)
        finally:  # 'lower' spans: how much of a window Python spent lowering (scripts/request_log.py --spans)
            log_span("lower", began, time.perf_counter())


def trace_error(backend: Backend, shape: AttentionShape) -> str | None:
    """The backend's own error text when it refuses `shape` while tracing, or None: libraries refuse a shape while
    they trace, so a refusal is heard with no device and no lowering (docs/design-notes.md, "Checks trace")."""
    with oldest_first.PYTHON:  # Python throughout (the GIL's): the oldest page's first
        began = time.perf_counter()
        try:
            backend._checked.trace(*abstract_inputs(shape), shape)
        except Exception as e:  # the backend's own words are the lesson here
            return error_text(e)
        finally:  # 'trace' spans: a check's Python (JAX's cache answers a shape traced before in microseconds)
            log_span("trace", began, time.perf_counter())
    return None


def error_text(e: BaseException, limit: int = 400) -> str:
    """One wording for every error a learner sees: the type, then the first line of the message."""
    lines = str(e).strip().splitlines()
    text = f"{type(e).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------
# requirements every backend draws from
# --------------------------------------------------------------------------------------------
def cuda_gpu(device: DeviceInfo, min_cc: tuple[int, int]) -> list[Requirement]:
    need = f"{min_cc[0]}.{min_cc[1]} or newer"
    return [
        Requirement("a CUDA GPU", "JAX's backend on CUDA", f"{device.backend} ({device.platform})", device.is_cuda),
        Requirement("compute capability", need, f"{device.device_kind}: {device.compute_capability_str}",
                    device.at_least(min_cc)),
    ]


def cudnn_loaded(device: DeviceInfo) -> Requirement:
    return Requirement("cuDNN loaded by JAX", "a cuDNN version", device.cudnn_version or "not loaded",
                       device.cudnn_version is not None)


def dtype_in(shape: AttentionShape, allowed: tuple[str, ...], note: str = "") -> Requirement:
    return Requirement("dtype", " or ".join(allowed) + note, shape.dtype, shape.dtype in allowed)


def head_dim_rule(shape: AttentionShape, max_h: int, multiple: int) -> Requirement:
    ok = shape.head_dim <= max_h and shape.head_dim % multiple == 0
    return Requirement("head_dim", f"≤ {max_h} and a multiple of {multiple}", str(shape.head_dim), ok)


def masks_taken(shape: AttentionShape, taken: tuple[type[MaskType], ...]) -> Requirement:
    """The mask types a backend takes (needed) against those the shape's mask asks for (here)."""
    asked = shape.mask.features
    return Requirement("masks within", ", ".join(t.feature for t in taken) or "none", ", ".join(asked) or "no mask",
                       all(f in {t.feature for t in taken} for f in asked))


def anywhere(shape: AttentionShape, device: DeviceInfo) -> list[Requirement]:
    return []


# --------------------------------------------------------------------------------------------
# device bytes, by how a backend works
# --------------------------------------------------------------------------------------------
def io_bytes(shape: AttentionShape) -> int:
    return shape.input_bytes() + shape.output_bytes()


def working_copy_bytes(shape: AttentionShape) -> int:
    """float32 copies of Q, K and V that XLA may make (half precision upcast, or K and V transposed, on a CPU)."""
    return shape.input_bytes() * 4 // shape.itemsize


def materialised_bytes(copies: int) -> Callable[[AttentionShape], int]:
    """Inputs, output, `copies` float32 (B, N, T, S) matrices (O(T·S)) and the working copies."""
    return lambda shape: io_bytes(shape) + copies * shape.score_bytes() + working_copy_bytes(shape)


def streamed_bytes(shape: AttentionShape) -> int:
    """A fused kernel: inputs, output, the float32 log-sum-exp per (B, N, T) and a small workspace."""
    return io_bytes(shape) + shape.batch * shape.heads * shape.q_len * 4 + 2**20
