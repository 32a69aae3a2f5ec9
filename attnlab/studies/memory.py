"""Memory: what one attention call holds, O(T²) for naive and XLA, O(T) for a fused kernel.

The compiler reports it before anything runs: `compiled.memory_analysis()` gives the scratch
(`temp_size_in_bytes`) a program needs beyond its arguments and outputs. Compiling a program that
would not fit is free, so these figures go past what the device could hold, and show why.

The backward pass is where the difference is largest. Naive attention (and XLA's path) keeps the
(B, N, T, S) softmax weights from the forward pass, because the gradient of softmax needs them.
A flash kernel keeps one float32 log-sum-exp per query row, O(T), and recomputes the scores tile
by tile in the backward pass (Dao et al. 2022, "FlashAttention", arXiv:2205.14135, section 3.1).
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
    """Scratch, argument and output bytes of each implementation's compiled program as T = S grows.

    Each point is a compile from `jax.ShapeDtypeStruct`s (`runs.run(..., program=True, tuned=True)`): nothing
    is allocated or run. Tuned, as a timed program is: on the H200 autotuning picks cuBLAS for naive's
    matmuls at long T, which doubles its scratch (4.3 GB against 2.2 GB at B4 T4096 float32). With `backward`, the program is one forward and one backward pass
    (`compiled.forward_backward`), whose scratch holds what the gradient needs.
    """
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
    """True when backends `a` and `b` compile to the same optimised program at `shape` (compile only).

    `sdpa_auto` (implementation=None) against `sdpa_xla` shows what JAX picks: identical text
    means None ran XLA's own code on this machine. Both compiled without autotuning, as a run that only
    checks them is (compiled.CHECK_OPTIONS). The device worker keeps the answer (an entry point's kept result).
    """
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
