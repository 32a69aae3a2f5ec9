"""The ring benchmark's file (scripts/ring_bench.py), read once into dataclasses: `RingRun.load(name)`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TypedDict


class RingShape(TypedDict, total=False):
    """The per-device shape the benchmark ran at."""

    B: int
    N: int
    K: int
    H: int
    dtype: str


@dataclasses.dataclass(frozen=True)
class RingEnvironment:
    """Where the benchmark ran: `device_count` × `device_kind`, and the per-device shape B, N, K, H, dtype."""

    device_kind: str
    device_count: int
    backend: str  # "gpu" or "cpu" (a smoke run)
    jax_version: str
    date: str  # ISO 8601
    block: str  # the per-block attention: "cudnn_block" or "xla_block"
    xla_flags: str = ""
    shape: RingShape = dataclasses.field(default_factory=RingShape)  # {'B', 'N', 'K', 'H', 'dtype'}


@dataclasses.dataclass(frozen=True)
class RingLength:
    """One sequence length T = S of the benchmark: per `{mask}_{variant}_` key its `ms` (wall, per call),
    `speedup` (one device's ms / this ms) and `efficiency` (speedup / P); `skipped` says why it was not measured."""

    T: int
    skipped: str | None = None
    values: Mapping[str, float] = dataclasses.field(default_factory=dict, repr=False)

    def has(self, mask: str, variant: str) -> bool:
        return f"{mask}_{variant}_ms" in self.values

    def ms(self, mask: str, variant: str) -> float:
        return self.values[f"{mask}_{variant}_ms"]

    def speedup(self, mask: str, variant: str) -> float | None:
        return self.values.get(f"{mask}_{variant}_speedup")

    def efficiency(self, mask: str, variant: str) -> float:
        return self.values[f"{mask}_{variant}_efficiency"]

    def one_device_ms(self, mask: str) -> float:
        return self.values[f"{mask}_one_device_ms"]

    def speedup_keys(self) -> list[str]:
        """'{mask}_{variant}' of every speed-up measured here, in the file's order."""
        return [k.removesuffix("_speedup") for k in self.values if k.endswith("_speedup")]


@dataclasses.dataclass(frozen=True)
class RingStep:
    step: int
    compute_ms: float  # the step's attention, timed alone
    transfer_ms: float  # the step's send, timed alone (0 at the last step)


@dataclasses.dataclass(frozen=True)
class RingTimeline:
    """One mask's ring at the longest T, its parts timed alone and the whole ring timed (all in ms)."""

    steps: tuple[RingStep, ...]
    merge_ms: float
    send_ms: float
    send_GBps: float  # one send's bytes / send_ms, in 1e9 bytes per second
    sum_of_parts_serial_ms: float
    ideal_overlap_ms: float
    ring_ms: float
    ring_no_overlap_ms: float
    transfer_hidden: float  # share of the transfer time the overlap hid, 0..1
    transfer_hidden_by_variant: Mapping[str, float] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, t: Mapping) -> RingTimeline:
        names = {f.name for f in dataclasses.fields(cls)} - {"steps", "transfer_hidden_by_variant"}
        return cls(steps=tuple(RingStep(int(s["step"]), s["compute_ms"], s["transfer_ms"]) for s in t["steps"]),
                   transfer_hidden_by_variant=dict(t.get("transfer_hidden_by_variant") or {}),
                   **{n: t[n] for n in names})


@dataclasses.dataclass(frozen=True)
class Correctness:
    """Relative error of the ring against one device, at length T."""

    T: int | None = None
    non_causal: float = float("nan")
    causal: float = float("nan")


@dataclasses.dataclass(frozen=True)
class RingRun:
    """A ring benchmark file (scripts/ring_bench.py), read once: `RingRun.load("ring_h200x2")`."""

    environment: RingEnvironment
    lengths: tuple[RingLength, ...]  # every T listed, measured or skipped, in the file's order
    timeline: Mapping[str, RingTimeline] = dataclasses.field(default_factory=dict)  # per mask
    schedule: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # program -> instructions
    correctness: Correctness = Correctness()
    crossover_T: Mapping[str, int | None] = dataclasses.field(default_factory=dict)  # as the benchmark wrote it

    @property
    def measured(self) -> list[RingLength]:
        return [r for r in self.lengths if r.skipped is None]

    @classmethod
    def from_json(cls, data: Mapping) -> RingRun:
        """The benchmark's JSON dict as a RingRun; ValueError for any other file."""
        env = data.get("environment") if isinstance(data, Mapping) else None
        if not isinstance(env, Mapping) or "device_count" not in env or "results" not in data:
            raise ValueError("not a ring benchmark file (scripts/ring_bench.py): it needs 'results' and "
                             "'environment.device_count'")
        names = {f.name for f in dataclasses.fields(RingEnvironment)}
        lengths = tuple(RingLength(int(r["T"]), r.get("skipped"), {k: v for k, v in r.items()
                                                                  if k not in ("T", "skipped")})
                        for r in data["results"])
        c = data.get("correctness_rel_err") or {}
        return cls(environment=RingEnvironment(**{k: v for k, v in env.items() if k in names}),
                   lengths=lengths,
                   timeline={m: RingTimeline.from_json(t) for m, t in (data.get("timeline") or {}).items() if t},
                   schedule={p: tuple(ops) for p, ops in (data.get("schedule") or {}).items()},
                   correctness=Correctness(c.get("T"), c.get("non_causal", float("nan")),
                                           c.get("causal", float("nan"))),
                   crossover_T=dict(data.get("crossover_T") or {}))

    @classmethod
    def load(cls, name: str) -> RingRun | None:
        """The shipped file `attnlab/shipped/{name}.json` as a RingRun, or None when it does not ship."""
        from attnlab import shipped

        data = shipped.load(name)
        return None if data is None else cls.from_json(data)
