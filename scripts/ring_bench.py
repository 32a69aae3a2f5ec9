"""Ring attention vs one GPU: speed-up, efficiency, crossover length, bytes per step, per-step timeline.

    PYTHONPATH=. python3 scripts/ring_bench.py --out DIR                    # all visible GPUs
    PYTHONPATH=. python3 scripts/ring_bench.py --out DIR --devices 4
    XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu \\
        PYTHONPATH=. python3 scripts/ring_bench.py --smoke --out /tmp/x    # tiny shapes on CPU

Writes DIR/ring_h200x{P}.json (environment, tables) and prints a short table last. Result keys name the
variant: "ring" leaves the order of each step's transfer and attention to XLA (fence=False), "ring_fenced"
is `context_parallel`'s default (the received block is fenced behind the step's result); the other rings
("ring_uniform", "ring_no_overlap", "ring_unbalanced") are unfenced, "ring_uniform_fenced" fenced. The ring overlaps a
step's K/V transfer with its attention only if XLA schedules the collective-permute asynchronously around
the cuDNN call; the latency-hiding scheduler does that, so its flag is set before jax is imported (each flag
is first tried in a subprocess, since an unknown XLA flag aborts the process).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# the latency-hiding scheduler overlaps a collective with compute; by default only one collective at a
# time, and a ring step sends two (K and V): the compiled program showed V's send run synchronously
XLA_OVERLAP_FLAGS = ["--xla_gpu_enable_latency_hiding_scheduler=true",
                     "--xla_gpu_experimental_parallel_collective_overlap_limit=2"]


def _accepted(flag: str) -> bool:
    """Whether this jaxlib knows an XLA flag (an unknown one kills the process that parses it)."""
    env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
    probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], env=env, capture_output=True)
    return probe.returncode == 0


def set_xla_flags(extra: list[str]) -> list[str]:
    named = {f.split("=")[0] for f in extra}  # an extra flag replaces the bench's own of the same name
    wanted = [f for f in XLA_OVERLAP_FLAGS if f.split("=")[0] not in named] + extra
    flags = [f for f in wanted if f.split("=")[0] not in os.environ.get("XLA_FLAGS", "") and _accepted(f)]
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *flags]).strip()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast on shared hosts
    return flags


if __name__ == "__main__":  # flags must be set before jax is imported
    _extra = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--xla-flag=")]
    FLAGS_SET = set_xla_flags(_extra)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

from attnlab.studies import context_parallel as cp  # noqa: E402
from attnlab.studies import ring_schedule as rs  # noqa: E402

T0 = time.perf_counter()


GROUPED = {"non_causal": dict(causal=False), "causal": dict(causal=True),
           "causal_uniform": dict(causal=True, steps="uniform")}


def probe_grouped(mesh_devices: int, T: int, B: int, N: int, K: int, H: int) -> dict[str, str]:
    """Compile each grouped ring in a child process first: on jax 0.11.2 one aborted XLA's compiler
    (std::out_of_range), which would take the whole benchmark with it. 'ok', or why not."""
    out = {}
    for name in GROUPED:
        code = (f"import sys; sys.argv=['x']; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                f"import ring_bench as rb; rb.compile_grouped({name!r}, {mesh_devices}, {T}, {B}, {N}, {K}, {H})")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        out[name] = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: {tail[:200]}"
    return out


def compile_grouped(name: str, P: int, T: int, B: int, N: int, K: int, H: int) -> None:
    mesh = cp.sequence_mesh(P)
    seq = NamedSharding(mesh, PartitionSpec(None, "seq", None, None))
    f = jax.jit(lambda q, k, v: cp.context_parallel_attention(q, k, v, mesh, grouped=True, **GROUPED[name]))
    q = jax.ShapeDtypeStruct((B, T, N, H), jnp.bfloat16, sharding=seq)
    kv = jax.ShapeDtypeStruct((B, T, K, H), jnp.bfloat16, sharding=seq)
    f.lower(q, kv, kv).compile()


def grouped_variants(ring, causal: bool, probes: dict[str, str]) -> dict:
    """The grouped rings whose probe compiled, under their result keys."""
    if not causal:
        return {"ring_grouped": ring(False, grouped=True)} if probes.get("non_causal") == "ok" else {}
    out = {"ring_grouped": ring(True, grouped=True)} if probes.get("causal") == "ok" else {}
    if probes.get("causal_uniform") == "ok":
        out["ring_uniform_grouped"] = ring(True, steps="uniform", grouped=True)
    return out


def clock_ms(f, *args, budget_s: float = 2.0, rounds: int = 5) -> float:
    """Median per-call device time: calls queued back to back, one block at the end of each round."""
    jax.block_until_ready(f(*args))  # compile
    start = time.perf_counter()
    jax.block_until_ready(f(*args))  # warm
    calls = max(1, min(50, int(0.02 / max(time.perf_counter() - start, 1e-6))))  # ~20 ms a round
    if jax.default_backend() == "cpu":  # queued collectives can deadlock the CPU runtime's thread pool
        calls = 1
    times = []
    deadline = time.perf_counter() + budget_s
    while len(times) < rounds and (len(times) < 2 or time.perf_counter() < deadline):
        start = time.perf_counter()
        out = [f(*args) for _ in range(calls)]
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / calls)
    return 1e3 * statistics.median(times)


def interleaved_ms(fns: dict, rounds: int = 7, round_s: float = 0.1) -> dict[str, list[float]]:
    """Per-call ms of each (f, args) in `fns`, measured in rounds that visit every function in turn.

    One GPU's clock drifts with temperature and power by several per cent over a run, so a speed-up
    is taken per round (same moment, same clock state) and its median reported, rather than the
    ratio of medians measured minutes apart."""
    calls = {}
    for label, (f, args) in fns.items():
        jax.block_until_ready(f(*args))  # compile
        start = time.perf_counter()
        jax.block_until_ready(f(*args))  # warm
        one = max(time.perf_counter() - start, 1e-6)
        calls[label] = 1 if jax.default_backend() == "cpu" else max(1, min(50, int(round_s / one)))
    times = {label: [] for label in fns}
    for _ in range(rounds):
        for label, (f, args) in fns.items():
            # untimed first: a GPU left idle while the others ran has dropped its clock (the ring's second
            # GPU idles during the one-GPU runs); ~0.1 s of work brings it back before the timed calls
            end = time.perf_counter() + (0.1 if jax.default_backend() == "gpu" else 0.0)
            jax.block_until_ready(f(*args))
            while time.perf_counter() < end:
                jax.block_until_ready(f(*args))
            start = time.perf_counter()
            out = [f(*args) for _ in range(calls[label])]
            jax.block_until_ready(out)
            times[label].append(1e3 * (time.perf_counter() - start) / calls[label])
            del out
    return times


def one_device_attention(gpu: bool):
    impl = "cudnn" if gpu else "xla"
    return lambda causal: jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal,
                                                                               implementation=impl))


def random_qkv(shape_q, shape_kv, dtype, sharding, seed=0):
    make = jax.jit(lambda key, shape: jax.random.normal(key, shape, dtype), static_argnums=1,
                   out_shardings=sharding)
    keys = jax.random.split(jax.random.key(seed), 3)
    return make(keys[0], shape_q), make(keys[1], shape_kv), make(keys[2], shape_kv)


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--devices", type=int, default=None, help="ring size P (default: all visible)")
    parser.add_argument("--smoke", action="store_true", help="tiny float32 shapes, for CPU virtual devices")
    parser.add_argument("--lengths", type=int, nargs="*", default=None)
    parser.add_argument("--budget-s", type=float, default=200.0, help="stop starting new lengths after this")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per length")
    parser.add_argument("--xla-flag", action="append", default=[], dest="xla_flag",
                        help="an extra XLA flag for this run, e.g. --xla-flag=--xla_gpu_use_memcpy_local_p2p=true "
                             "(probed first; the '=' form is required)")
    parser.add_argument("--grouped", action="store_true",
                        help="also measure rings whose step's send and attention share an XLA scheduling group; "
                             "on 2 H200s with jax 0.11.2 they compiled in a child process yet aborted XLA in the "
                             "benchmark (std::out_of_range), taking the run with them")
    parser.add_argument("--tag", default="", help="suffix of the output file name, e.g. _memcpy")
    args = parser.parse_args()

    mesh = cp.sequence_mesh(args.devices)
    P = mesh.shape["seq"]
    gpu = jax.default_backend() == "gpu"
    block = cp.default_block()
    if args.smoke:
        B, N, K, H, dtype, lengths = 1, 4, 4, 16, jnp.float32, args.lengths or [16 * P, 64 * P]
    else:
        B, N, K, H, dtype, lengths = 1, 16, 16, 128, jnp.bfloat16, args.lengths or [4096, 8192, 16384, 32768, 65536]
    itemsize = jnp.dtype(dtype).itemsize
    probes = probe_grouped(P, lengths[0], B, N, K, H) if args.grouped else {}
    one = one_device_attention(gpu)
    seq = NamedSharding(mesh, PartitionSpec(None, "seq", None, None))
    dev0 = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    env = {"device_kind": jax.devices()[0].device_kind, "device_count": P, "backend": jax.default_backend(),
           "jax_version": jax.__version__, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "xla_flags": os.environ.get("XLA_FLAGS", ""), "flags_set_by_bench": FLAGS_SET,
           "block": block.__name__, "shape": {"B": B, "N": N, "K": K, "H": H, "dtype": jnp.dtype(dtype).name}}

    def ring(causal, layout="zigzag", method="ring", overlap=True, steps="switch", grouped=False, fence=False):
        return jax.jit(lambda q, k, v: cp.context_parallel_attention(q, k, v, mesh, causal=causal, layout=layout,
                                                                     method=method, overlap=overlap, block=block,
                                                                     steps=steps, grouped=grouped, fence=fence))

    # ---- correctness at one shape: ring vs one device (relative error), and the block's lse vs float32 XLA
    T = lengths[0]
    q, k, v = random_qkv((B, T, N, H), (B, T, K, H), dtype, dev0, seed=1)
    correctness = {"T": T}
    for causal in (False, True):
        ref = one(causal)(q, k, v)
        arranged = [cp.to_zigzag(x, P) if causal else x for x in (q, k, v)]
        out = ring(causal)(*(jax.device_put(x, seq) for x in arranged))
        out = cp.from_zigzag(out, P) if causal else out
        correctness["causal" if causal else "non_causal"] = rel_err(out, ref)
    small = [x[:, : min(T, 1024)] for x in (q, k, v)]
    lse_block = jax.jit(block, static_argnums=3)(*small, True)[1]
    lse_f32 = cp.xla_block(*(x.astype(jnp.float32) for x in small), True)[1]
    correctness["block_lse_max_abs_err_vs_f32"] = float(jnp.max(jnp.abs(lse_block - lse_f32)))
    del q, k, v

    # ---- speed: one device vs ring (overlap, no overlap) vs all-gather
    rows = []
    for T in lengths:
        if time.perf_counter() - T0 > args.budget_s:
            rows.append({"T": T, "skipped": "time budget"})
            continue
        q1, k1, v1 = random_qkv((B, T, N, H), (B, T, K, H), dtype, dev0)
        qs, ks, vs = random_qkv((B, T, N, H), (B, T, K, H), dtype, seq)
        row = {"T": T, "bytes_per_step": rs.bytes_per_step(B, T, K, H, P, itemsize)}
        for name, causal, variants in [
            ("non_causal", False, {"ring": ring(False), **grouped_variants(ring, False, probes),
                                   "ring_fenced": ring(False, fence=True),
                                   "ring_no_overlap": ring(False, overlap=False),
                                   "all_gather": ring(False, method="all_gather")}),
            ("causal", True, {"ring": ring(True), **grouped_variants(ring, True, probes),
                              "ring_fenced": ring(True, fence=True),
                              "ring_uniform": ring(True, steps="uniform"),
                              "ring_uniform_fenced": ring(True, steps="uniform", fence=True),
                              "ring_no_overlap": ring(True, overlap=False),
                              "all_gather": ring(True, method="all_gather"),
                              "ring_unbalanced": ring(True, layout="contiguous")}),
        ]:
            fns = {"one_device": (one(causal), (q1, k1, v1)), **{k: (f, (qs, ks, vs)) for k, f in variants.items()}}
            times = interleaved_ms(fns, rounds=args.rounds)
            base = times.pop("one_device")
            row[f"{name}_one_device_ms"] = statistics.median(base)
            row[f"{name}_one_device_spread"] = (max(base) - min(base)) / statistics.median(base)
            for label, t in times.items():
                ratios = [b / x for b, x in zip(base, t, strict=True)]
                row[f"{name}_{label}_ms"] = statistics.median(t)
                row[f"{name}_{label}_speedup"] = statistics.median(ratios)
                row[f"{name}_{label}_speedup_range"] = (min(ratios), max(ratios))
                row[f"{name}_{label}_efficiency"] = statistics.median(ratios) / P
        rows.append(row)
        del q1, k1, v1, qs, ks, vs

    measured = [r for r in rows if "skipped" not in r]
    crossover = {}
    for key in ("non_causal_ring", "non_causal_ring_grouped", "non_causal_ring_fenced", "causal_ring",
                "causal_ring_grouped", "causal_ring_fenced", "causal_ring_uniform", "causal_ring_uniform_grouped",
                "causal_ring_uniform_fenced", "causal_ring_unbalanced", "non_causal_all_gather"):
        beats = [r["T"] for r in measured if r.get(f"{key}_speedup", 0) > 1]
        crossover[key] = min(beats) if beats else None

    # ---- per-step timeline at the longest measured length: one step's compute, one send, the whole ring
    T = max(r["T"] for r in measured)
    timeline = step_timeline(T, B, N, K, H, dtype, P, mesh, block, seq, dev0, measured)

    schedule = {name: program_order(f, T, B, N, K, H, dtype, seq, args.out / f"ring_hlo_{name}{args.tag}.txt")
                for name, f in (("non_causal", ring(False)), ("causal", ring(True)),
                                ("causal_uniform", ring(True, steps="uniform")),
                                ("non_causal_fenced", ring(False, fence=True)),
                                ("causal_fenced", ring(True, fence=True)),
                                ("causal_uniform_fenced", ring(True, steps="uniform", fence=True)),
                                *((f"{k}_grouped", ring(**GROUPED[k], grouped=True)) for k, v in probes.items()
                                  if v == "ok"))}
    result = {"environment": env, "grouped_probes": probes, "correctness_rel_err": correctness, "results": rows, "crossover_T": crossover,
              "schedule": schedule,
              "timeline": timeline, "kernels": kernel_profile(ring(False), T, B, N, K, H, dtype, seq) if gpu else None,
              "wall_s": time.perf_counter() - T0}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"ring_h200x{P}{args.tag}.json"
    path.write_text(json.dumps(result, indent=2, default=str))

    print(f"{env['device_kind']} x{P}, jax {env['jax_version']}, block {env['block']}, flags {env['xla_flags']!r}")
    print(f"correctness (relative error vs one device at T={correctness['T']}): non-causal "
          f"{correctness['non_causal']:.1e}, causal {correctness['causal']:.1e}; block lse vs f32 "
          f"{correctness['block_lse_max_abs_err_vs_f32']:.1e}")
    for name, t in timeline.items():
        print(f"timeline {name} T={T}: step compute {t['step_compute_ms']}, send {t['send_ms']:.3f} ms "
              f"({t['send_GBps']:.0f} GB/s), ring {t['ring_ms']:.3f} vs no-overlap {t['ring_no_overlap_ms']:.3f} ms, "
              f"transfer hidden {t['transfer_hidden']:.0%} (by variant: "
              + ", ".join(f"{k} {v:.0%}" for k, v in t["transfer_hidden_by_variant"].items())
              + f"); one block with its log-sum-exp {t['block_with_lse_ms']:.3f} "
              f"ms vs without {t['block_without_lse_ms']:.3f} ms ({t['lse_cost']:+.1%})")
    print(f"crossover T (shortest where ring beats one device): {crossover}")
    print(f"grouped (XLA scheduling group per step) compiles: {probes}")
    for name, order in schedule.items():
        print(f"program order, {name}: " + " ".join(o.replace('custom_call_target=', '') for o in order)[:600])
    columns = {"non_causal": [("ring", "ring"), ("ring_fenced", "fence"), ("ring_grouped", "grp"),
                              ("ring_no_overlap", "no-ovl"), ("all_gather", "allgat")],
               "causal": [("ring", "ring"), ("ring_fenced", "fence"), ("ring_grouped", "grp"), ("ring_uniform", "unif"),
                          ("ring_uniform_fenced", "ufence"), ("ring_uniform_grouped", "ugrp"),
                          ("ring_no_overlap", "no-ovl"), ("all_gather", "allgat"), ("ring_unbalanced", "unbal")]}
    columns = {name: [(key, label) for key, label in cols if any(f"{name}_{key}_speedup" in r for r in measured)]
               for name, cols in columns.items()}  # only the variants this run measured
    print(f"{'T':>7} {'MiB/step':>8} | {'non-causal: 1dev ms':>19} " + " ".join(f"{lb:>6}" for _, lb in columns["non_causal"])
          + f" | {'causal: 1dev ms':>15} " + " ".join(f"{lb:>6}" for _, lb in columns["causal"])
          + "  (speed-ups: median over interleaved rounds)")
    for r in measured:
        cells = {name: " ".join(f"{r.get(f'{name}_{key}_speedup', float('nan')):>5.2f}x" for key, _ in cols)
                 for name, cols in columns.items()}
        print(f"{r['T']:>7} {r['bytes_per_step'] / 2**20:>8.1f} | {r['non_causal_one_device_ms']:>19.3f} "
              f"{cells['non_causal']} | {r['causal_one_device_ms']:>15.3f} {cells['causal']}")
    print(f"wrote {path} in {result['wall_s']:.0f} s")


def step_timeline(T, B, N, K, H, dtype, P, mesh, block, seq, dev0, measured) -> dict:
    """One ring step's pieces timed alone (compute on one device, one send over the ring), vs the whole ring."""
    row = next(r for r in measured if r["T"] == T)
    c = T // P  # tokens per device
    send = jax.jit(cp._shard_map(lambda k, v: jax.lax.ppermute((k, v), "seq", [(i, (i + 1) % P) for i in range(P)]),
                                 mesh=mesh, in_specs=(seq.spec, seq.spec), out_specs=(seq.spec, seq.spec),
                                 **cp._NO_CHECK))
    _, ks, vs = random_qkv((B, P, N, H), (B, T, K, H), dtype, seq)
    send_ms = clock_ms(send, ks, vs)
    q, k, v = random_qkv((B, c, N, H), (B, c, K, H), dtype, dev0)
    full = jax.jit(lambda q, k, v: block(q, k, v, False))
    diag = jax.jit(lambda q, k, v: block(q, k, v, True))
    half_q = jax.jit(lambda q, k, v: block(q[:, : c // 2], k, v, False))  # zig-zag: late chunk vs both
    o, lse = full(q, k, v)
    merge = jax.jit(cp.merge)
    o32 = o.astype(jnp.float32)
    gpu = jax.default_backend() == "gpu"
    plain = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="cudnn" if gpu else None))
    t = {k: statistics.median(v) for k, v in interleaved_ms({
        "full": (full, (q, k, v)), "plain": (plain, (q, k, v)), "diag": (diag, (q, k, v)),
        "half_q": (half_q, (q, k, v)), "merge": (merge, (o32, lse, o32, lse))}).items()}
    merge_ms = t["merge"]
    steps = {"non_causal": [t["full"]] * P, "causal": [t["diag"]] + [t["half_q"]] * (P - 1)}
    lse_cost = {"block_with_lse_ms": t["full"], "block_without_lse_ms": t["plain"],
                "lse_cost": t["full"] / t["plain"] - 1}
    out = {}
    for name, compute in steps.items():
        ring_ms, serial_ms = row[f"{name}_ring_ms"], row[f"{name}_ring_no_overlap_ms"]
        transfer_total = (P - 1) * send_ms
        out[name] = {
            "step_compute_ms": [round(x, 3) for x in compute], "merge_ms": merge_ms, "send_ms": send_ms,
            "send_GBps": rs.bytes_per_step(B, T, K, H, P, jnp.dtype(dtype).itemsize) / send_ms / 1e6,
            "steps": [{"step": s, "compute_ms": compute[s], "transfer_ms": send_ms if s < P - 1 else 0.0}
                      for s in range(P)],
            "sum_of_parts_serial_ms": sum(compute) + P * merge_ms + transfer_total,
            "ideal_overlap_ms": sum(compute) + P * merge_ms,
            "ring_ms": ring_ms, "ring_no_overlap_ms": serial_ms,
            "transfer_hidden": max(0.0, min(1.0, (serial_ms - ring_ms) / transfer_total)) if transfer_total else 1.0,
            "transfer_hidden_by_variant": {  # every overlapped ring measured at this length
                key: max(0.0, min(1.0, (serial_ms - row[f"{name}_{key}_ms"]) / transfer_total)) if transfer_total else 1.0
                for key in ("ring", "ring_fenced", "ring_uniform", "ring_uniform_fenced") if f"{name}_{key}_ms" in row},
            **lse_cost,
        }
    return out


def program_order(f, T, B, N, K, H, dtype, seq, path: Path) -> list[str]:
    """The compiled program's order of transfers and attention calls (does a send start before the
    step's attention and finish after it?); the whole optimised HLO is written to `path`."""
    import re

    q = jax.ShapeDtypeStruct((B, T, N, H), dtype, sharding=seq)
    kv = jax.ShapeDtypeStruct((B, T, K, H), dtype, sharding=seq)
    text = f.lower(q, kv, kv).compile().as_text() or ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    entry = text[text.rfind("ENTRY"):]
    opcodes = r"collective-permute-start|collective-permute-done|collective-permute|all-gather-start|" \
              r"all-gather-done|all-gather|custom-call|conditional|fusion|copy|opt-barrier"
    order = []
    for line in entry.splitlines():  # one instruction per line: '%name = shape opcode(operands), attributes'
        found = re.search(rf"=.*?\s({opcodes})\(", line)
        if not found:
            continue
        target = re.search(r'custom_call_target="([^"]+)"', line)
        order.append(target.group(1) if found.group(1) == "custom-call" and target else found.group(1))
    return order[:80]


def kernel_profile(f, T, B, N, K, H, dtype, seq) -> dict | None:
    """CUPTI kernel list of one ring call (all devices): compute vs NCCL kernel time. Best effort."""
    try:
        from jax.experimental.mosaic.gpu import profiler

        q, k, v = random_qkv((B, T, N, H), (B, T, K, H), dtype, seq)
        _, kernels = profiler.measure(f, aggregate=False)(q, k, v)
    except Exception as err:  # noqa: BLE001 - a profiler that is missing must not cost the whole benchmark
        return {"error": repr(err)[:300]}
    if not kernels:
        return None
    nccl = sum(ms for name, ms in kernels if "nccl" in name.lower())
    return {"kernels": [(name[:120], ms) for name, ms in kernels], "nccl_ms": nccl,
            "compute_ms": sum(ms for _, ms in kernels) - nccl,
            "note": "summed over all devices; NCCL kernels include time spent waiting for the peer"}


if __name__ == "__main__":
    main()
