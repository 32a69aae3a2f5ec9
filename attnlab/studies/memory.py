"""Memory: what one attention call holds, O(T²) for naive and XLA, O(T) for a fused kernel.

The compiler reports it before anything runs (`compiled.memory_analysis()`: scratch beyond arguments and
outputs), so figures go past what the device holds. The backward pass differs most: naive attention and
XLA's path keep the (B, N, T, S) softmax weights for the softmax gradient; a flash kernel keeps a float32
log-sum-exp per query row, O(T), and recomputes scores tile by tile (Dao et al. 2022, arXiv:2205.14135, 3.1).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pandas as pd

from attnlab.measure import compiled, runs
from attnlab.shapes import AttentionShape
from attnlab.studies import timing_demo


def compiled_memory(shape: AttentionShape, names: Sequence[str], lengths: Sequence[int],
                    backward: bool = False) -> pd.DataFrame:
    """Scratch, argument and output bytes of each implementation's compiled program as T = S grows: compiled
    from ShapeDtypeStructs (nothing run), tuned as a timed program is; `backward`: forward + backward."""
    results, extra = [], []
    for t in lengths:
        s = shape.replace(q_len=int(t), kv_len=int(t))
        for r in runs.run(s, names, accuracy=False, program=True, backward=backward, tuned=True):
            results.append(r)
            p = r.program
            extra.append({"score_bytes_float32": s.score_bytes(),
                          "argument_bytes": p.argument_bytes if p else None,
                          "output_bytes": p.output_bytes if p else None,
                          "total_bytes": (p.temp_bytes or 0) + (p.argument_bytes or 0) + (p.output_bytes or 0)
                          if p else None})
    return runs.to_frame(results, extra)


def same_program(shape: AttentionShape, a: str, b: str) -> bool:
    """True when backends `a` and `b` compile to the same optimised program at `shape` (compile only, no
    autotuning: compiled.CHECK_OPTIONS); `sdpa_auto` against `sdpa_xla` shows if JAX picks XLA's own code."""
    texts = [compiled.compile_backend(n, shape, False, False)[0].as_text() for n in (a, b)]
    return texts[0] == texts[1]


def overlaps(df: pd.DataFrame, y: str, x: str = "q_len", within: float = 0.05) -> list[tuple[str, str, float]]:
    """Pairs of implementations whose `y` differs by at most `within` (relative) at every `x` both
    have: on a log chart their lines lie on top of each other. (a, b, largest relative difference)."""
    ok = df[(df["status"] == runs.OK) & (df[y].fillna(0) > 0)]
    lines = timing_demo.lines_of(ok, x, y)
    out = []
    for a, b in itertools.combinations([c for c in dict.fromkeys(ok["implementation"]) if c in lines], 2):
        shared = lines[a].keys() & lines[b].keys()
        if shared:
            rel = max(abs(lines[a][v] - lines[b][v]) / max(lines[a][v], lines[b][v]) for v in shared)
            if rel <= within:
                out.append((a, b, float(rel)))
    return out


def shipped_configuration(df: pd.DataFrame) -> pd.DataFrame:
    """The shipped `long_context` rows of one configuration (the first row's batch, heads, head_dim,
    dtype and causal), so that lines differ only by T, pass and implementation."""
    keys = [c for c in ("batch", "heads", "kv_heads", "head_dim", "dtype", "causal") if c in df.columns]
    if df.empty or not keys or "q_len" not in df.columns:
        return df.iloc[:0]
    first = df[keys].iloc[0]
    return df[(df[keys] == first).all(axis=1)]


def scratch_at(df: pd.DataFrame, name: str, q_len: int, pass_: str = "forward") -> float | None:
    """The scratch bytes of `name` at `q_len` in a table of compiled programs, or None."""
    rows = df[(df["implementation"] == name) & (df["q_len"] == q_len) & (df["status"] == runs.OK)]
    if "pass" in df.columns:
        rows = rows[rows["pass"] == pass_]
    rows = rows[rows["temp_bytes"].fillna(0) > 0]
    return float(rows["temp_bytes"].iloc[0]) if len(rows) else None


def kept_for_backward(shape: AttentionShape) -> dict[str, int]:
    """What the forward pass keeps for the backward pass, in bytes: naive and XLA keep the float32
    (B, N, T, S) softmax weights; a flash kernel keeps one float32 log-sum-exp per (B, N, T) row."""
    return {"weights (B, N, T, S), float32": shape.score_bytes(),
            "log-sum-exp (B, N, T), float32": shape.batch * shape.heads * shape.q_len * 4}
