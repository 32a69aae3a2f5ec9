"""AttnLab's core: scaled dot-product attention on GPUs with JAX, computed and timed headless.

Bottom to top (an import only ever points down):

    settings                                   every ATTNLAB_* setting, read once
    shapes, masks, device, kernels, presets   facts: the shape and its masks, what is here
    spans, admission                           the timing log; this process's device: one run at a time, builds
                                               between runs
    math/        attention, flash, checks      the math once, and the float64 reference built on it
    backends/    base + one file per backend   what a backend is, and the registry
    measure/     timing, compiled, runs        the one harness, compiled programs, run(shape, names) -> Results
    studies/     memory, weights, layout, kvcache, ladder, fp8_study, suite, warm, ring_*, ...
                                               studies built on runs
    yourturn/    allowlist, sandbox, exercises, grade, timed, share, progress
                                               the learner's own code: refused, traced aside, checked, timed
    service/     request, entries, worker, local, child, ray_workers
                                               the device worker that owns a GPU, and the ways to reach it
    shipped                                    measurements from real GPUs, labelled
    cli                                        python -m attnlab ...
    procs                                      a free port, process trees, CPU and memory (psutil), py-spy samples:
                                               for the benchmarks (scripts/) and the tests

Nothing here imports streamlit: the same code runs in the app, the device worker, the CLI and on the GPU machine.
"""

from attnlab.shapes import AttentionShape

__all__ = ["AttentionShape"]
__version__ = "0.3.0"
