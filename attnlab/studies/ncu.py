"""Nsight Compute: the DRAM bytes one kernel moved, from `ncu --csv` on a subprocess calling an implementation
once (page 5b). Optional: without ncu or the GPU's counters, an `NcuCount` says why in `reason`."""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping

from attnlab.shapes import AttentionShape

NCU = "/usr/local/cuda/bin/ncu"
NCU_KERNEL = {"sdpa_cudnn": "cudnn|fmha|flash", "tokamax_mosaic": "mosaic|attention|flash",
              "tokamax_triton": "triton|attention|flash", "cudnn_fp8": "cudnn|fmha|flash"}


@dataclasses.dataclass(frozen=True)
class NcuCount:
    """Nsight Compute's DRAM counters for one call of one kernel, or why there are none (`reason`)."""

    read_bytes: int | None = None  # DRAM bytes read
    write_bytes: int | None = None  # DRAM bytes written
    kernel: str | None = None  # the kernel's name as profiled
    shape: str | None = None  # AttentionShape.describe() of the shape it ran at
    reason: str = ""

    @property
    def measured(self) -> bool:
        return self.read_bytes is not None and self.write_bytes is not None

    @classmethod
    def from_json(cls, c: Mapping) -> NcuCount:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in c.items() if k in names})

    def to_json(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, "")}


_SCRIPT = """
import jax
from attnlab.measure import runs
from attnlab.backends import get
from attnlab.shapes import AttentionShape
shape, _ = AttentionShape.from_query_params({shape!r})
q, k, v = runs.make_inputs(shape)
f = get({name!r}).jit(shape)
for _ in range(2):
    jax.block_until_ready(f(q, k, v))
"""
UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
         "kibyte": 2**10, "mibyte": 2**20, "gibyte": 2**30}


def parse_ncu(text: str) -> NcuCount | None:
    """The kernel's name and DRAM bytes read and written from `ncu --csv` output (any byte unit), or None."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    found: dict = {}
    for rec in csv.DictReader(io.StringIO("\n".join(lines))):
        metric, unit = rec.get("Metric Name"), (rec.get("Metric Unit") or "byte").strip().lower()
        if metric not in ("dram__bytes_read.sum", "dram__bytes_write.sum") or unit not in UNITS:
            continue
        try:
            value = float(rec["Metric Value"].replace(",", "")) * UNITS[unit]
        except (KeyError, ValueError):
            continue
        found["read_bytes" if metric.endswith("read.sum") else "write_bytes"] = int(value)
        found["kernel"] = rec.get("Kernel Name")
    return NcuCount(**found) if {"read_bytes", "write_bytes"} <= found.keys() else None


def ncu_dram_bytes(shape: AttentionShape, name: str, kernel_regex: str | None = None, *, timeout_s: float = 75,
                   ncu: str = NCU) -> NcuCount:
    """The DRAM bytes of the first kernel matching `kernel_regex` in one call of `name` at `shape`, or an
    NcuCount whose `reason` says why not: no ncu, no GPU counters (permissions), a timeout, no matching kernel."""
    if not (os.path.exists(ncu) or shutil.which(ncu)):
        return NcuCount(reason=f"Nsight Compute is not installed here ({ncu} not found)")
    regex = kernel_regex or NCU_KERNEL.get(name, "attention|fmha|flash")
    script = _SCRIPT.format(shape=shape.to_query_params(), name=name)  # the shape as its link writes it
    cmd = [ncu, "--clock-control", "none", "-k", f"regex:{regex}", "--launch-count", "1", "--csv",
           "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum", sys.executable, "-c", script]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    except subprocess.TimeoutExpired:
        return NcuCount(reason=f"ncu took longer than {timeout_s:.0f} s")
    except OSError as e:
        return NcuCount(reason=f"ncu could not start: {e}")
    counters = parse_ncu(done.stdout)
    if counters:
        return dataclasses.replace(counters, shape=shape.describe())
    text = done.stdout + done.stderr
    if "ERR_NVGPUCTRPERM" in text:
        return NcuCount(reason="the GPU's performance counters are not readable by this user (ERR_NVGPUCTRPERM)")
    if "No kernels were profiled" in text:
        return NcuCount(reason=f"no kernel matched {regex!r}")
    tail = re.sub(r"\s+", " ", text[-300:]).strip()
    return NcuCount(reason=f"ncu gave no DRAM counters (exit {done.returncode}): {tail}")
