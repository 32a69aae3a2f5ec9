"""AttnLab's core: scaled dot-product attention on GPUs with JAX, computed and timed headless.

    shapes           AttentionShape: sizes, validation, FLOPs, memory estimates, URL round trip
    device           what is here (backend, compute capability, memory, versions) and datasheet peaks
    implementations  the one registry: naive, SDPA (auto, XLA, cuDNN), TransformerEngine, FP8
    bench            the one timing harness, sweeps, the device queue
    masks, weights   attention masks and weight matrices for heatmaps
    te, fp8          TransformerEngine and FP8 (optional; their absence is a normal state)
    reference        measurements shipped from a real GPU
    cli              python -m attnlab ...

Nothing here imports streamlit: the same code runs in the app, the CLI and on the GPU machine.
"""

from attnlab.shapes import AttentionShape

__all__ = ["AttentionShape"]
__version__ = "0.1.0"
