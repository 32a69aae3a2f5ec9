"""Measurements shipped from a real GPU, for learners who have none.

Each `<name>.json` in this folder is the output of `python -m attnlab bench --out ...` on that GPU (see
suite.py), with its environment: device, compute capability, driver, jax/jaxlib/cuDNN/TE
versions and date. Pages show these beside live numbers, always labelled as measured there.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources

import pandas as pd

from attnlab import kernels


def available() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__package__).iterdir() if p.name.endswith(".json"))


@functools.lru_cache(maxsize=8)
def load(name: str = "h200") -> dict | None:
    """The whole results dict, or None if no such file ships."""
    try:
        text = resources.files(__package__).joinpath(f"{name}.json").read_text()
    except FileNotFoundError:
        return None
    from attnlab.shipped import refusals  # one memory rule for every refusal, whichever version wrote it

    return refusals.relabel(json.loads(text))


def label(name: str = "h200") -> str:
    """'Measured on NVIDIA H200 (compute capability 9.0), driver ..., jax ..., cuDNN ..., on DATE'."""
    r = load(name)
    if r is None:
        return f"no reference results for {name!r} ship with this version"
    e = r["environment"]
    return (f"Measured on {e['device']} (compute capability {e['compute_capability']}), driver {e.get('driver')}, "
            f"jax {e['jax']}, cuDNN {e['cudnn']}, TransformerEngine {e.get('transformer_engine') or 'absent'}, on {e['date']}")


def frame(table: str, name: str = "h200") -> pd.DataFrame:
    """One table of the results (e.g. 'default', 'seq_sweep', 'long_context', 'fp8_attention'): a
    copy, so a caller may change it. Built once per loaded file (8 ms for the long-context table)."""
    r = load(name)
    made = _FRAMES.get((table, name))
    if made is None or made[0] is not r:  # first time, or another file was loaded under this name
        made = _FRAMES[(table, name)] = (r, _build(r, table))
    return made[1].copy()


_FRAMES: dict[tuple[str, str], tuple[dict | None, pd.DataFrame]] = {}


def _build(r: dict | None, table: str) -> pd.DataFrame:
    if r is None:
        return pd.DataFrame()
    rows = r.get("tables", {}).get(table, r.get(table))
    if rows is None:
        return pd.DataFrame()
    df = pd.DataFrame(rows if isinstance(rows, list) else [rows])
    if "kernels" in df:  # raw names as measured -> the same words live rows carry (presentation only)
        df["kernels"] = df["kernels"].map(_in_words)
    fp8_peak = ((r.get("environment") or {}).get("peak") or {}).get("fp8_tflops")
    if {"pct_of_peak", "implementation"} <= set(df.columns) and fp8_peak:
        df["pct_of_peak"] = _fp8_share(df, fp8_peak)
    return df


def _fp8_share(df: pd.DataFrame, fp8_peak: float) -> pd.Series:
    """% of peak with the lab's one rule: an FP8 kernel's TFLOP/s are a share of the FP8 peak (files made
    before the rule measured every bfloat16 row against the bf16 peak; the TFLOP/s themselves are as measured)."""
    from attnlab.backends import REGISTRY

    fp8 = df["implementation"].map(lambda n: n in REGISTRY and REGISTRY[n].fp8)
    best = df["device_tflops"].fillna(df["tflops"]) if "device_tflops" in df else df.get("tflops")
    return df["pct_of_peak"].where(~fp8, 100 * best / fp8_peak)


def _in_words(text):
    """'name 3.9µs; name 1.2µs' with each name as `kernels.describe` puts it; anything else unchanged."""
    if not isinstance(text, str) or not text:
        return text
    parts = [re.fullmatch(r"(.*?) ([\d.]+µs)", p.strip()) for p in text.split(";")]
    if not all(parts):
        return text
    # a name already in words ends with ")": 'matmul (XLA fusion) (gemm_fusion_dot)'
    return "; ".join(f"{m[1] if m[1].endswith(')') else kernels.describe(m[1])} {m[2]}" for m in parts)
