"""Multi-device checks for `attnlab.studies.context_parallel`, run in a subprocess with virtual CPU devices.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=cpu python tests/context_parallel_check.py 4

The device count is fixed when JAX starts, so `test_context_parallel.py` runs this file in its own
process and the rest of the suite keeps seeing one device. Prints one 'ok ...' line per check and exits
non-zero at the first mismatch. Pass `--quick` to run only the causal ring and all-gather checks.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from attnlab.studies import context_parallel as cp  # noqa: E402


def reference_attention(q, k, v, causal: bool) -> np.ndarray:
    """float64 NumPy: softmax(Q·Kᵀ/sqrt(H))·V, KV heads repeated for GQA, causal top-left."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    k, v = np.repeat(k, N // K, axis=2), np.repeat(v, N // K, axis=2)  # (B, S, N, H)
    scores = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(H)
    if causal:
        scores = np.where(np.tril(np.ones((T, S), dtype=bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", weights, v)


def main(devices: int, quick: bool) -> None:
    assert len(jax.devices()) >= devices, f"jax sees {len(jax.devices())} devices, need {devices}"
    mesh = cp.sequence_mesh(devices)
    B, T, N, K, H = 2, 32 * devices, 4, 2, 16  # GQA: 2 query heads per KV head
    kq, kk, kv = jax.random.split(jax.random.key(devices), 3)
    q = jax.random.normal(kq, (B, T, N, H), jnp.float32)
    k = jax.random.normal(kk, (B, T, K, H), jnp.float32)
    v = jax.random.normal(kv, (B, T, K, H), jnp.float32)

    order = cp.zigzag_order(T, devices)
    assert sorted(order.tolist()) == list(range(T)), "zig-zag order is a permutation"
    assert np.array_equal(np.asarray(cp.from_zigzag(cp.to_zigzag(q, devices), devices)), np.asarray(q))
    print(f"ok P={devices} zigzag round-trip")

    cases = [  # (causal, layout, method, overlap, steps[, extra options: grouped, fence])
        (True, "zigzag", "ring", True, "switch"),
        (True, "zigzag", "all_gather", True, "switch"),
        (True, "zigzag", "ring", True, "uniform"),
    ]
    if not quick:
        cases = [
            (False, "contiguous", "ring", True, "switch"),
            (False, "contiguous", "ring", False, "switch"),
            (False, "contiguous", "all_gather", True, "switch"),
            *cases,
            (True, "zigzag", "ring", False, "switch"),
            (True, "zigzag", "ring", False, "uniform"),
            (True, "contiguous", "ring", True, "switch"),
            (True, "contiguous", "ring", False, "switch"),
            (True, "contiguous", "all_gather", True, "switch"),
            (False, "contiguous", "ring", True, "switch", {"grouped": True}),
            (True, "zigzag", "ring", True, "switch", {"grouped": True}),
            (True, "zigzag", "ring", True, "uniform", {"grouped": True}),
            (False, "contiguous", "ring", True, "switch", {"fence": False}),
            (True, "zigzag", "ring", True, "switch", {"fence": False}),
            (True, "zigzag", "ring", True, "uniform", {"fence": False}),
        ]
    for causal, layout, method, overlap, steps, *extra in cases:
        extra = extra[0] if extra else {}
        zig = causal and layout == "zigzag"
        arrange = (lambda x: cp.to_zigzag(x, devices)) if zig else (lambda x: x)
        fn = jax.jit(lambda q, k, v, c=causal, lay=layout, m=method, o=overlap, st=steps, ex=extra:
                     cp.context_parallel_attention(q, k, v, mesh, causal=c, layout=lay, method=m, overlap=o,
                                                   block=cp.xla_block, steps=st, **ex))
        out = fn(arrange(q), arrange(k), arrange(v))
        fenced = method == "ring" and overlap and extra.get("fence", True)  # the default ring is fenced
        text = fn.lower(q, k, v).as_text()  # the fence is in the program XLA gets (kept until scheduled)
        assert ("optimization_barrier" in text) == fenced, f"fenced={fenced} but the program disagrees"
        out = np.asarray(cp.from_zigzag(out, devices) if zig else out)
        single = np.asarray(jax.nn.dot_product_attention(q, k, v, is_causal=causal))
        ref = reference_attention(q, k, v, causal)
        name = (f"P={devices} causal={causal} layout={layout} method={method} overlap={overlap} steps={steps}"
                + "".join(f" {option}={value}" for option, value in extra.items()))
        err_ref, err_single = np.abs(out - ref).max(), np.abs(out - single).max()
        assert err_ref < 2e-5 and err_single < 2e-5, f"{name}: max error {err_ref:.2e} vs float64, {err_single:.2e}"
        print(f"ok {name} max_err_vs_float64={err_ref:.1e} vs_single_device={err_single:.1e}")


if __name__ == "__main__":
    main(int(sys.argv[1]), quick="--quick" in sys.argv)
