"""The ladder from XLA to cuDNN: each rung's throughput, masks that skip work, DRAM bytes, and the roofline.

`python -m attnlab ladder --out attnlab/shipped/h200_ladder.json` runs `run_all` on a GPU (page 10 shows it):
every figure through `runs`, but Nsight Compute's optional DRAM counters (`ncu.ncu_dram_bytes`, a subprocess).
`run_all` returns a `LadderRun`; `LadderRun.load()` reads the shipped file once. Its JSON (every table a
list of `runs.Result.row()` dicts plus the keys named):
    environment    suite.environment(): device, compute capability, driver, versions, date, datasheet peak
    ceilings       suite.ceilings(): measured bf16 matmul TFLOP/s and copy TB/s
    ladder         rows of LADDER at ANCHOR, causal and not, forward (accuracy + timing) and, for the rungs
                   in BACKWARD, forward+backward; + 'rung' (0 = XLA ... 6 = cuDNN FP8)
    flash_t4096    sdpa_xla and flash_jax at ANCHOR with T = S = 4096 (time and compiled temp bytes)
    masks          MASK_NAMES under each mask of `masks(ANCHOR)`; + 'mask' (its label)
    backward_memory  naive, flash_jax, sdpa_cudnn forward+backward compiled at T = S = 1024 ... 8192
    ncu            per implementation: an `NcuCount` ({'read_bytes', 'write_bytes', 'kernel', 'shape'} or {'reason'})
    seconds        how long run_all took
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import pandas as pd

from attnlab.measure import runs
from attnlab.shapes import NO_MASK, AttentionShape
from attnlab.studies import flash_traffic
from attnlab.studies.ncu import NCU, NCU_KERNEL, NcuCount, ncu_dram_bytes, parse_ncu  # noqa: F401  (re-exported)
from attnlab.studies.suite import Ceilings, Environment

ANCHOR = AttentionShape(batch=4, q_len=8192, kv_len=8192, heads=16, kv_heads=16, head_dim=128, dtype="bfloat16")
LADDER = ["sdpa_xla", "tokamax_xla_chunked", "flash_jax", "tokamax_triton", "tokamax_mosaic", "sdpa_cudnn",
          "cudnn_fp8"]
BACKWARD = ["sdpa_xla", "tokamax_xla_chunked", "flash_jax", "tokamax_triton", "tokamax_mosaic", "sdpa_cudnn"]
MASK_NAMES = ["sdpa_cudnn", "sdpa_xla", "flash_jax"]
BACKWARD_FRACTIONS = (8, 4, 2, 1)  # forward+backward memory at T = S = anchor T / each
# A rung's traffic model: 'naive' if scores pass through GPU memory, 'flash' if one kernel keeps tiles on chip
MODEL = {"naive": "naive", "sdpa_xla": "naive", "tokamax_xla_chunked": "naive", "flash_jax": "naive",
         "tokamax_triton": "flash", "tokamax_mosaic": "flash", "sdpa_cudnn": "flash", "cudnn_fp8": "flash",
         "te_dpa": "flash", "sdpa_auto": "flash"}
BLOCK_Q = 128  # the query tile the flash model assumes (cuDNN and tokamax's Hopper kernels use 64-128)

# The lead's H200 figures at ANCHOR (TFLOP/s, not causal / causal): to compare with, never shown as measured
EXPECTED_H200 = {
    "sdpa_xla": (121, 42), "tokamax_xla_chunked": (65, 32), "tokamax_triton": (322, 318),
    "tokamax_mosaic": (702, 659), "sdpa_cudnn": (703, 645), "cudnn_fp8": (1018, 890),
}
EXPECTED_MASKS_MS = {"sdpa_cudnn": (3.13, 1.70, 0.55, 0.27, 0.88), "sdpa_xla": (14.8, 23.1, 23.1, 23.1, 15.9)}


def masks(shape: AttentionShape, windows: Sequence[int] = (1024, 256), padding: int = 2048
          ) -> list[tuple[str, AttentionShape]]:
    """(label, shape) for: no mask, causal, causal + each window (left w, right 0), padding to `padding` keys."""
    base = shape.replace(mask=NO_MASK)
    out = [("no mask", base), ("causal", base.replace(causal=True))]
    out += [(f"causal + window {w}", base.replace(causal=True, window=(int(w), 0))) for w in windows]
    real = min(int(padding), shape.kv_len)
    out.append((f"padding: {real:,} of {shape.kv_len:,} keys real", base.replace(kv_lengths=(real,))))
    return out


def ladder(shapes: Iterable[AttentionShape], names: Sequence[str] = LADDER, *, backward: bool = True,
           budget_s: float = 0.5) -> pd.DataFrame:
    """Each rung at each shape: forward (accuracy and timing), then forward+backward for BACKWARD's rungs; a
    table in the run layer's columns (`runs.COLUMNS`: tflops, device_ms, ...) plus 'rung' (its index)."""
    results = []
    for shape in shapes:
        results += runs.run(shape, names, accuracy=True, timed=True, budget_s=budget_s)
        if backward:
            back = [n for n in names if n in BACKWARD]
            results += runs.run(shape, back, accuracy=False, timed=True, backward=True, budget_s=budget_s)
    return runs.to_frame(results, [{"rung": names.index(r.implementation)} for r in results])


def mask_sweep(shape: AttentionShape, windows: Sequence[int] = (1024, 256), names: Sequence[str] = MASK_NAMES,
               *, padding: int = 2048, budget_s: float = 0.5) -> pd.DataFrame:
    """Kernel time of `names` under each mask of `masks(shape, windows, padding)`: a table in the run layer's
    columns plus 'mask' (its label) and 'visible_fraction' (of the (query, key) pairs, 0 to 1)."""
    results, extra = [], []
    for label, s in masks(shape, windows, padding):
        for r in runs.run(s, names, accuracy=False, timed=True, budget_s=budget_s):
            results.append(r)
            extra.append({"mask": label, "visible_fraction": s.visible_fraction()})
    return runs.to_frame(results, extra)


def model_bytes(shape: AttentionShape, name: str, block_q: int = BLOCK_Q) -> int:
    """GPU-memory bytes the traffic model (attnlab.studies.flash_traffic) gives `name` at `shape` (forward)."""
    dims = (shape.batch, shape.q_len, shape.kv_len, shape.heads, shape.kv_heads, shape.head_dim)
    itemsize = 1 if name == "cudnn_fp8" else shape.itemsize
    if MODEL.get(name, "naive") == "flash":
        return flash_traffic.traffic_flash(*dims, itemsize, block_q=min(block_q, shape.q_len))["total"]
    return flash_traffic.traffic_naive(*dims, itemsize)["total"]


ROOFLINE_COLUMNS = ["implementation", "label", "causal", "model", "model_bytes", "intensity", "achieved_tflops",
                    "attainable_tflops", "pct_of_attainable"]


def roofline(rows: pd.DataFrame | Iterable[Mapping], ceilings: Ceilings | None,
             block_q: int = BLOCK_Q) -> pd.DataFrame:
    """Each measured forward row (of `ladder`'s table, or rows in its columns) as a point: 'intensity' (FLOPs per
    byte of the traffic model, 'model_bytes'), 'achieved_tflops', and what the measured ceilings allow there,
    'attainable_tflops' = min(matmul TFLOP/s, copy TB/s × intensity); 'pct_of_attainable' in %."""
    out = []
    for r in runs.records(pd.DataFrame(rows if isinstance(rows, pd.DataFrame) else list(rows))):
        if r.get("status") != runs.OK or r.get("pass") != "forward":
            continue
        achieved = r.get("device_tflops") or r.get("tflops")
        if not achieved:
            continue
        shape = AttentionShape(**{k: r[k] for k in ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim",
                                                     "dtype", "causal")})
        flops = float(r.get("gflop") or shape.flops() / 1e9) * 1e9
        traffic = model_bytes(shape, r["implementation"], block_q)
        intensity = flops / traffic
        if ceilings is None:  # the page draws roofs only for files with ceilings
            raise ValueError("this ladder file has no measured ceilings: no roof to draw")
        attainable = min(ceilings.matmul_bf16_tflops, ceilings.copy_tb_s * intensity)
        out.append({"implementation": r["implementation"], "label": r.get("label"), "causal": r["causal"],
                    "model": MODEL.get(r["implementation"], "naive"), "model_bytes": traffic,
                    "intensity": intensity, "achieved_tflops": achieved, "attainable_tflops": attainable,
                    "pct_of_attainable": 100 * achieved / attainable})
    return pd.DataFrame(out, columns=ROOFLINE_COLUMNS)


def roof(ceilings: Ceilings, lo: float = 1.0, hi: float = 1e5, points: int = 41) -> pd.DataFrame:
    """The roof as points (ridge too): 'intensity' (log-spaced), 'tflops' = min(matmul, copy × intensity)."""
    step = (math.log10(hi) - math.log10(lo)) / (points - 1)
    xs = [10 ** (math.log10(lo) + i * step) for i in range(points)]
    ridge = ceilings.matmul_bf16_tflops / ceilings.copy_tb_s
    return pd.DataFrame([{"intensity": x, "tflops": min(ceilings.matmul_bf16_tflops, ceilings.copy_tb_s * x)}
                         for x in sorted(xs + [ridge])])


# --------------------------------------------------------------------------------------------
# the file, typed
# --------------------------------------------------------------------------------------------
SHIPPED_NAME = "h200_ladder"


@dataclasses.dataclass(frozen=True)
class LadderRun:
    """Everything page 5b shows as measured (`run_all`), or its shipped file (`LadderRun.load()`); the tables
    are rows in the run layer's columns (`runs.COLUMNS`: tflops, device_ms, temp_bytes, ...)."""

    environment: Environment
    anchor: str  # AttentionShape.describe() of ANCHOR
    ceilings: Ceilings | None = None
    ladder: list[dict] = dataclasses.field(default_factory=list)  # + 'rung'
    flash_t4096: list[dict] = dataclasses.field(default_factory=list)
    masks: list[dict] = dataclasses.field(default_factory=list)  # + 'mask', 'visible_fraction'
    backward_memory: list[dict] = dataclasses.field(default_factory=list)
    ncu: Mapping[str, NcuCount] = dataclasses.field(default_factory=dict)  # per implementation
    seconds: float = 0.0  # how long run_all took

    @classmethod
    def from_json(cls, data: Mapping) -> LadderRun:
        """A ladder file's dict (`python -m attnlab ladder`); ValueError for any other file."""
        if not isinstance(data, Mapping) or "device" not in (data.get("environment") or {}) or "ladder" not in data:
            raise ValueError("not a ladder file (python -m attnlab ladder): it needs 'ladder' and 'environment.device'")
        return cls(environment=Environment.from_json(data["environment"]), anchor=data.get("anchor", ""),
                   ceilings=Ceilings.from_json(data["ceilings"]) if data.get("ceilings") else None,
                   ladder=data["ladder"], flash_t4096=data.get("flash_t4096") or [], masks=data.get("masks") or [],
                   backward_memory=data.get("backward_memory") or [],
                   ncu={n: NcuCount.from_json(c) for n, c in (data.get("ncu") or {}).items()},
                   seconds=data.get("seconds", 0.0))

    @classmethod
    def load(cls, name: str = SHIPPED_NAME) -> LadderRun | None:
        """The shipped file `attnlab/shipped/{name}.json`, or None before it is measured."""
        from attnlab import shipped

        data = shipped.load(name)
        return None if data is None else cls.from_json(data)

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out.update(environment=self.environment.to_json(), ncu={n: c.to_json() for n, c in self.ncu.items()},
                   ceilings=self.ceilings.to_json() if self.ceilings else None)
        return out


def load_shipped() -> LadderRun | None:
    """The shipped `run_all` result (attnlab/shipped/h200_ladder.json), or None before it is measured."""
    return LadderRun.load()


def rungs(result: LadderRun, passes: str = "forward") -> pd.DataFrame:
    """The ladder's rows of one pass (by causal then rung; empty when none) with 'best_tflops', what the rung
    'adds', and its TFLOP/s in % of its dtype's datasheet peak ('pct_of_datasheet' of 'datasheet_peak': FP8
    for an FP8 rung, else bf16) and, for bf16 rungs, of the measured matmul ('pct_of_measured_matmul')."""
    from attnlab.backends import REGISTRY

    ceiling = result.ceilings.matmul_bf16_tflops if result.ceilings else None
    peak = result.environment.peak
    out = []
    for r in result.ladder:
        if r.get("pass") != passes:
            continue
        best = r.get("device_tflops") or r.get("tflops")
        backend = REGISTRY.get(r["implementation"])
        fp8 = backend is not None and backend.fp8  # an FP8 rung against the FP8 peak only, never bf16's matmul
        sheet = (peak.fp8_tflops if fp8 else peak.bf16_tflops) if peak else None
        out.append({**r, "best_tflops": best, "adds": backend.adds if backend else "",
                    "pct_of_measured_matmul": 100 * best / ceiling if best and ceiling and not fp8 else None,
                    "pct_of_datasheet": 100 * best / sheet if best and sheet else None,
                    "datasheet_peak": sheet})
    return pd.DataFrame(sorted(out, key=lambda r: (r["causal"], r.get("rung", 0))))


# --------------------------------------------------------------------------------------------
# everything, as the shipped file
# --------------------------------------------------------------------------------------------
def run_all(out_path: str | None = None, *, anchor: AttentionShape = ANCHOR, budget_s: float = 0.5,
            ncu_names: Sequence[str] = ("sdpa_cudnn", "tokamax_mosaic"), ncu_after_s: float = 150,
            log: Callable[[str], None] = print) -> LadderRun:
    """Everything page 5b shows as measured (JSON to `out_path` if given), in under ~4 min (H200): timings are
    budgeted (`budget_s`); Nsight Compute (≤ 75 s a kernel) runs only until `ncu_after_s`, then is skipped."""
    from attnlab.studies import suite

    t0 = time.perf_counter()
    env = suite.environment()
    log("ceilings ...")
    ceilings = suite.ceilings()
    log(f"ladder at {anchor.describe()}, causal and not ...")
    rows = runs.records(ladder([anchor, anchor.replace(causal=True)], budget_s=budget_s))
    short = anchor.replace(q_len=anchor.q_len // 2, kv_len=anchor.kv_len // 2)
    log(f"plain-JAX flash against XLA at {short.describe()} ...")
    flash = [r.row() for r in runs.run(short, ["sdpa_xla", "flash_jax"], accuracy=False, timed=True,
                                       budget_s=budget_s)]
    log("masks ...")
    mask_rows = runs.records(mask_sweep(anchor, budget_s=budget_s))
    log("forward+backward compiled memory ...")
    backward_memory = [
        r.row() for t in (anchor.q_len // f for f in BACKWARD_FRACTIONS)
        for r in runs.run(anchor.replace(q_len=t, kv_len=t), ["naive", "flash_jax", "sdpa_cudnn"], accuracy=False,
                          program=True, backward=True, tuned=True)]
    ncu = {}
    for name in ncu_names:
        spent = time.perf_counter() - t0
        if spent > ncu_after_s:
            ncu[name] = NcuCount(reason=f"skipped: the measurements before it took {spent:.0f} s")
            continue
        log(f"Nsight Compute DRAM bytes of {name} ...")
        ncu[name] = ncu_dram_bytes(anchor, name)
    result = LadderRun(env, anchor.describe(), ceilings, rows, flash, mask_rows, backward_memory, ncu,
                       seconds=time.perf_counter() - t0)
    if out_path:
        with open(out_path, "w") as f:
            json.dump(result.to_json(), f, indent=1, default=str)
    return result


def summary(result: LadderRun) -> list[str]:
    """One line per ladder row and mask row: what the CLI prints last."""
    lines = [f"{result.environment.device}  {result.anchor}  ({result.seconds:.0f} s)"]
    for r in result.ladder:
        t = r.get("device_tflops") or r.get("tflops")
        lines.append(f"{r['implementation']:<20} {r['pass']:<16} causal={r['causal']!s:<5} "
                     + (f"{t:7.1f} TFLOP/s" if t else f"{r['status']}: {str(r.get('reason'))[:80]}"))
    for r in result.masks:
        ms = r.get("device_ms") or r.get("throughput_ms")
        lines.append(f"{r['mask']:<34} {r['implementation']:<12} " + (f"{ms:8.3f} ms" if ms else r["status"]))
    for name, c in result.ncu.items():
        lines.append(f"ncu {name}: " + (f"read {c.read_bytes:,} B, write {c.write_bytes:,} B"
                                        if c.measured else c.reason))
    return lines
