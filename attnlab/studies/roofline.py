"""The roofline of the shipped ladder, with the bytes the GPU counted and the two roofs to read it by.

`ladder.roofline` places each rung by its traffic model's bytes, which count every re-read of K and V as HBM
traffic though the L2 cache serves most: those points sit above any roof. So a rung Nsight Compute measured
(the ladder's `ncu` rows) is placed again by its DRAM bytes, and the roof is drawn twice: datasheet, measured.
"""

from __future__ import annotations

import dataclasses
import math

from attnlab.measure import runs
from attnlab.shapes import AttentionShape
from attnlab.studies import ladder
from attnlab.studies.ladder import LadderRun

MEASURED, MODEL = "DRAM bytes counted (Nsight Compute)", "traffic model's bytes"


def points(result: LadderRun) -> list[dict]:
    """Every forward rung by its model's bytes ('bytes' = MODEL), and, where Nsight Compute counted the
    kernel at the same shape, once more by the DRAM bytes read + written ('bytes' = MEASURED)."""
    model = runs.records(ladder.roofline(result.ladder, result.ceilings))
    out = [{**p, "bytes": MODEL, "traffic_bytes": p["model_bytes"]} for p in model]
    for p in model:
        c = result.ncu.get(p["implementation"])
        # counted (c.measured: both byte counts) once, at the anchor without a mask
        if c is None or c.read_bytes is None or c.write_bytes is None or p["causal"]:
            continue
        row = next(r for r in result.ladder if r["implementation"] == p["implementation"]
                   and r.get("pass") == "forward" and not r["causal"])
        if c.shape and c.shape != row.get("shape"):
            continue
        shape = AttentionShape(**{k: row[k] for k in ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim",
                                                       "dtype", "causal")})
        flops = float(row.get("gflop") or shape.flops() / 1e9) * 1e9
        dram = int(c.read_bytes) + int(c.write_bytes)
        out.append({**p, "bytes": MEASURED, "traffic_bytes": dram, "intensity": flops / dram,
                    "model_over_measured": p["model_bytes"] / dram})
    return out


def roofs(result: LadderRun, lo: float = 1.0, hi: float = 1e5, n: int = 41) -> list[dict]:
    """Two roofs as points: 'datasheet' (memory TB/s, bf16 TFLOP/s) and 'measured' (the copy's TB/s, the
    matmul's TFLOP/s), each with its 'roof' label; min(compute, bandwidth × intensity) at log-spaced x."""
    peak, c = result.environment.peak, result.ceilings
    if c is None:  # the page draws roofs only for files with ceilings
        raise ValueError("this ladder file has no measured ceilings: no roof to draw")
    pairs = [("measured", c.copy_tb_s, c.matmul_bf16_tflops)]
    if peak and peak.memory_tb_s and peak.bf16_tflops:
        pairs.insert(0, ("datasheet", float(peak.memory_tb_s), float(peak.bf16_tflops)))
    step = (math.log10(hi) - math.log10(lo)) / (n - 1)
    out = []
    for name, tb_s, tflops in pairs:
        xs = sorted([10 ** (math.log10(lo) + i * step) for i in range(n)] + [tflops / tb_s])
        label = (f"{name}: {tb_s:.2f} TB/s, {tflops:.0f} TFLOP/s" if name == "measured" else
                 f"{name}: {tb_s:g} TB/s, {tflops:g} TFLOP/s (bf16)")
        out += [{"roof": label, "kind": name, "intensity": x, "tflops": min(tflops, tb_s * x),
                 "tb_s": tb_s, "peak_tflops": tflops} for x in xs]
    return out


@dataclasses.dataclass(frozen=True)
class Shortfall:
    """How far the measured ceilings sit below the datasheet's."""

    copy_tb_s: float  # the copy's rate, TB/s (read + write)
    matmul_tflops: float  # the bf16 matmul's rate, TFLOP/s
    sheet_tb_s: float  # the datasheet's memory bandwidth, TB/s
    sheet_tflops: float  # the datasheet's dense bf16 peak, TFLOP/s

    @property
    def copy_pct(self) -> float:
        return 100 * self.copy_tb_s / self.sheet_tb_s

    @property
    def matmul_pct(self) -> float:
        return 100 * self.matmul_tflops / self.sheet_tflops


def shortfall(result: LadderRun) -> Shortfall | None:
    """The measured ceilings against the datasheet's; None without a datasheet peak or ceilings."""
    peak, c = result.environment.peak, result.ceilings
    if not (peak and peak.memory_tb_s and peak.bf16_tflops and c):
        return None
    return Shortfall(c.copy_tb_s, c.matmul_bf16_tflops, float(peak.memory_tb_s), float(peak.bf16_tflops))


def fastest_read_tb_s(decode_rows: list[dict] | None, name: str = "sdpa_cudnn") -> float | None:
    """The fastest K and V read of the shipped decode study (TB/s, `name`'s rows): reads, unlike a copy."""
    rates = [r["kv_read_gb_per_s"] for r in decode_rows or [] if r.get("implementation") == name
             and r.get("status") == runs.OK and r.get("kv_read_gb_per_s")]
    return max(rates) / 1e3 if rates else None
