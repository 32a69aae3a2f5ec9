"""Shapes known to abort a compiler: refused up front with a sentence, before a device worker meets them.

A native abort (a failed check inside XLA, cuDNN or a Pallas lowering) ends its process; no Python `try`
catches it, and the device worker's process boundary contains it. This list spares the learner that round trip
for the aborts already seen; ATTNLAB_REFUSE_KNOWN_ABORTS=0 turns it off (the fault tests)."""

from __future__ import annotations

import dataclasses

from attnlab.backends.base import Requirement
from attnlab.device import DeviceInfo
from attnlab.settings import settings
from attnlab.shapes import AttentionShape


@dataclasses.dataclass(frozen=True)
class KnownAbort:
    backends: tuple[str, ...]
    backend: str  # JAX's backend it happens on ("cpu", "gpu")
    dtype: str
    head_dim: int
    masked: bool  # with any mask (causal, window, padding) or without
    seen: str  # where and how it was seen

    def applies(self, name: str, shape: AttentionShape, device: DeviceInfo) -> bool:
        return (name in self.backends and device.backend == self.backend and shape.dtype == self.dtype
                and shape.head_dim == self.head_dim and shape.masked == self.masked)


KNOWN = (
    KnownAbort(("sdpa_auto", "sdpa_xla"), "cpu", "bfloat16", 1, False,
               "jaxlib 0.10.2 on x86-64, 2026-12-01: ynn_emitter.cc:201 Check failed: instr->opcode() == "
               "HloOpcode::kBitcast (reshape vs. bitcast), SIGABRT; causal and float32 ran"),
)


CRASH = "compiler is known to crash"  # in every known abort's sentence


def requirement(name: str, shape: AttentionShape, device: DeviceInfo) -> list[Requirement]:
    """One row when a known abort applies to backend `name` at `shape` here (unmet unless turned off)."""
    for k in KNOWN:
        if k.applies(name, shape, device):
            # one plain sentence; XLA's own words (k.seen) go behind an expander (pages/sections.not_run)
            return [Requirement("a shape its compiler survives", f"XLA's {k.backend.upper()} {CRASH} "
                                f"at {k.dtype} with head_dim {k.head_dim} and no mask (try another head_dim, "
                                "float32 or a mask)",
                                f"{shape.dtype}, head_dim {shape.head_dim}", not settings().refuse_known_aborts)]
    return []


def refusal(name: str, shape: AttentionShape, device: DeviceInfo) -> str | None:
    """The sentence refusing backend `name` at `shape` here when a known abort applies, else None."""
    unmet = [r for r in requirement(name, shape, device) if not r.met]
    return f"{name} at {shape.describe()}: {unmet[0].sentence()}" if unmet else None
