"""Ring attention on paper: who holds which K/V block at each step, what it computes, what it sends.

Pure Python and pandas, no JAX: the page draws these tables, and `context_parallel` follows the same schedule.
`ring_schedule` is a list of `RingStep` (one per step and device); `step_costs` a table, units in its columns.
With P devices on a ring, each holding a slice of Q, K and V along the sequence, every step a device attends
its queries to the K/V block it holds and passes it to its right-hand neighbour: after P steps every query has
met every key (Liu, Zaharia & Abbeel 2023, arXiv:2310.01889); device d holds device (d - step) mod P's block.
Causal leaves blocks above the diagonal empty: with contiguous slices device 0 skips every visiting block
while device P-1 computes all; the zig-zag layout (2P chunks, device d holding d and 2P-1-d; Llama 3, Dubey et
al. 2024, 3.3.2) gives every device the same work.
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd

FULL, DIAGONAL, SKIPPED = "full", "diagonal", "skipped"


@dataclasses.dataclass(frozen=True)
class RingStep:
    """What one device does at one step of the ring."""

    step: int
    device: int
    kv_from_device: int  # whose K/V block it holds (and attends to) at this step
    q_chunks: tuple[int, ...]  # the sequence chunks of its queries
    kv_chunks: tuple[int, ...]  # the sequence chunks of the K/V block it holds
    blocks: tuple[tuple[int, int, str], ...]  # (query chunk, key chunk, FULL / DIAGONAL / SKIPPED) per pair
    compute: str  # FULL, DIAGONAL, SKIPPED or "partly skipped"
    work: float  # the fraction of one full (T/P x S/P) block computed: 1, 1/2 (causal diagonal), 0 (masked)
    sends_to: int | None  # the device it sends the block to; None at the last step
    sends_kv_of_device: int | None  # whose block it sends; None at the last step


def chunks_of(device: int, devices: int, layout: str) -> tuple[int, ...]:
    """The sequence chunks a device holds: (d,) of P chunks, or (d, 2P-1-d) of 2P in the zig-zag layout."""
    if layout == "contiguous":
        return (device,)
    if layout == "zigzag":
        return (device, 2 * devices - 1 - device)
    raise ValueError(f"layout must be 'zigzag' or 'contiguous', not {layout!r}")


def block_kind(q_chunk: int, kv_chunk: int, causal: bool) -> str:
    """Query chunk against key chunk: all visible (full), the causal triangle (diagonal), or none (skipped)."""
    if not causal or q_chunk > kv_chunk:
        return FULL
    return DIAGONAL if q_chunk == kv_chunk else SKIPPED


def ring_schedule(devices: int, *, causal: bool, layout: str = "zigzag") -> list[RingStep]:
    """One row per (step, device): the K/V block held, the chunk pairs computed, the work, the send."""
    rows = []
    for step in range(devices):
        for device in range(devices):
            owner = (device - step) % devices  # the ring passes blocks rightwards, one hop a step
            mine, theirs = chunks_of(device, devices, layout), chunks_of(owner, devices, layout)
            blocks = tuple((qc, kc, block_kind(qc, kc, causal)) for qc in mine for kc in theirs)
            area = 1 / (len(mine) * len(theirs))  # one chunk pair's share of the device's block
            work = sum(area * {FULL: 1.0, DIAGONAL: 0.5, SKIPPED: 0.0}[kind] for _, _, kind in blocks)
            kinds = {kind for _, _, kind in blocks}
            compute = (
                kinds.pop() if len(kinds) == 1 else DIAGONAL if DIAGONAL in kinds else "partly skipped"
            )
            last = step == devices - 1
            rows.append(RingStep(step=step, device=device, kv_from_device=owner, q_chunks=mine, kv_chunks=theirs,
                                 blocks=blocks, compute=compute, work=work,
                                 sends_to=None if last else (device + 1) % devices,
                                 sends_kv_of_device=None if last else owner))
    return rows


def work_per_device(schedule: list[RingStep]) -> list[float]:
    """Total work of each device over the whole ring, in full-block units (P for non-causal)."""
    devices = 1 + max(r.device for r in schedule)
    return [sum(r.work for r in schedule if r.device == d) for d in range(devices)]


def ring_time_in_steps(schedule: list[RingStep]) -> float:
    """Each step waits for its busiest device, so the ring takes the sum over steps of the largest work."""
    steps = 1 + max(r.step for r in schedule)
    return sum(max(r.work for r in schedule if r.step == s) for s in range(steps))


def bytes_per_step(batch: int, kv_len: int, kv_heads: int, head_dim: int, devices: int, itemsize: int) -> int:
    """Bytes each device sends per ring step: its K and V blocks, 2·B·(S/P)·K·H·itemsize."""
    return 2 * batch * (kv_len // devices) * kv_heads * head_dim * itemsize


def block_flops(batch: int, q_len: int, kv_len: int, heads: int, head_dim: int, devices: int,
                kind: str = FULL) -> float:
    """FLOPs of one device's step, 4·B·(T/P)·(S/P)·N·H: half for a causal diagonal block, 0 if skipped."""
    full = 4 * batch * (q_len // devices) * (kv_len // devices) * heads * head_dim
    return full * {FULL: 1.0, DIAGONAL: 0.5, SKIPPED: 0.0}[kind]


def overlap_threshold_tokens(flops_per_s: float, bytes_per_s: float, heads: int, kv_heads: int,
                             itemsize: int) -> int:
    """Shortest local length T/P at which one step's compute hides its transfer (non-causal, S = T): compute
    4·B·c²·N·H / F >= transfer 2·B·c·K·H·b / W gives c >= K·b·F / (2·N·W) (Liu et al. 2023, section 3)."""
    return math.ceil(kv_heads * itemsize * flops_per_s / (2 * heads * bytes_per_s))


def steady_work(devices: int, *, causal: bool, layout: str = "zigzag") -> float:
    """The busiest device's work at a step after the first, in full blocks: what each send must hide behind."""
    rows = ring_schedule(devices, causal=causal, layout=layout)
    return max((r.work for r in rows if r.step > 0), default=1.0)


def step_costs(batch: int, heads: int, kv_heads: int, head_dim: int, itemsize: int, devices: int,
               lengths: list[int], flops_per_s: float, bytes_per_s: float, *, causal: bool,
               layout: str = "zigzag") -> pd.DataFrame:
    """One row per length T (= S): the bytes each device sends per step and their time at `bytes_per_s`,
    beside the busiest device's compute per step at `flops_per_s` (steps after the first). Columns: T,
    tokens_per_device, bytes_per_step, transfer_ms, compute_flops, compute_ms, hidden (send <= compute)."""
    work = steady_work(devices, causal=causal, layout=layout)
    rows = []
    for T in lengths:
        sent = bytes_per_step(batch, T, kv_heads, head_dim, devices, itemsize)
        flops = block_flops(batch, T, T, heads, head_dim, devices) * work
        transfer_ms, compute_ms = 1e3 * sent / bytes_per_s, 1e3 * flops / flops_per_s
        rows.append({"T": T, "tokens_per_device": T // devices, "bytes_per_step": sent, "transfer_ms": transfer_ms,
                     "compute_flops": flops, "compute_ms": compute_ms, "hidden": transfer_ms <= compute_ms})
    return pd.DataFrame(rows)


def hiding_length(heads: int, kv_heads: int, itemsize: int, devices: int, flops_per_s: float, bytes_per_s: float,
                  *, causal: bool, layout: str = "zigzag") -> int:
    """The shortest sequence T at which a step's compute hides its send: P · the per-device threshold,
    longer when a step computes only part of a block (balanced causal: half, so twice as long)."""
    per_device = overlap_threshold_tokens(flops_per_s, bytes_per_s, heads, kv_heads, itemsize)
    return math.ceil(devices * per_device / steady_work(devices, causal=causal, layout=layout))


def describe_step(schedule: list[RingStep], step: int) -> str:
    """One sentence on what every device does at `step`."""
    rows = [r for r in schedule if r.step == step]
    devices = len(rows)
    phrases = {FULL: "a full block", DIAGONAL: "a causal diagonal block (half of it)",
               "partly skipped": "half a block (the rest is masked)", SKIPPED: "nothing (the block is masked)"}
    counts = {kind: sum(r.compute == kind for r in rows) for kind in phrases}
    doing = ", ".join(f"{n} {'device computes' if n == 1 else 'devices compute'} {phrases[kind]}"
                      for kind, n in counts.items() if n)
    held = ("its own K/V block" if step == 0 else
            f"the K/V block that started {step} device{'s' if step > 1 else ''} to its left (device d holds "
            f"device (d − {step}) mod {devices}'s)")
    send = ("This is the last step: nothing is sent, and every query has now met every key." if step == devices - 1
            else "Meanwhile each device sends the block it holds to its right-hand neighbour (device d → d + 1 "
                 f"mod {devices}), ready for step {step + 1}.")
    return f"Step {step} of {devices - 1}: every device attends its queries to {held}. {doing[0].upper()}{doing[1:]}. {send}"
