"""What the arrays of one attention call look like, and where they live.

    the layout table      Q, K, V, the output and naive attention's (B, N, T, S) scores: shape, dtype, layout
    device placement      which device the live arrays sit on (`jax.Array.devices()`)

Layout letters are `jax.nn.dot_product_attention`'s: Q is BTNH, K and V are BSKH, and the scores are BNTS.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.measure import runs
from attnlab.shapes import DTYPES, AttentionShape, format_bytes

LETTERS = {
    "B": ("batch", "batch size: independent sequences in one call"),
    "T": ("q_len", "length of the query (target) sequence"),
    "S": ("kv_len", "length of the key/value (source) sequence"),
    "N": ("heads", "query heads"),
    "K": ("kv_heads", "key/value heads (N for MHA, fewer for GQA, 1 for MQA)"),
    "H": ("head_dim", "size of each head's vectors (d in the formula)"),
}


# --------------------------------------------------------------------------------------------
# the layout table
# --------------------------------------------------------------------------------------------
def letters(shape: AttentionShape) -> pd.DataFrame:
    """One row per layout letter: its shape field, what it means, and its value at `shape`."""
    return pd.DataFrame([
        {"letter": letter, "field": field, "meaning": meaning, "value": getattr(shape, field)}
        for letter, (field, meaning) in LETTERS.items()
    ])


def layout_table(shape: AttentionShape) -> pd.DataFrame:
    """Q, K, V, the output and naive attention's scores at `shape`: shape, dtype, layout, elements, bytes; the
    scores are float32 whatever the input dtype (naive attention and XLA's path accumulate in float32)."""
    B, T, S, N, K, H = shape.batch, shape.q_len, shape.kv_len, shape.heads, shape.kv_heads, shape.head_dim
    arrays = [
        ("Q (query)", (B, T, N, H), shape.dtype, "BTNH", "input"),
        ("K (key)", (B, S, K, H), shape.dtype, "BSKH", "input"),
        ("V (value)", (B, S, K, H), shape.dtype, "BSKH", "input"),
        ("output", (B, T, N, H), shape.dtype, "BTNH", "output, same layout as Q"),
        ("scores Q·Kᵀ (naive only)", (B, N, T, S), "float32", "BNTS", "materialised by naive attention"),
    ]
    rows = []
    for name, dims, dtype, layout, role in arrays:
        elements = int(np.prod(dims, dtype=np.int64))
        nbytes = elements * DTYPES[dtype].itemsize
        rows.append({"array": name, "shape": str(dims), "dtype": dtype, "layout": layout, "role": role,
                     "elements": elements, "bytes": nbytes, "size": format_bytes(nbytes)})
    return pd.DataFrame(rows)


def placement(shape: AttentionShape, seed: int = 0) -> pd.DataFrame:
    """Make Q, K, V for `shape` and report where JAX put them (`jax.Array.devices()`): device, platform,
    sharding, nbytes. Without a `device=` they land on the default device (the first GPU, or the CPU)."""
    with runs.inputs(shape, seed) as (q, k, v):
        return pd.DataFrame([_where(name, x) for name, x in (("Q", q), ("K", k), ("V", v))])


def _where(name: str, x) -> dict:
    """One array's placement as a table row."""
    devs = sorted(x.devices(), key=lambda d: d.id)
    return {
        "array": name,
        "shape": str(tuple(x.shape)),
        "dtype": str(x.dtype),
        "devices()": ", ".join(str(d) for d in devs),
        "platform": ", ".join(sorted({d.platform for d in devs})),
        "device kind": ", ".join(sorted({d.device_kind for d in devs})),
        "sharding": type(x.sharding).__name__,
        "committed": bool(getattr(x, "committed", False)),
        "nbytes": int(x.nbytes),
    }
