"""The GPU clock state behind each shipped H200 TFLOP/s figure, and one kernel's figures side by side.

The H200 lowers its SM clock under sustained load, and kernel time follows it. Page 9's FP8 study times each
kernel at the boost clock (after an idle second) and sustained (after 1.5 s of calls), clock read; every other
shipped table was timed by the one harness (0.2 s warm-up, then ~1 s of calls), clock unread: 'warm', between
the two. `one_kernel` tables every shipped cuDNN figure at one shape with its time source and clock state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnlab.studies.ladder import LadderRun
    from attnlab.studies.suite import SuiteRun

BOOST = "boost (after 1 s idle; clock read)"
SUSTAINED = "sustained (after 1.5 s of calls; clock read)"
WARM = "warm, clock not read (after a 0.2 s warm-up)"
NOTE = ("TFLOP/s shipped from the H200 were timed warm, with the clock not read: after a 0.2 s warm-up, "
        "somewhere between the boost clock and the sustained one, and not the same in every run. Page 9 reads "
        "the clock and gives both states; page 7's *Long context on an H200* tab sets one kernel's figures side by side.")
ANCHOR = "B4 T8192 S8192 N16 K16 H128 bfloat16"


def one_kernel(h200: SuiteRun | None, ladder: LadderRun | None, name: str = "sdpa_cudnn",
               shape: str = ANCHOR) -> list[dict]:
    """Every shipped TFLOP/s of `name`'s forward pass at `shape` (not causal): where, timing, clock, value."""
    rows = []

    def add(where, source, clock, value):
        if value:
            rows.append({"where": where, "time": source, "clock": clock, "TFLOP/s": round(float(value), 1)})

    for r in (h200.fidelity or []) if h200 else []:
        if r.get("implementation") == name and r.get("shape") == shape:
            add("page 7, fidelity table", "throughput (many calls, one wait)", WARM, r.get("harness_tflops"))
            add("page 7, fidelity table", "device (CUPTI)", WARM, r.get("harness_device_tflops"))
    for r in h200.tables.get("long_context", []) if h200 else []:
        if r.get("implementation") == name and r.get("shape") == shape and r.get("pass") == "forward":
            add("page 7, long-context chart", "device (CUPTI)", WARM, r.get("device_tflops"))
    for r in ladder.ladder if ladder else []:
        if r.get("implementation") == name and r.get("shape") == shape and r.get("pass") == "forward":
            add("page 5b, the ladder", "device (CUPTI)", WARM, r.get("device_tflops"))
    for r in (h200.fp8_attention or []) if h200 else []:
        if r.get("shape") == shape and r.get("status", "ok") == "ok":
            add("page 9, FP8 study (bf16 side)", "device (CUPTI)", BOOST, r.get("bf16_burst_tflops"))
            add("page 9, FP8 study (bf16 side)", "device (CUPTI)", SUSTAINED, r.get("bf16_tflops"))
    return rows
