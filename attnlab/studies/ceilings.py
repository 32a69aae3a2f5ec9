"""The GPU's own ceilings, measured: a large bf16 matmul and device-to-device copy, the roofs of the rates."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import jax.numpy as jnp

from attnlab.measure import compiled, timing


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """The GPU's own rates, measured: a large bf16 matmul and a large device-to-device copy."""

    matmul_bf16_tflops: float  # TFLOP/s of an n × n bf16 matmul
    copy_tb_s: float  # TB/s, every byte read and written once
    matmul_n: int | None = None
    copy_bytes: int | None = None

    @classmethod
    def from_json(cls, c: Mapping) -> Ceilings:
        return cls(**{f.name: c[f.name] for f in dataclasses.fields(cls) if f.name in c})

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _timed(fn, *args, iterations: int = 10) -> float:
    """ms per call of a jitted function: CUPTI kernel time on a GPU, else pipelined wall time."""
    exe, compile_ms, _ = compiled.compile_timed(fn, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args])
    t = timing.time_compiled(exe, args, compile_ms=compile_ms, repeats=iterations, budget_s=2.0)
    return t.device_ms or t.throughput_ms


def ceilings(matmul_n: int = 8192, copy_gib: float = 2.0) -> Ceilings:
    """A large bf16 matmul (TFLOP/s) and a large device-to-device copy (TB/s, read + write)."""
    if jax.default_backend() == "cpu":
        matmul_n, copy_gib = 1024, 0.25
    key = jax.random.PRNGKey(1)
    a = jax.random.normal(key, (matmul_n, matmul_n), jnp.float32).astype(jnp.bfloat16)  # random, never zeros
    b = jax.random.normal(jax.random.fold_in(key, 1), (matmul_n, matmul_n), jnp.float32).astype(jnp.bfloat16)
    ms = _timed(lambda a, b: a @ b, a, b)
    n_el = int(copy_gib * 2**30 / 2)
    x = jax.random.normal(key, (n_el,), jnp.float32).astype(jnp.bfloat16)
    copy_ms = _timed(lambda x: x + jnp.bfloat16(1), x)  # reads and writes every byte once
    return Ceilings(matmul_bf16_tflops=2 * matmul_n**3 / (ms * 1e-3) / 1e12, matmul_n=matmul_n,
                    copy_tb_s=2 * x.nbytes / (copy_ms * 1e-3) / 1e12, copy_bytes=int(x.nbytes))
