"""tokamax's Pallas flash-attention kernels (optional, GPU): Mosaic GPU, Triton, and chunked XLA."""

from attnlab import tokamax_backend
from attnlab.backend import Backend, Requirement, masks_taken, streamed_bytes


def _entry(implementation: str, label: str, adds: str) -> Backend:
    def requirements(shape, device):
        rows = tokamax_backend.requirements(implementation, device, shape.dtype, shape.head_dim)
        return [Requirement(*r) for r in rows] + [masks_taken(shape, window=True, padding=True)]

    return Backend(
        name=f"tokamax_{implementation}",
        label=label,
        fn=lambda q, k, v, shape: tokamax_backend.tokamax_attention(
            q, k, v, causal=shape.causal, implementation=implementation, window=shape.window,
            kv_lengths=shape.kv_lengths_per_batch()),
        requirements=requirements,
        device_bytes=streamed_bytes,
        description=f"tokamax.dot_product_attention(implementation='{implementation}') (openxla/tokamax).",
        adds=adds,
    )


XLA_CHUNKED = _entry("xla_chunked", "tokamax, chunked XLA",
                     "Queries in chunks through plain XLA: less memory than XLA's SDPA, no fused kernel.")
TRITON = _entry("triton", "tokamax, Pallas Triton",
                "One fused kernel written in Python (Pallas) and compiled by Triton: tiles kept on chip.")
MOSAIC = _entry("mosaic", "tokamax, Pallas Mosaic GPU",
                "Hopper's asynchronous tensor-core instructions (wgmma), TMA copies (hardware that moves whole "
                "tiles to and from on-chip memory) and warp specialisation (some warps only load tiles while "
                "others compute), from Python (Pallas Mosaic GPU).")
