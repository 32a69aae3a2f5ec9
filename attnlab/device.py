"""What is here: backend, device, compute capability, memory, versions, and the datasheet peaks.

Features are gated by compute capability, never by name (an "H100 NVL" and an "H200" are both 9.0 and run the
same kernels); the name only looks up the published peak rates, which are per product.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import importlib.metadata
import importlib.util
import os
import re
import subprocess

import jax

# Gates, by compute capability (major, minor).
FUSED_ATTENTION_MIN_CC = (8, 0)  # cuDNN flash attention: Ampere or newer (cuDNN frontend docs)
FP8_MATMUL_MIN_CC = (8, 9)  # FP8 tensor cores: Ada (8.9) and Hopper (9.0)
FP8_ATTENTION_MIN_CC = (9, 0)  # cuDNN FP8 flash attention: Hopper or newer


@dataclasses.dataclass(frozen=True)
class Peak:
    """Published dense (no sparsity) peak rates of one GPU model."""

    model: str
    bf16_tflops: float  # dense bf16/fp16 tensor-core TFLOP/s
    tf32_tflops: float  # dense TF32 tensor-core TFLOP/s (what float32 matmuls use by default in JAX on GPU)
    fp32_tflops: float  # plain fp32 (non-tensor) TFLOP/s
    fp8_tflops: float | None  # dense FP8 tensor-core TFLOP/s, None where there is no FP8
    memory_tb_s: float  # HBM/GDDR bandwidth, TB/s
    source: str
    memory_gb: float | None = None  # the GPU's memory as its datasheet states it (GB, 10⁹ bytes)


# Dense figures are the datasheets' sparse figures halved where the datasheet lists only sparse.
PEAKS: tuple[tuple[str, Peak], ...] = (
    # NVIDIA L4 Tensor Core GPU datasheet (2023): 242 bf16 / 120 tf32 / 485 fp8 TFLOP/s with sparsity, 30.3 fp32, 300 GB/s
    (r"\bL4\b", Peak("L4", 121.0, 60.0, 30.3, 242.5, 0.300, "NVIDIA L4 datasheet", 24)),
    # NVIDIA A100 datasheet (2021): 312 bf16 dense, 19.5 fp32, 2039 GB/s (80GB SXM), no FP8
    (r"\bA100\b", Peak("A100 80GB SXM", 312.0, 156.0, 19.5, None, 2.039, "NVIDIA A100 datasheet", 80)),
    # NVIDIA H100 datasheet (2023), PCIe: 1513 bf16 / 3026 fp8 sparse, 51 fp32, 2.0 TB/s
    (r"\bH100\b.*PCIe", Peak("H100 PCIe", 756.5, 378.0, 51.0, 1513.0, 2.0, "NVIDIA H100 datasheet (PCIe)", 80)),
    # NVIDIA H100 datasheet (2023), SXM: 1979 bf16 / 3958 fp8 sparse, 67 fp32, 3.35 TB/s
    (r"\bH100\b", Peak("H100 SXM", 989.5, 494.7, 67.0, 1979.0, 3.35, "NVIDIA H100 datasheet (SXM)", 80)),
    # NVIDIA H200 datasheet (2024), SXM: H100's compute, 141 GB HBM3e at 4.8 TB/s
    (r"\bH200\b", Peak("H200 SXM", 989.5, 494.7, 67.0, 1979.0, 4.8, "NVIDIA H200 datasheet (SXM)", 141)),
    # NVIDIA HGX B200 datasheet (2024), per GPU: 4.5 bf16 / 9 fp8 PFLOP/s sparse, ~75 fp32, 8 TB/s
    (r"\bB200\b", Peak("B200", 2250.0, 1100.0, 75.0, 4500.0, 8.0, "NVIDIA HGX B200 datasheet")),
)


def peak_for(device_kind: str) -> Peak | None:
    """The datasheet row for a device name such as 'NVIDIA H200', or None when unknown."""
    for pattern, peak in PEAKS:
        if re.search(pattern, device_kind or "", flags=re.IGNORECASE):
            return peak
    return None


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    backend: str  # "gpu", "cpu", "tpu"
    platform: str  # e.g. "cuda 12080" or "cpu"
    device_kind: str
    device_count: int
    compute_capability: tuple[int, int] | None
    memory_total_bytes: int | None
    memory_free_bytes: int | None
    jax_version: str
    jaxlib_version: str
    cudnn_version: str | None
    te_version: str | None
    peak: Peak | None

    @property
    def is_cuda(self) -> bool:
        return self.backend == "gpu" and "cuda" in self.platform.lower()

    @property
    def compute_capability_str(self) -> str:
        return "{}.{}".format(*self.compute_capability) if self.compute_capability else "n/a"

    def at_least(self, cc: tuple[int, int]) -> bool:
        """True on a CUDA GPU whose compute capability is cc or newer."""
        return self.is_cuda and self.compute_capability is not None and self.compute_capability >= cc

    def as_rows(self) -> list[tuple[str, str]]:
        """(what, value) pairs for a table."""
        from attnlab.shapes import format_bytes

        mem = lambda b: format_bytes(b) if b else "not exposed"  # noqa: E731
        return [
            ("backend", self.backend),
            ("platform", self.platform),
            ("device", f"{self.device_kind} (x{self.device_count})"),
            ("compute capability", self.compute_capability_str),
            ("memory total", mem(self.memory_total_bytes)),
            ("memory free", mem(self.memory_free_bytes)),
            ("jax / jaxlib", f"{self.jax_version} / {self.jaxlib_version}"),
            ("cuDNN", self.cudnn_version or "not present"),
            ("TransformerEngine", self.te_version or "not installed"),
            ("datasheet peak", _peak_text(self.peak)),
        ]


def _peak_text(peak: Peak | None) -> str:
    if peak is None:
        return "unknown for this device"
    fp8 = f", fp8 {peak.fp8_tflops:g}" if peak.fp8_tflops else ""
    return (
        f"{peak.model}: bf16 {peak.bf16_tflops:g}{fp8}, tf32 {peak.tf32_tflops:g}, fp32 {peak.fp32_tflops:g} TFLOP/s, "
        f"{peak.memory_tb_s:g} TB/s ({peak.source})"
    )


def _compute_capability(dev) -> tuple[int, int] | None:
    cc = getattr(dev, "compute_capability", None)
    if not cc:
        return None
    major, _, minor = str(cc).partition(".")
    try:
        return int(major), int(minor or 0)
    except ValueError:
        return None


def cudnn_version() -> str | None:
    """cuDNN's version as 'major.minor.patch' when JAX's CUDA plugin loaded it, else None."""
    try:
        from jax._src.lib import cuda_versions  # private, but the only place JAX exposes it
    except ImportError:
        return None
    if cuda_versions is None:
        return None
    try:
        v = int(cuda_versions.cudnn_get_version())
    except Exception:
        return None
    return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"


def te_version() -> str | None:
    """TransformerEngine's version if it is installed (found without importing it: that is slow)."""
    if importlib.util.find_spec("transformer_engine") is None:
        return None
    for dist in ("transformer_engine", "transformer-engine", "transformer_engine_jax"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "installed (version unknown)"


def memory(dev=None) -> tuple[int | None, int | None]:
    """(total, free) bytes of a device, where its allocator reports them (GPUs do, CPUs don't)."""
    dev = dev or jax.devices()[0]
    try:
        stats = dev.memory_stats()
    except Exception:
        stats = None
    if not stats:
        return None, None
    total = stats.get("bytes_limit")
    used = stats.get("bytes_in_use", 0)
    return total, (total - used if total else None)


NVML_CLOCK_SM = 1  # nvmlClockType_t's NVML_CLOCK_SM


@functools.lru_cache(maxsize=1)
def _nvml() -> tuple | None:
    """(library, this process's GPU's handle, its maximum SM clock in MHz) from NVIDIA's management library, the
    driver's libnvidia-ml.so.1, through ctypes; None where it does not load (a CPU, another vendor) or answer.

    Hand-written because NVIDIA's own binding (nvidia-ml-py) is not in the image's lock, while the driver's
    library is in every GPU container; a read takes microseconds where `nvidia-smi` takes tens of milliseconds,
    so a timing's warm-up can watch the clock rise (timing.warm_up)."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        if lib.nvmlInit_v2() != 0:
            return None
        first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
        handle = ctypes.c_void_p()
        if first.isdigit():
            rc = lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(int(first)), ctypes.byref(handle))
        else:  # a UUID, as Kubernetes' device plugin may set it
            rc = lib.nvmlDeviceGetHandleByUUID(first.encode(), ctypes.byref(handle))
        top = ctypes.c_uint()
        if rc != 0 or lib.nvmlDeviceGetMaxClockInfo(handle, NVML_CLOCK_SM, ctypes.byref(top)) != 0:
            return None
        return lib, handle, top.value
    except (OSError, AttributeError):
        return None


def nvml_sm_clock() -> tuple[int, int] | None:
    """(SM clock now, its maximum) in MHz through NVML (`_nvml`), or None."""
    got = _nvml()
    if got is None:
        return None
    lib, handle, top = got
    now = ctypes.c_uint()
    if lib.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM, ctypes.byref(now)) != 0:
        return None
    return now.value, top


def sm_clock_mhz() -> tuple[int, int] | None:
    """(SM clock now, its maximum) in MHz from nvidia-smi, or None; a GPU under sustained load lowers its
    clock and kernel time follows it, so a measurement is complete only with the clock it ran at."""
    index = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    try:
        out = subprocess.run(["nvidia-smi", "-i", index, "--query-gpu=clocks.sm,clocks.max.sm",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        now, top = (int(x) for x in out.stdout.strip().splitlines()[0].split(","))
        return now, top
    except Exception:  # no nvidia-smi (CPU, other vendors), or an answer we cannot read
        return None


@functools.lru_cache(maxsize=1)
def _static_info() -> dict:
    dev = jax.devices()[0]
    return dict(
        backend=jax.default_backend(),
        platform=str(getattr(dev.client, "platform_version", dev.platform)).strip(),
        device_kind=dev.device_kind,
        device_count=jax.device_count(),
        compute_capability=_compute_capability(dev),
        jax_version=jax.__version__,
        jaxlib_version=importlib.metadata.version("jaxlib"),
        cudnn_version=cudnn_version(),
        te_version=te_version(),
        peak=peak_for(dev.device_kind) if jax.default_backend() == "gpu" else None,
    )


def info() -> DeviceInfo:
    """The device JAX computes on by default (the first one), with its memory read now."""
    total, free = memory()
    return DeviceInfo(memory_total_bytes=total, memory_free_bytes=free, **_static_info())
