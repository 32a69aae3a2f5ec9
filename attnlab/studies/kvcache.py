"""MHA, GQA and MQA: the same attention with fewer key/value heads, and what that saves at decode.

A model generating one token at a time keeps every past token's keys and values (the KV cache) in every layer:

    bytes per token = 2 (K and V) · kv_heads · head_dim · itemsize · layers

so the cache shrinks with kv_heads alone: grouped-query attention (GQA, K < N query heads share each KV head;
Ainslie et al. 2023, arXiv:2305.13245) divides it by N/K, multi-query attention (MQA, K = 1; Shazeer 2019,
arXiv:1911.02150) by N. The output keeps its shape (B, T, N, H); only K and V, (B, S, K, H), get smaller.
A decode step (q_len = 1, kv_len = S) does little arithmetic and reads all of K and V: its time follows bytes.
"""

from __future__ import annotations

import contextlib
import re

import pandas as pd

from attnlab import device
from attnlab.admission import DeviceBusy, OverBudget
from attnlab.backends import get
from attnlab.measure import compiled, runs
from attnlab.shapes import AttentionShape


# --------------------------------------------------------------------------------------------
# the three variants of one shape
# --------------------------------------------------------------------------------------------
def gqa_kv_heads(heads: int, preferred: int | None = None) -> int | None:
    """A kv_heads that makes GQA (1 < kv_heads < heads, dividing heads), or None when `heads` has none:
    `preferred` (the learner's kv_heads) if it qualifies, else the divisor nearest heads/4, larger on ties."""
    candidates = [d for d in range(2, heads) if heads % d == 0]
    if not candidates:
        return None
    if preferred in candidates:
        return preferred
    return min(candidates, key=lambda d: (abs(d - heads / 4), -d))


def variants(shape: AttentionShape) -> list[AttentionShape]:
    """`shape` as MHA (kv_heads = heads), GQA (see gqa_kv_heads) and MQA (kv_heads = 1), named by `.variant`;
    those that coincide are listed once (1 head: MHA only; 2 or a prime number: MHA and MQA)."""
    wanted = [shape.heads, gqa_kv_heads(shape.heads, shape.kv_heads), 1]
    kv_heads = list(dict.fromkeys(k for k in wanted if k is not None))
    return [shape.replace(kv_heads=k) for k in kv_heads]


# --------------------------------------------------------------------------------------------
# KV-cache size
# --------------------------------------------------------------------------------------------
def bytes_per_token(kv_heads: int, head_dim: int, itemsize: int, layers: int = 1) -> int:
    """Cache bytes one token of context costs: 2 (K and V) · kv_heads · head_dim · itemsize · layers."""
    return 2 * kv_heads * head_dim * itemsize * layers


def cache_bytes(shape: AttentionShape, context_len: int, layers: int, sequences: int = 1) -> int:
    """The whole KV cache for `sequences` sequences of `context_len` tokens in `layers` layers."""
    return bytes_per_token(shape.kv_heads, shape.head_dim, shape.itemsize, layers) * context_len * sequences


def cache_table(shape: AttentionShape, context_len: int, layers: int) -> pd.DataFrame:
    """One row per variant: KV heads, bytes per token, cache per sequence and for the batch, vs MHA."""
    rows = []
    mha = cache_bytes(shape.replace(kv_heads=shape.heads), context_len, layers)
    for v in variants(shape):
        per_sequence = cache_bytes(v, context_len, layers)
        rows.append({
            "variant": v.variant,
            "kv_heads": v.kv_heads,
            "query heads per KV head": v.group_size,
            "bytes_per_token": bytes_per_token(v.kv_heads, v.head_dim, v.itemsize, layers),
            "context_len": context_len,
            "layers": layers,
            "dtype": v.dtype,
            "cache_bytes_per_sequence": per_sequence,
            "batch": v.batch,
            "cache_bytes_for_batch": cache_bytes(v, context_len, layers, sequences=v.batch),
            "fraction_of_mha": per_sequence / mha,
        })
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# same output shape, same answer
# --------------------------------------------------------------------------------------------
def output_checks(shape: AttentionShape, names: list[str]) -> pd.DataFrame:
    """Every variant of `shape` through each implementation: Q, K/V and output shapes and the output against
    float64 (on a slice if too big); all compile first, side by side, then run in one turn on the device."""
    info = device.info()
    compiled.compile_many([(n, v, False, False) for v in variants(shape) for n in names if get(n).unmet(v, info) is None])
    results, extra = [], []
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(runs.one_turn(variants(shape), names))
        except (DeviceBusy, OverBudget):
            pass  # then each run asks for a turn of its own and says why in its rows
        for v in variants(shape):
            for r in runs.run(v, names, accuracy=True):
                results.append(r)
                extra.append({"variant": v.variant, "q shape": str(v.q_shape()), "k, v shape": str(v.kv_shape())})
    return runs.to_frame(results, extra)


# --------------------------------------------------------------------------------------------
# the decode step
# --------------------------------------------------------------------------------------------
def decode_shape(shape: AttentionShape, kv_len: int) -> AttentionShape:
    """One new token's attention over a cache of `kv_len` tokens: q_len = 1, not causal, as the one query is
    the newest position and sees every cached key (causal on 1 x S scores would show it only the first)."""
    return shape.replace(q_len=1, kv_len=kv_len, causal=False)


def kv_read_bytes(shape: AttentionShape) -> int:
    """Bytes of K and V one attention call reads at least once: 2 · B · S · K · H · itemsize."""
    return 2 * shape.batch * shape.kv_len * shape.kv_heads * shape.head_dim * shape.itemsize


def decode_table(results: list[runs.Result]) -> pd.DataFrame:
    """Timed decode steps as a table, with the variant, the K and V bytes read and the GB/s achieved: those
    bytes over the best time there is (device time on a GPU, else throughput), against the bandwidth bound."""
    extra = []
    for r in results:
        t = r.timing
        ms = (t.device_ms or t.throughput_ms) if t else None
        read = kv_read_bytes(r.shape)
        extra.append({"variant": r.shape.variant, "kv_read_bytes": read,
                      "kv_read_gb_per_s": read / (ms * 1e-3) / 1e9 if ms and r.ok else None})
    return runs.to_frame(results, extra)


# --------------------------------------------------------------------------------------------
# the decode study a GPU ships (`python -m attnlab decode --out attnlab/shipped/h200_decode.json`)
# --------------------------------------------------------------------------------------------
SHIPPED = "h200_decode"  # attnlab/shipped/h200_decode.json
STUDY_IMPLS = ("naive", "sdpa_xla", "sdpa_cudnn")
STUDY_KV_LENS = (4096, 16384, 65536, 131072)


def study_bases() -> dict[str, AttentionShape]:
    """The shapes whose variants the study times: the lab's default, and Llama 3 8B's attention (32 query
    heads, head_dim 128) at batch 8 in bfloat16, as a server decoding 8 requests would."""
    from attnlab import presets

    return {"the lab's default shape": AttentionShape(),
            "Llama 3 8B heads, batch 8": presets.apply("Llama 3 8B", AttentionShape(batch=8, dtype="bfloat16"))}


def decode_study(kv_lens=STUDY_KV_LENS, names=STUDY_IMPLS, bases: dict[str, AttentionShape] | None = None,
                 log=print) -> list[dict]:
    """One timed decode step per (base, cache length, variant, implementation), as JSON-able rows."""
    rows = []
    for label, base in (bases or study_bases()).items():
        for kv_len in kv_lens:
            results = [r for v in variants(base) for r in runs.run(decode_shape(v, kv_len), list(names),
                                                                  accuracy=False, timed=True)]
            df = decode_table(results).assign(base=label)
            for r in df.to_dict("records"):
                ms = r.get("device_ms") or r.get("throughput_ms")
                log(f"  {label:<28} {r['shape']:<44} {r['implementation']:<11} {r['status']:<12} "
                    + (f"{ms * 1e3:9.1f} µs {r['kv_read_gb_per_s']:8.1f} GB/s" if r["status"] == runs.OK
                       else str(r["reason"])[:60]))
                rows.append({k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()})
    return rows


def layout_copy_ms(kernels: str | None) -> float:
    """Milliseconds a program's kernels spent in layout transposes (copies of a whole tensor into the
    order a matmul wants), read from a row's kernels column ('transpose (layout change) (...) 135.4µs; ...')."""
    return sum(float(us) for us in re.findall(r"transpose \(layout change\)[^;]*?([\d.]+)µs", kernels or "")) / 1e3


def savings(steps: pd.DataFrame) -> pd.DataFrame:
    """Each variant's decode step against MHA's, per implementation, from timed rows of one cache length:
    K and V bytes read ('bytes_fewer' than MHA), device time ('faster'), GB/s, and ms of layout copies."""
    ok = steps[steps["status"] == runs.OK].copy()
    ok["ms"] = ok["device_ms"].fillna(ok["throughput_ms"])
    mha = ok[ok["variant"] == "MHA"].set_index("implementation")
    ok["bytes_fewer"] = ok["implementation"].map(mha["kv_read_bytes"]) / ok["kv_read_bytes"]
    ok["faster"] = ok["implementation"].map(mha["ms"]) / ok["ms"]
    ok["layout_copy_ms"] = ok["kernels"].map(layout_copy_ms) if "kernels" in ok else 0.0
    return ok[["implementation", "variant", "kv_heads", "kv_read_bytes", "ms", "bytes_fewer", "faster",
               "kv_read_gb_per_s", "layout_copy_ms"]].reset_index(drop=True)


def jumps(rows, factor: float = 1.5) -> list[dict]:
    """Where a decode-study line (implementation, variant) grows over `factor` times faster than the cache,
    with the longer step's layout copies (a changed program explains a jump that the bytes do not)."""
    found = []
    for (impl, variant), part in rows.groupby(["implementation", "variant"], sort=False):
        part = part.sort_values("kv_len")
        for (_, a), (_, b) in zip(part.iloc[:-1].iterrows(), part.iloc[1:].iterrows(), strict=True):
            grew, longer = b["device_ms"] / a["device_ms"], b["kv_len"] / a["kv_len"]
            if grew > factor * longer:
                found.append({"implementation": impl, "variant": variant, "from": int(a["kv_len"]),
                              "to": int(b["kv_len"]), "grew": grew, "longer": longer,
                              "copy_before_ms": layout_copy_ms(a.get("kernels")), "copy_after_ms": layout_copy_ms(b.get("kernels")),
                              "kernels_before": int(a.get("kernel_count") or 0), "kernels_after": int(b.get("kernel_count") or 0)})
    return found
