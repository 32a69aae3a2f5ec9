"""The ring benchmark's JSON (scripts/ring_bench.py, shipped as attnlab/shipped/ring_h200x{P}.json) as tables.

Each function takes the loaded dict (or None when nothing ships) and returns a DataFrame, empty when
there is nothing to show, so the page only decides what to draw. Column names say their unit.
"""

from __future__ import annotations

import pandas as pd

from attnlab import device

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
# H200 SXM: NVLink 4, 18 links, 900 GB/s per GPU in both directions together (NVIDIA H200 datasheet);
# one ring step sends one way, so a send can use at most half.
NVLINK_ONE_WAY_BYTES_PER_S = 450e9
NVLINK_SOURCE = "assumed: NVLink 4 on the H200 datasheet, 900 GB/s both ways, 450 GB/s one way"


def label(data: dict | None) -> str:
    """'Measured on 2 × NVIDIA H200, jax 0.x, block cudnn_block, XLA flags ..., on DATE'."""
    if data is None:
        return "not measured"
    e = data["environment"]
    s = e.get("shape", {})
    return (f"Measured on {e['device_count']} × {e['device_kind']} ({e['backend']}), jax {e['jax_version']}, "
            f"per-block attention {e['block']}, XLA flags {e.get('xla_flags') or 'none'}, at B={s.get('B')} "
            f"N={s.get('N')} K={s.get('K')} H={s.get('H')} {s.get('dtype')}, on {str(e['date'])[:10]}")


def speedups(data: dict | None) -> pd.DataFrame:
    """One row per (T, mask, variant) measured: ms, one_device_ms, speedup and efficiency (speed-up / P)."""
    if data is None:
        return pd.DataFrame(columns=["T", "mask", "variant", "ms", "one_device_ms", "speedup", "efficiency"])
    rows = []
    for r in data["results"]:
        if "skipped" in r:
            continue
        for mask in MASKS:
            for key, name in VARIANTS.items():
                if f"{mask}_{key}_ms" in r:
                    rows.append({"T": r["T"], "mask": mask.replace("_", "-"), "variant": name,
                                 "ms": r[f"{mask}_{key}_ms"], "one_device_ms": r[f"{mask}_one_device_ms"],
                                 "speedup": r[f"{mask}_{key}_speedup"], "efficiency": r[f"{mask}_{key}_efficiency"]})
    return pd.DataFrame(rows, columns=["T", "mask", "variant", "ms", "one_device_ms", "speedup", "efficiency"])


def skipped(data: dict | None) -> list[int]:
    """Sequence lengths the benchmark listed but did not measure (its time budget ran out)."""
    return [r["T"] for r in (data or {}).get("results", []) if "skipped" in r]


def crossovers(data: dict | None) -> pd.DataFrame:
    """The shortest measured T at which each variant beat one device (speed-up above 1), read from the measured
    speed-ups, so every line of the speed-up chart has its row ("at no length measured" where none did)."""
    measured = sorted((r for r in (data or {}).get("results", []) if "skipped" not in r), key=lambda r: r["T"])
    rows = []
    for k in dict.fromkeys(k.removesuffix("_speedup") for r in measured for k in r if k.endswith("_speedup")):
        mask = "non_causal" if k.startswith("non_causal_") else "causal"  # "non_causal_ring_fenced" -> ring_fenced
        key = k[len(mask) + 1:]
        t = next((r["T"] for r in measured if (r.get(f"{k}_speedup") or 0) > 1.0), None)
        rows.append({"mask": mask.replace("_", "-"), "variant": VARIANTS.get(key, key.replace("_", " ")),
                     "shortest T faster than one GPU": "at no length measured" if t is None else f"{t:,}"})
    return pd.DataFrame(rows, columns=["mask", "variant", "shortest T faster than one GPU"])


def timeline(data: dict | None, mask: str = "non_causal") -> pd.DataFrame:
    """Per-step bars drawn from the parts timed alone (each step's compute + merge, one send):

    'overlapped': each send starts with its step's compute, the next step when both are done;
    'one after the other': the send waits for the compute. Columns: schedule, step, part, start_ms, end_ms.
    """
    t = ((data or {}).get("timeline") or {}).get(mask)
    rows = []
    if t:
        for schedule in ("overlapped", "one after the other"):
            clock = 0.0
            for s in t["steps"]:
                compute = s["compute_ms"] + t["merge_ms"]
                send_at = clock if schedule == "overlapped" else clock + compute
                rows.append({"schedule": schedule, "step": s["step"], "part": "compute",
                             "start_ms": clock, "end_ms": clock + compute})
                if s["transfer_ms"]:
                    rows.append({"schedule": schedule, "step": s["step"], "part": "transfer",
                                 "start_ms": send_at, "end_ms": send_at + s["transfer_ms"]})
                clock = max(clock + compute, send_at + s["transfer_ms"])
    return pd.DataFrame(rows, columns=["schedule", "step", "part", "start_ms", "end_ms"])


def headline(data: dict | None) -> str:
    """The JSON key of the ring the lab runs by default: the fenced ring where the file measured it (files
    written before the fence measured only the ring whose order XLA chose, "ring")."""
    rows = [r for r in (data or {}).get("results", []) if "skipped" not in r]
    return "ring_fenced" if any(f"{m}_ring_fenced_ms" in r for r in rows for m in MASKS) else "ring"


def timeline_summary(data: dict | None, mask: str = "non_causal") -> dict | None:
    """The whole ring as measured at the timeline's length: ring_ms and transfer_hidden of the default ring
    (`headline`), ring_no_overlap_ms, the send, ..."""
    t = ((data or {}).get("timeline") or {}).get(mask)
    if not t:
        return None
    T = max((r["T"] for r in data["results"] if "skipped" not in r), default=None)
    key = headline(data)
    row = next(r for r in data["results"] if r.get("T") == T)
    hidden = (t.get("transfer_hidden_by_variant") or {}).get(key, t["transfer_hidden"])
    return {"T": T, "variant": VARIANTS[key], "ring_ms": row.get(f"{mask}_{key}_ms", t["ring_ms"]),
            "transfer_hidden": hidden,
            **{k: t[k] for k in ("ring_no_overlap_ms", "send_ms", "send_GBps", "ideal_overlap_ms",
                                 "sum_of_parts_serial_ms")}}


def same_programs(data: dict | None) -> list[str]:
    """The masks whose fenced and unfenced rings compiled to the same order of sends, waits and attention
    calls: there the fence changes nothing, and any gap between their speed-ups is run-to-run noise."""
    schedule = (data or {}).get("schedule") or {}
    return [m for m in MASKS if m in schedule and schedule[m] == schedule.get(f"{m}_fenced")]


def program_order(data: dict | None) -> pd.DataFrame:
    """The compiled program of each ring, as the order of its sends, waits and attention calls (the
    schedule XLA chose; compiled at the benchmark's longest T). Columns: program, order."""
    rows = [{"program": name.replace("non_causal", "non-causal").replace("_", " "),
             "order": " → ".join(INSTRUCTIONS.get(op, op) for op in ops)}
            for name, ops in ((data or {}).get("schedule") or {}).items()]
    return pd.DataFrame(rows, columns=["program", "order"])


def rates(data: dict | None, h200: dict | None = None, dtype: str | None = None) -> dict:
    """Attention rate (FLOP/s) and one-way link bandwidth (bytes/s) for the overlap model, with their sources.

    From the ring benchmark when it ships (one GPU's non-causal attention at its longest T; the send timed
    alone), else the H200 results' longest non-causal cuDNN forward, else nothing; the bandwidth falls back
    to the datasheet figure above; `measured` says where and when, once. Both attention rates were measured in bfloat16: for a float32 `dtype`
    the rate is scaled by the H200's datasheet TF32 / bf16 ratio (float32 matmuls run as TF32 by default),
    and the source says so.
    """
    out = {"flops_per_s": None, "flops_source": "no measured attention rate ships",
           "bytes_per_s": NVLINK_ONE_WAY_BYTES_PER_S, "bytes_source": NVLINK_SOURCE, "measured": ""}
    measured = [r for r in (data or {}).get("results", []) if "skipped" not in r]
    if data and measured and data["environment"].get("backend") == "gpu":
        r, s = max(measured, key=lambda r: r["T"]), data["environment"]["shape"]
        out["flops_per_s"] = 4 * s["B"] * r["T"] ** 2 * s["N"] * s["H"] / (r["non_causal_one_device_ms"] / 1e3)
        out["flops_source"] = f"one GPU, non-causal, T={r['T']}, {s.get('dtype', 'bfloat16')}"
        out["measured"] = label(data)
        t = (data.get("timeline") or {}).get("non_causal")
        if t and t.get("send_GBps"):
            out["bytes_per_s"] = t["send_GBps"] * 1e9
            out["bytes_source"] = f"one ring send timed alone at T={r['T']}"
    elif h200:
        rows = [r for r in h200.get("tables", {}).get("long_context", []) if r.get("implementation") == "sdpa_cudnn"
                and r.get("pass") == "forward" and not r.get("causal") and r.get("status") == "ok"]
        if rows:
            r = max(rows, key=lambda r: (r["q_len"], r["head_dim"]))
            out["flops_per_s"] = (r.get("device_tflops") or r["tflops"]) * 1e12
            out["flops_source"] = f"cuDNN forward on one {h200['environment']['device']}, {r['shape']}"
            out["measured"] = f"Measured {h200['environment']['date']}"
    if out["flops_per_s"] is not None and dtype == "float32":
        peak = device.peak_for("NVIDIA H200")
        out["flops_per_s"] *= peak.tf32_tflops / peak.bf16_tflops
        out["flops_source"] = (f"{out['flops_source']} (a bfloat16 measurement), scaled to float32 by the "
                               f"{peak.model}'s datasheet TF32 / bf16 peaks, {peak.tf32_tflops:g} / "
                               f"{peak.bf16_tflops:g}: a float32 matmul runs as TF32, and cuDNN's fused kernel "
                               "takes no float32, so a real float32 ring would be slower still")
    return out


def scaling(loaded: dict[int, dict | None]) -> tuple[pd.DataFrame, list[int]]:
    """Efficiency against P, at the longest T each file measured: (rows P, mask, variant, T, efficiency,
    speedup; the ring sizes with no file)."""
    frames, missing = [], []
    for devices, data in sorted(loaded.items()):
        df = speedups(data)
        if df.empty:
            missing.append(devices)
            continue
        df = df[(df["T"] == df["T"].max()) & df["variant"].isin([VARIANTS[headline(data)], VARIANTS["all_gather"]])]
        frames.append(df.assign(P=devices))
    cols = ["P", "mask", "variant", "T", "efficiency", "speedup"]
    return (pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)), missing
