"""The ring benchmark's JSON (scripts/ring_bench.py, shipped as attnlab/shipped/ring_h200x{P}.json) as tables.

`RingRun.load(name)` reads a file once into frozen dataclasses (ring_run.py); every function below takes that
`RingRun` (or None) and returns a DataFrame, empty when there is nothing to show. Names say their unit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

import pandas as pd

from attnlab import device
from attnlab.studies.ring_run import (  # noqa: F401  (re-exported: the file's types)
    Correctness,
    RingEnvironment,
    RingLength,
    RingRun,
    RingStep,
    RingTimeline,
)

if TYPE_CHECKING:
    from attnlab.studies.suite import SuiteRun

MASKS = ("non_causal", "causal")
VARIANTS = {  # key in the JSON -> what the page calls it (scripts/ring_bench.py names the keys)
    "ring_fenced": "ring (overlapped, fenced: the lab's default)",
    "ring": "ring (overlapped, order left to XLA)",
    "ring_uniform": "ring, two equal blocks per step (no branch)",
    "ring_uniform_fenced": "ring, two equal blocks per step, fenced",
    "ring_no_overlap": "ring (send after compute)",
    "all_gather": "all-gather",
    "ring_unbalanced": "ring, contiguous (unbalanced)",
}
# what each instruction of the compiled program is, in a learner's words (ring_bench's program order)
INSTRUCTIONS = {"collective-permute-start": "send starts", "collective-permute-done": "wait for the send",
                "__cudnn$fmhaSoftmax": "cuDNN attention", "conditional": "branch (holds a cuDNN attention)",
                "fusion": "elementwise", "copy": "copy", "all-gather-start": "gather starts",
                "all-gather-done": "wait for the gather"}
# H200 SXM NVLink 4: 900 GB/s per GPU, both directions together (datasheet); a ring send goes one way: half
NVLINK_ONE_WAY_BYTES_PER_S = 450e9
NVLINK_SOURCE = "assumed: NVLink 4 on the H200 datasheet, 900 GB/s both ways, 450 GB/s one way"


@dataclasses.dataclass(frozen=True)
class TimelineSummary:
    """The whole ring as measured at the timeline's length T, the default ring's (`headline`) figures."""

    T: int
    variant: str  # the page's name for the ring
    ring_ms: float
    transfer_hidden: float  # 0..1
    ring_no_overlap_ms: float
    send_ms: float
    send_GBps: float
    ideal_overlap_ms: float
    sum_of_parts_serial_ms: float


@dataclasses.dataclass(frozen=True)
class Rates:
    """The overlap model's two rates, with where each came from."""

    flops_per_s: float | None  # attention FLOP/s; None when no measured rate ships
    flops_source: str
    bytes_per_s: float  # one-way link bandwidth, bytes/s
    bytes_source: str
    measured: str = ""  # where and when the rate was measured, once


# --------------------------------------------------------------------------------------------
# the file as tables
# --------------------------------------------------------------------------------------------
def label(run: RingRun | None) -> str:
    """'Measured on 2 × NVIDIA H200, jax 0.x, block cudnn_block, XLA flags ..., on DATE'."""
    if run is None:
        return "not measured"
    e, s = run.environment, run.environment.shape
    return (f"Measured on {e.device_count} × {e.device_kind} ({e.backend}), jax {e.jax_version}, "
            f"per-block attention {e.block}, XLA flags {e.xla_flags or 'none'}, at B={s.get('B')} "
            f"N={s.get('N')} K={s.get('K')} H={s.get('H')} {s.get('dtype')}, on {str(e.date)[:10]}")


def speedups(run: RingRun | None) -> pd.DataFrame:
    """One row per (T, mask, variant) measured: ms, one_device_ms, speedup and efficiency (speed-up / P)."""
    cols = ["T", "mask", "variant", "ms", "one_device_ms", "speedup", "efficiency"]
    rows = [{"T": r.T, "mask": mask.replace("_", "-"), "variant": name, "ms": r.ms(mask, key),
             "one_device_ms": r.one_device_ms(mask), "speedup": r.speedup(mask, key),
             "efficiency": r.efficiency(mask, key)}
            for r in (run.measured if run else []) for mask in MASKS for key, name in VARIANTS.items()
            if r.has(mask, key)]
    return pd.DataFrame(rows, columns=cols)


def skipped(run: RingRun | None) -> list[int]:
    """Sequence lengths the benchmark listed but did not measure (its time budget ran out)."""
    return [r.T for r in (run.lengths if run else []) if r.skipped is not None]


def crossovers(run: RingRun | None) -> pd.DataFrame:
    """The shortest measured T at which each variant beat one device (speed-up above 1), read from the measured
    speed-ups, so every line of the speed-up chart has its row ("at no length measured" where none did)."""
    measured = sorted(run.measured if run else [], key=lambda r: r.T)
    rows = []
    for k in dict.fromkeys(k for r in measured for k in r.speedup_keys()):
        mask = "non_causal" if k.startswith("non_causal_") else "causal"  # "non_causal_ring_fenced" -> ring_fenced
        key = k[len(mask) + 1:]
        t = next((r.T for r in measured if (r.speedup(mask, key) or 0) > 1.0), None)
        rows.append({"mask": mask.replace("_", "-"), "variant": VARIANTS.get(key, key.replace("_", " ")),
                     "shortest T faster than one GPU": "at no length measured" if t is None else f"{t:,}"})
    return pd.DataFrame(rows, columns=["mask", "variant", "shortest T faster than one GPU"])


def timeline(run: RingRun | None, mask: str = "non_causal") -> pd.DataFrame:
    """Per-step bars from the parts timed alone (each step's compute + merge, one send), 'overlapped' (a send
    starts with its compute) or 'one after the other'. Columns: schedule, step, part, start_ms, end_ms."""
    t = run.timeline.get(mask) if run else None
    rows = []
    if t:
        for schedule in ("overlapped", "one after the other"):
            clock = 0.0
            for s in t.steps:
                compute = s.compute_ms + t.merge_ms
                send_at = clock if schedule == "overlapped" else clock + compute
                rows.append({"schedule": schedule, "step": s.step, "part": "compute",
                             "start_ms": clock, "end_ms": clock + compute})
                if s.transfer_ms:
                    rows.append({"schedule": schedule, "step": s.step, "part": "transfer",
                                 "start_ms": send_at, "end_ms": send_at + s.transfer_ms})
                clock = max(clock + compute, send_at + s.transfer_ms)
    return pd.DataFrame(rows, columns=["schedule", "step", "part", "start_ms", "end_ms"])


def headline(run: RingRun | None) -> str:
    """The JSON key of the lab's default ring: "ring_fenced" where the file measured it, else "ring"."""
    fenced = any(r.has(m, "ring_fenced") for r in (run.measured if run else []) for m in MASKS)
    return "ring_fenced" if fenced else "ring"


def timeline_summary(run: RingRun | None, mask: str = "non_causal") -> TimelineSummary | None:
    """The whole ring at the timeline's length: the default ring's (`headline`) time, share hidden, ..."""
    if run is None or not (t := run.timeline.get(mask)):
        return None
    T = max((r.T for r in run.measured), default=None)
    key = headline(run)
    row = next(r for r in run.lengths if r.T == T)  # StopIteration when nothing was measured (T None)
    return TimelineSummary(T=row.T, variant=VARIANTS[key],
                           ring_ms=row.ms(mask, key) if row.has(mask, key) else t.ring_ms,
                           transfer_hidden=t.transfer_hidden_by_variant.get(key, t.transfer_hidden),
                           ring_no_overlap_ms=t.ring_no_overlap_ms, send_ms=t.send_ms, send_GBps=t.send_GBps,
                           ideal_overlap_ms=t.ideal_overlap_ms, sum_of_parts_serial_ms=t.sum_of_parts_serial_ms)


def same_programs(run: RingRun | None) -> list[str]:
    """The masks whose fenced and unfenced rings compiled to the same order of sends, waits and attention
    calls: there the fence changes nothing, and any gap between their speed-ups is run-to-run noise."""
    schedule = run.schedule if run else {}
    return [m for m in MASKS if m in schedule and schedule[m] == schedule.get(f"{m}_fenced")]


def program_order(run: RingRun | None) -> pd.DataFrame:
    """The compiled program of each ring, as the order of its sends, waits and attention calls (the
    schedule XLA chose; compiled at the benchmark's longest T). Columns: program, order."""
    rows = [{"program": name.replace("non_causal", "non-causal").replace("_", " "),
             "order": " → ".join(INSTRUCTIONS.get(op, op) for op in ops)}
            for name, ops in (run.schedule if run else {}).items()]
    return pd.DataFrame(rows, columns=["program", "order"])


def rates(run: RingRun | None, h200: SuiteRun | None = None, dtype: str | None = None) -> Rates:
    """Attention rate (FLOP/s) and one-way link bandwidth (bytes/s) for the overlap model, with sources: the
    ring benchmark's if it ships (one GPU's non-causal attention at its longest T; a send timed alone), else
    the H200 results' longest non-causal cuDNN forward (bandwidth: datasheet); `measured` says where and when.
    Rates are bf16; a float32 `dtype` scales them by the H200's TF32/bf16 datasheet ratio (source says so)."""
    flops_per_s, flops_source, measured = None, "no measured attention rate ships", ""
    bytes_per_s, bytes_source = NVLINK_ONE_WAY_BYTES_PER_S, NVLINK_SOURCE
    if run and run.measured and run.environment.backend == "gpu":
        r, s = max(run.measured, key=lambda r: r.T), run.environment.shape
        flops_per_s = 4 * s["B"] * r.T ** 2 * s["N"] * s["H"] / (r.one_device_ms("non_causal") / 1e3)
        flops_source = f"one GPU, non-causal, T={r.T}, {s.get('dtype', 'bfloat16')}"
        measured = label(run)
        t = run.timeline.get("non_causal")
        if t and t.send_GBps:
            bytes_per_s, bytes_source = t.send_GBps * 1e9, f"one ring send timed alone at T={r.T}"
    elif h200:
        rows = [r for r in h200.tables.get("long_context", []) if r.get("implementation") == "sdpa_cudnn"
                and r.get("pass") == "forward" and not r.get("causal") and r.get("status") == "ok"]
        if rows:
            best = max(rows, key=lambda r: (r["q_len"], r["head_dim"]))
            flops_per_s = (best.get("device_tflops") or best["tflops"]) * 1e12
            flops_source = f"cuDNN forward on one {h200.environment.device}, {best['shape']}"
            measured = f"Measured {h200.environment.date}"
    if flops_per_s is not None and dtype == "float32":
        peak = cast(device.Peak, device.peak_for("NVIDIA H200"))  # device.PEAKS has the H200's row
        flops_per_s *= peak.tf32_tflops / peak.bf16_tflops
        flops_source = (f"{flops_source} (a bfloat16 measurement), scaled to float32 by the "
                        f"{peak.model}'s datasheet TF32 / bf16 peaks, {peak.tf32_tflops:g} / "
                        f"{peak.bf16_tflops:g}: a float32 matmul runs as TF32, and cuDNN's fused kernel "
                        "takes no float32, so a real float32 ring would be slower still")
    return Rates(flops_per_s, flops_source, bytes_per_s, bytes_source, measured)


def scaling(loaded: Mapping[int, RingRun | None]) -> tuple[pd.DataFrame, list[int]]:
    """Efficiency against P, at the longest T each file measured: (rows P, mask, variant, T, efficiency,
    speedup; the ring sizes with no file)."""
    frames, missing = [], []
    for devices, run in sorted(loaded.items()):
        df = speedups(run)
        if df.empty:
            missing.append(devices)
            continue
        df = df[(df["T"] == df["T"].max()) & df["variant"].isin([VARIANTS[headline(run)], VARIANTS["all_gather"]])]
        frames.append(df.assign(P=devices))
    cols = ["P", "mask", "variant", "T", "efficiency", "speedup"]
    return (pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)), missing
