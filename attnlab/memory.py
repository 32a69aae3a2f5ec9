"""Memory: what one attention call holds, O(T²) for naive and XLA, O(T) for a fused kernel.

The compiler reports it before anything runs: `compiled.memory_analysis()` gives the scratch
(`temp_size_in_bytes`) a program needs beyond its arguments and outputs. Compiling a program that
would not fit is free, so these figures go past what the device could hold, and show why.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from attnlab import runs
from attnlab.shapes import AttentionShape


def compiled_memory(shape: AttentionShape, names: Sequence[str], lengths: Sequence[int]) -> pd.DataFrame:
    """Scratch, argument and output bytes of each implementation's compiled program as T = S grows.

    Each point is a compile from `jax.ShapeDtypeStruct`s (`runs.run(..., program=True)`): nothing
    is allocated or run. Naive attention's scratch holds the (B, N, T, S) scores, O(T²); a fused
    kernel streams over S and keeps O(T).
    """
    results, extra = [], []
    for t in lengths:
        s = shape.replace(q_len=int(t), kv_len=int(t))
        for r in runs.run(s, names, accuracy=False, program=True):
            results.append(r)
            p = r.program
            extra.append({"score_bytes_float32": s.score_bytes(),
                          "argument_bytes": p.argument_bytes if p else None,
                          "output_bytes": p.output_bytes if p else None,
                          "total_bytes": (p.temp_bytes or 0) + (p.argument_bytes or 0) + (p.output_bytes or 0)
                          if p else None})
    return runs.to_frame(results, extra)
