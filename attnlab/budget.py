"""The memory a device worker may use: one run is checked against the whole budget before it starts.

Budget: ATTNLAB_MEMORY_LIMIT_GIB if set; else 80 % of the GPU's free memory and half of the host's
available memory when the worker started (on the CPU backend device arrays are host memory: one budget).
A container's memory limit (its cgroup) counts as the host's. `admission.DEVICE` asks it of every run.
"""

from __future__ import annotations

import dataclasses
from typing import cast

from attnlab.settings import settings
from attnlab.shapes import GIB, format_bytes


def _cgroup_memory_left() -> int | None:
    """Bytes this process's memory cgroup (v2 or v1) may still grow by, or None without a limit."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            limit, used = f"/sys/fs/cgroup{path}/memory.max", f"/sys/fs/cgroup{path}/memory.current"
        elif "memory" in controllers.split(","):
            base = f"/sys/fs/cgroup/memory{path}"
            limit, used = f"{base}/memory.limit_in_bytes", f"{base}/memory.usage_in_bytes"
        else:
            continue
        try:
            with open(limit) as f:
                raw = f.read().strip()
            with open(used) as f:
                current = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if raw.isdigit() and int(raw) < 2**60:
            return int(raw) - current
    return None


def host_available_bytes() -> int:
    """Memory this process may still use: its cgroup's limit (a container) or MemAvailable, the smaller."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    left = _cgroup_memory_left()
    if left is not None:
        avail = left if avail is None else min(avail, left)
    return avail if avail is not None else 8 * GIB


@dataclasses.dataclass(frozen=True)
class Budget:
    device_bytes: int
    host_bytes: int
    shared: bool  # the CPU backend: device arrays are host memory, so both count against host_bytes
    source: str = ""  # where the figures come from, said with a refusal
    device_total_bytes: int | None = None  # the GPU's memory, stated beside the budget

    @classmethod
    def here(cls) -> Budget:
        from attnlab import device  # late: reading the device initialises JAX's backend

        info = device.info()
        shared = info.backend == "cpu" or not info.memory_free_bytes
        total = info.memory_total_bytes if not shared else None
        limit = settings().memory_limit_gib
        if limit:
            cap = int(limit * GIB)
            return cls(cap, cap, shared, "ATTNLAB_MEMORY_LIMIT_GIB", total)
        host = int(host_available_bytes() * 0.5)
        if shared:
            return cls(host, host, shared, "half of the memory available when the device worker started")
        free = cast(int, info.memory_free_bytes)  # not shared: a number (device.memory gives it with a total)
        return cls(int(free * 0.8), host, shared,
                   f"80 % of the {format_bytes(free)} free of this GPU's {format_bytes(cast(int, total))} "
                   "when the device worker started", total)

    def check(self, device_bytes: int, host_bytes: int) -> str | None:
        """Why a run of this size can never be admitted, or None when it can."""
        host = host_bytes + (device_bytes if self.shared else 0)
        said = f" ({self.source})" if self.source else ""
        if not self.shared and device_bytes > self.device_bytes:
            return (f"needs about {format_bytes(device_bytes)} of GPU memory, over this lab's budget of "
                    f"{format_bytes(self.device_bytes)}{said}")
        if host > self.host_bytes:
            where = "memory" if self.shared else "host memory"
            return f"needs about {format_bytes(host)} of {where}, over this lab's budget of {format_bytes(self.host_bytes)}{said}"
        return None
