"""NVIDIA's own H200 attention table, and the same measurement made here.

NVIDIA's cuDNN forward attention speed on the H200 at Llama 3.1's shape (B1, 64 query heads, 8 K/V heads, head
128) is `VENDOR`, from `SOURCE`. `measure` takes it with the lab's harness: bf16 through the run layer (CUPTI
time, then the SM clock), FP8 as NVIDIA times it, cuDNN's FP8 kernel alone (`fp8_study`) with K and V repeated
to 64 heads, as JAX's FP8 path takes MHA only (same FLOPs, 8x the K/V traffic). `SHIPPED`: an H200's run.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd

from attnlab import device
from attnlab.shapes import AttentionShape

SOURCE = ("NVIDIA/cudnn-frontend, benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/ "
          "(cuDNN 9.19.1, H200, forward pass)")
SHIPPED = Path(__file__).resolve().parents[1] / "shipped" / "h200_vendor.json"
WHY = ("Both are the same cuDNN kernel family on the same GPU model; what moves the ratio is mostly the SM clock "
       "(an H200 under a 2-3 ms attention kernel pulls it down from 1,980 MHz as it heats: read the clock column), "
       "and for FP8 the K/V heads repeated to 64, which the lab's JAX path needs.")


@dataclasses.dataclass(frozen=True)
class VendorRow:
    seq: int
    causal: bool
    precision: str  # "bf16" or "fp8"
    tflops: float  # NVIDIA's figure

    def shape(self) -> AttentionShape:
        """NVIDIA's shape; FP8 with K/V repeated to the 64 query heads (MHA), as JAX's FP8 path needs."""
        return AttentionShape(batch=1, q_len=self.seq, kv_len=self.seq, heads=64,
                              kv_heads=8 if self.precision == "bf16" else 64, head_dim=128, dtype="bfloat16",
                              causal=self.causal)

    @property
    def key(self) -> str:
        return f"{self.precision} T{self.seq}{' causal' if self.causal else ''}"


VENDOR = (
    VendorRow(8192, False, "bf16", 691.0), VendorRow(16384, False, "bf16", 702.0),
    VendorRow(8192, True, "bf16", 644.0), VendorRow(16384, True, "bf16", 673.0),
    VendorRow(8192, False, "fp8", 1023.0), VendorRow(16384, False, "fp8", 1055.0),
    VendorRow(8192, True, "fp8", 964.0),
)


def _one(row: VendorRow) -> dict:
    """The lab's measurement of one row: TFLOP/s, SM clock, how, or why not."""
    from attnlab.measure import runs
    from attnlab.studies import fp8_study

    shape = row.shape()
    if row.precision == "bf16":
        (r,) = runs.run(shape, ["sdpa_cudnn"], accuracy=False, timed=True)
        clock = device.sm_clock_mhz()
        tflops = r.row()["device_tflops"] if r.ok else None
        return {"lab_tflops": tflops, "clock_mhz": clock[0] if clock else None,
                "how": "jax.nn.dot_product_attention(implementation='cudnn') through the run layer, CUPTI kernel time",
                "note": r.reason if not r.ok else ""}
    t = fp8_study.fp8_attention_study([shape]).iloc[0]
    ok = t.get("status") == "ok"
    return {"lab_tflops": float(t["fp8_tflops"]) if ok else None,
            "clock_mhz": int(t["fp8_clock_mhz"]) if ok and pd.notna(t.get("fp8_clock_mhz")) else None,
            "how": "cuDNN's FP8 kernel alone (FP8 in and out, 448/amax scales), K/V repeated to 64 heads, sustained clock",
            "note": "" if ok else str(t.get("reason", ""))}


def measure(keys: tuple[str, ...] | None = None) -> pd.DataFrame:
    """NVIDIA's rows (`keys`: some of them by `VendorRow.key`) measured here, one table (`table`)."""
    rows = [r for r in VENDOR if keys is None or r.key in keys]
    return table(rows, {r.key: _one(r) for r in rows}, where="measured here, live")


def shipped() -> pd.DataFrame:
    """The same table, measured on an H200 (SHIPPED)."""
    data = json.loads(SHIPPED.read_text())
    return table(list(VENDOR), data["rows"], where=data["where"])


def table(rows: list[VendorRow], measured: dict[str, dict], where: str) -> pd.DataFrame:
    out = []
    for r in rows:
        m = measured.get(r.key, {})
        lab = m.get("lab_tflops")
        out.append({"precision": r.precision, "seq": r.seq, "mask": "causal" if r.causal else "none",
                    "shape": r.shape().describe(), "nvidia_tflops": r.tflops, "lab_tflops": lab,
                    "lab_over_nvidia": lab / r.tflops if lab else None, "clock_mhz": m.get("clock_mhz"),
                    "how": m.get("how", ""), "note": m.get("note") or ("" if lab else "not measured"), "where": where})
    return pd.DataFrame(out)
