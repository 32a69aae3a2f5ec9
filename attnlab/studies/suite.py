"""The benchmark suite: the codelab's workload, long context, the GPU's own ceilings, TE and FP8.

`python -m attnlab bench --out results.json` runs it here; a GPU machine's JSON ships as
`attnlab/shipped/<gpu>.json`. Every figure is measured by the one harness, `runs` and `timing`. A run is a
`SuiteRun` (`run` returns one, `SuiteRun.load(name)` reads a shipped file once).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TypedDict, cast

import jax
import pandas as pd

from attnlab import device as device_mod
from attnlab.backends import REGISTRY
from attnlab.measure import runs
from attnlab.shapes import AttentionShape
from attnlab.studies import fp8_study
from attnlab.studies.ceilings import Ceilings, ceilings  # noqa: F401  (re-exported)
from attnlab.studies.fidelity import bare_loop, fidelity  # noqa: F401  (re-exported)

CODELAB = AttentionShape()  # B4 T128 N8 H64 float32
FUSED = ["naive", "sdpa_xla", "sdpa_cudnn", "te_dpa", "cudnn_fp8"]


class Sizes(TypedDict, total=False):
    """AttentionShape's keyword arguments that LONG sets."""

    batch: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str


LONG: Sizes = dict(batch=4, heads=16, kv_heads=16, head_dim=128, dtype="bfloat16")


# --------------------------------------------------------------------------------------------
# what a run's file holds, typed
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Environment:
    """Where a run was measured: the device, its versions, the date and the datasheet peak."""

    date: str  # ISO 8601 day
    device: str  # e.g. "NVIDIA H200"
    backend: str = ""  # "gpu" or "cpu"
    platform: str = ""
    compute_capability: str | None = None
    memory_total_bytes: int | None = None
    jax: str = ""
    jaxlib: str = ""
    cudnn: str | None = None
    transformer_engine: str | None = None
    peak: device_mod.Peak | None = None  # the datasheet's dense peaks (TFLOP/s, TB/s)
    xla_flags: str = ""
    driver: str | None = None

    @classmethod
    def from_json(cls, e: Mapping) -> Environment:
        """The file's environment; a peak figure the file lacks is None."""
        names = {f.name for f in dataclasses.fields(cls)}
        peak = e.get("peak")
        return cls(**{k: v for k, v in e.items() if k in names and k != "peak"},
                   peak=device_mod.Peak(**{f.name: peak.get(f.name) for f in dataclasses.fields(device_mod.Peak)})
                   if peak else None)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SuiteRun:
    """The benchmark suite's results (`run`), or a shipped file of them (`SuiteRun.load("h200")`); `tables`,
    `fidelity`, `fp8_attention` and `te_block` are rows in the run layer's columns, None where not run."""

    environment: Environment
    ceilings: Ceilings | None = None
    tables: Mapping[str, list[dict]] = dataclasses.field(default_factory=dict)
    fidelity: list[dict] | None = None
    fp8_attention: list[dict] | None = None
    te_autocast: fp8_study.AutocastStudy | None = None
    te_block: list[dict] | None = None

    @classmethod
    def from_json(cls, data: Mapping) -> SuiteRun:
        """A suite file's dict (`python -m attnlab bench` or `decode`); ValueError for any other file."""
        if not isinstance(data, Mapping) or "device" not in (data.get("environment") or {}) or "tables" not in data:
            raise ValueError("not a benchmark suite file (python -m attnlab bench): it needs 'tables' and "
                             "'environment.device'")
        autocast = data.get("te_autocast")
        return cls(environment=Environment.from_json(data["environment"]),
                   ceilings=Ceilings.from_json(data["ceilings"]) if data.get("ceilings") else None,
                   tables=dict(data["tables"]), fidelity=data.get("fidelity"),
                   fp8_attention=data.get("fp8_attention"),
                   te_autocast=fp8_study.AutocastStudy.from_json(autocast) if autocast else None,
                   te_block=data.get("te_block"))

    @classmethod
    def load(cls, name: str = "h200") -> SuiteRun | None:
        """The shipped file `attnlab/shipped/{name}.json`, or None when it does not ship."""
        from attnlab import shipped

        data = shipped.load(name)
        return None if data is None else cls.from_json(data)

    def to_json(self) -> dict:
        """The file as `python -m attnlab bench` writes it (parts the run did not make left out)."""
        out = {"environment": self.environment.to_json(), "tables": dict(self.tables)}
        if self.ceilings:
            out["ceilings"] = self.ceilings.to_json()
        for name in ("fidelity", "fp8_attention", "te_autocast", "te_block"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value.to_json() if name == "te_autocast" else value
        return out


def environment() -> Environment:
    info = device_mod.info()
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        driver = out.stdout.strip() or None
    except Exception:
        driver = None
    return Environment(
        date=datetime.date.today().isoformat(), device=info.device_kind, backend=info.backend,
        platform=info.platform, compute_capability=info.compute_capability_str,
        memory_total_bytes=info.memory_total_bytes, jax=info.jax_version, jaxlib=info.jaxlib_version,
        cudnn=info.cudnn_version, transformer_engine=info.te_version, peak=info.peak,
        xla_flags=os.environ.get("XLA_FLAGS", ""),  # e.g. CUDA graphs off, as the server runs them
        driver=driver)


# --------------------------------------------------------------------------------------------
# the suite
# --------------------------------------------------------------------------------------------
def _sweep(base: AttentionShape, field: str, values, names, backward: bool = False, **timing_kw):
    """runs.sweep, timed, as rows (the suite stores plain JSON)."""
    for r in runs.sweep(base, field, values, names, accuracy=False, timed=True, backward=backward, **timing_kw):
        yield {"swept": field, "value": getattr(r.shape, field), **r.row()}


def _collect(rows: Iterable[dict], log: Callable[[str], None], ceiling: Ceilings | None = None) -> pd.DataFrame:
    """Rows as a table, each logged; with the ceilings, + 'pct_of_measured_matmul' (% of the bf16 matmul)."""
    out = []
    for r in rows:
        best = r.get("device_tflops") or r.get("tflops")
        if ceiling and best and r.get("dtype") != "float32":
            r["pct_of_measured_matmul"] = 100 * best / ceiling.matmul_bf16_tflops
        out.append(r)
        t = r.get("device_tflops") or r.get("tflops")
        log(f"  {r.get('shape', ''):<44} {r['implementation']:<11} {r.get('pass', ''):<16} "
            f"{r['status']:<12} " + (f"{t:8.1f} TFLOP/s" if t else r.get("reason", "")[:60]))
    return pd.DataFrame(out)


def run(quick: bool = False, log: Callable[[str], None] = print) -> SuiteRun:
    """Everything (`SuiteRun.to_json()` is the file). quick=True: a CPU-sized subset (for tests and laptops)."""
    gpu = jax.default_backend() == "gpu"
    env = environment()
    log("ceilings ...")
    ceiling = ceilings()
    tables: dict[str, list[dict]] = {}
    all_impls = list(REGISTRY)

    log("default shape ...")
    rows = []
    for dtype in ("float32", "bfloat16"):
        rows += [r.row() for r in runs.run(CODELAB.replace(dtype=dtype), all_impls, accuracy=False, timed=True)]
    tables["default"] = runs.records(_collect(rows, log, ceiling))

    seq = [64, 128, 256, 512, 1024] + ([2048, 4096] if gpu else [])
    log("sequence sweep ...")
    tables["seq_sweep"] = runs.records(_collect(
        _sweep(CODELAB.replace(dtype="bfloat16"), "q_len", seq[: 2 if quick else None], all_impls), log))
    log("batch sweep ...")
    tables["batch_sweep"] = runs.records(_collect(
        _sweep(CODELAB.replace(q_len=256, kv_len=256, dtype="bfloat16"), "batch",
               [1, 2, 4, 8, 16][: 2 if quick else None], all_impls), log))
    log("TransformerEngine sweep (causal bf16, B4 N8 H64) ...")
    tables["te_sweep"] = runs.records(_collect(
        _sweep(CODELAB.replace(dtype="bfloat16", causal=True), "q_len",
               [128, 256, 512, 1024, 2048][: 2 if quick else None], ["sdpa_xla", "sdpa_cudnn", "te_dpa"]), log))
    if quick:
        return SuiteRun(env, ceiling, tables)

    log("long context ...")
    long_rows = []
    for head_dim, heads in ((128, 16), (64, 32)):
        for causal in (False, True):
            sizes: Sizes = {**LONG, "head_dim": head_dim, "heads": heads, "kv_heads": heads}
            base = AttentionShape(q_len=2048, kv_len=2048, causal=causal, **sizes)
            for backward in (False, True):
                names = ["naive", "sdpa_xla", "sdpa_cudnn", "te_dpa"] + ([] if backward else ["cudnn_fp8"])
                long_rows += runs.records(_collect(_sweep(base, "q_len", [2048, 4096, 8192, 16384], names,
                                                          backward=backward, budget_s=0.6), log, ceiling))
    tables["long_context"] = long_rows

    log("fidelity ...")
    anchor = AttentionShape(q_len=8192, kv_len=8192, **LONG)
    fid = runs.records(fidelity([anchor, anchor.replace(causal=True), CODELAB.replace(dtype="bfloat16")]))
    log("FP8 attention (JAX cuDNN) ...")
    fp8_shapes = [AttentionShape(q_len=t, kv_len=t, causal=c, **cast(Sizes, {**LONG, "batch": b}))
                  for t, b in ((2048, 4), (8192, 4), (16384, 2)) for c in (False, True)]
    fp8_shapes += [AttentionShape(q_len=8192, kv_len=8192, causal=c, batch=4, heads=32, kv_heads=32,
                                  head_dim=64, dtype="bfloat16") for c in (False, True)]
    fp8_shapes += [CODELAB.replace(dtype="bfloat16")]
    fp8_rows = runs.records(fp8_study.fp8_attention_study(fp8_shapes))
    log("TE autocast and FP8 block ...")
    te_shape = AttentionShape(batch=4, q_len=2048, kv_len=2048, heads=8, kv_heads=8, head_dim=64,
                              dtype="bfloat16", causal=True)
    autocast = fp8_study.te_autocast_study(te_shape)
    block = runs.records(fp8_study.te_block_study(AttentionShape(q_len=4096, kv_len=4096, causal=True, **LONG)))
    return SuiteRun(env, ceiling, tables, fidelity=fid, fp8_attention=fp8_rows, te_autocast=autocast, te_block=block)


def summary(result: SuiteRun) -> list[str]:
    """The short table printed last."""
    e = result.environment
    lines = [f"{e.device} cc {e.compute_capability}  jax {e.jax}  cuDNN {e.cudnn}  TE {e.transformer_engine}"]
    c = result.ceilings
    if c:
        lines.append(f"ceilings: bf16 matmul {c.matmul_bf16_tflops:.0f} TFLOP/s, copy {c.copy_tb_s:.2f} TB/s")
    for row in result.fidelity or []:
        if "harness_over_bare" in row:
            lines.append(
                f"fidelity {row['shape']}: harness {row['harness_tflops']:.1f} TFLOP/s "
                f"(device {row['harness_device_tflops'] or float('nan'):.1f}) vs bare loop {row['bare_tflops']:.1f} "
                f"-> {row['harness_over_bare']:.3f}x; wall {row['harness_wall_ms']:.4f} ms, device "
                f"{(row['harness_device_ms'] or float('nan')):.4f} ms")
    for row in result.tables.get("long_context", []):
        if row["status"] == runs.OK and row["q_len"] == 8192 and row["head_dim"] == 128:
            lines.append(f"{row['shape']:<42} {row['implementation']:<11} {row['pass']:<16} "
                         f"{row['tflops']:7.1f} TFLOP/s (device {row['device_tflops'] or math.nan:7.1f})")
    for row in result.fp8_attention or []:
        if row.get("status") == "ok":
            f = lambda key, row=row: f"{row.get(key) or math.nan:5.0f}"  # noqa: E731
            lines.append(f"FP8 {row['shape']:<42} TFLOP/s at boost | sustained: bf16 {f('bf16_burst_tflops')} | "
                         f"{f('bf16_tflops')}  fp8 kernel {f('fp8_burst_tflops')} | {f('fp8_tflops')} (x{row['speedup'] or math.nan:.2f})"
                         f"  unit scales {f('fp8_unit_burst_tflops')}  end-to-end {f('fp8_e2e_tflops')}  "
                         f"clock {row.get('fp8_burst_clock_mhz')}|{row.get('fp8_clock_mhz')} MHz  err unit "
                         f"{row['err_unit_scales']:.3f} amax {row['err_amax_all']:.3f}  x/64: unit "
                         f"{row['err_small_inputs_unit_scales']:.3f} no O scale {row['err_small_inputs_amax_scales']:.3f} "
                         f"all {row.get('err_small_inputs_all_scales', math.nan):.3f}")
        else:
            lines.append(f"FP8 {row.get('shape')}: {row.get('status')} {row.get('reason', '')[:100]}")
    a = result.te_autocast
    if a:
        lines.append(f"TE autocast: {json.dumps({k: v for k, v in a.to_json().items() if 'kernels' not in k})[:300]}")
    for row in result.te_block or []:
        lines.append(f"TE block {row.get('recipe')}: {row.get('status')} "
                     + (f"{row['ms']:.3f} ms {row['tflops']:.0f} TFLOP/s err {row['rel_err_vs_bf16']:.4f}"
                        if row.get("status") == "ok" else row.get("reason", "")[:200]))
    return lines
