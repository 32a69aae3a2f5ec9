"""AttnLab's core: scaled dot-product attention on GPUs with JAX, computed and timed headless.

Bottom to top (an import only ever points down):

    shapes, masks, device, kernels, presets   facts: the shape and its masks, what is here
    attention, checks                          the math once, and the float64 reference built on it
    backend, backends/                         what a backend is, and one file per backend (the registry)
    waiting, across, queue, store, timing,     the run layer: admission (in a process and across the
    compiled, runs                             server's processes), shared results, the one harness,
                                               compiled programs, run(shape, names) -> typed Results
    memory, weights, layout, kvcache, flash, ladder, fp8_study, suite, context_parallel, ...
                                               studies built on runs
    shipped                                    measurements from real GPUs, labelled
    cli                                        python -m attnlab ...
    sampler                                    where a server's page threads spend their time (benchmarks)

Nothing here imports streamlit: the same code runs in the app, the CLI and on the GPU machine.
"""

from attnlab.shapes import AttentionShape

__all__ = ["AttentionShape"]
__version__ = "0.2.0"
