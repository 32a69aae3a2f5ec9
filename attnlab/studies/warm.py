"""Warm a fresh server: compile and run the shapes a class opens first, before the first learner asks.

`python -m attnlab warm` (or the app, once per process, in a background thread) runs every backend
that can run here at the codelab's shape, in float32 and bfloat16, checked against float64 and with
its compiled program read. Compiling is what a first page load waits for on a CPU; with JAX's
persistent compilation cache (JAX_COMPILATION_CACHE_DIR) the programs also survive a restart.
"""

from __future__ import annotations

import time

from attnlab import device, presets
from attnlab.backends import REGISTRY
from attnlab.measure import runs
from attnlab.shapes import AttentionShape

SHAPES = (AttentionShape(), AttentionShape(dtype="bfloat16"), AttentionShape(dtype="bfloat16", causal=True))
# the sidebar's model presets at the codelab's batch and length, for the codelab's implementations only
CODELAB = ("naive", "sdpa_auto", "sdpa_xla", "sdpa_cudnn")
PRESET_SHAPES = tuple(presets.apply(p, AttentionShape(dtype=d)) for p in presets.PRESETS for d in ("float32", "bfloat16"))


def head_start() -> float:
    """Page 1's own work on a fresh server, done ahead: the imports its first run needs (JAX,
    pandas, Altair) and the JAX operations of its default tiny example, each compiled on first use
    (about 1 s on a CPU), then tokamax's import where it is installed (which every page's first
    check of the backends would otherwise wait for). serve.py runs it in a background thread while
    the server starts and the first browser loads Streamlit's JavaScript, so the first learner finds
    it done. Seconds it took."""
    t0 = time.perf_counter()
    import altair  # noqa: F401  (pages/common.py's charts)

    from attnlab.backends import tokamax as tokamax_backend
    from attnlab.studies import weights

    weights.four_stages(weights.example_shape())
    tokamax_backend.import_error()  # imports tokamax where it is installed (seconds on a GPU machine)
    return time.perf_counter() - t0


def warm(shapes=SHAPES, log=lambda s: None, preset_shapes=PRESET_SHAPES, pause=lambda: None) -> float:
    """Run and compile `shapes` for every backend that can run them here, then `preset_shapes` for
    the codelab's implementations; seconds it took. `pause()` is called before each shape: the app
    passes one that waits while learners' pages run, so the warm-up only uses time nobody else wants."""
    t0, info = time.perf_counter(), device.info()
    for shape, among in [(s, REGISTRY) for s in shapes] + [(s, CODELAB) for s in preset_shapes]:
        pause()
        names = [n for n in among if REGISTRY[n].unmet(shape, info) is None]
        for r in runs.run(shape, names, accuracy=True, program=True):
            log(f"warm {shape.describe()} {r.implementation}: {r.status}")
    return time.perf_counter() - t0
