"""Context parallelism: the ring schedule on paper, the merge, and ring/all-gather attention on 2, 4, 8 devices.

Multi-device checks run `context_parallel_check.py` in a subprocess with virtual CPU devices, since the
device count is fixed when JAX starts and the rest of the suite must keep seeing one device.
"""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.studies import context_parallel as cp
from attnlab.studies import ring_schedule as rs

ROOT = Path(__file__).resolve().parents[1]
CHECK = Path(__file__).with_name("context_parallel_check.py")
sys.path.insert(0, str(CHECK.parent))
from context_parallel_check import reference_attention  # noqa: E402


def _run_on_virtual_devices(*args: str, devices: int) -> str:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, str(CHECK), *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("devices", [2])  # 4 devices: 25 s of CI's 30 minutes; 8 (below) covers a longer ring
def test_ring_and_all_gather_match_single_device_and_float64_on_every_variant(devices):
    out = _run_on_virtual_devices(str(devices), devices=devices)
    assert out.count("ok ") == 18, out  # round-trip + 3 non-causal + 8 causal + 3 grouped + 3 unfenced rings


def test_balanced_causal_ring_matches_on_eight_devices():
    out = _run_on_virtual_devices("8", "--quick", devices=8)
    assert out.count("ok ") == 4, out


# --------------------------------------------------------------------------------------------
# one device: the block, the merge, the layout
# --------------------------------------------------------------------------------------------
def _qkv(T=48, S=48, N=4, K=2, H=16, seed=0):
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    return (jax.random.normal(kq, (2, T, N, H)), jax.random.normal(kk, (2, S, K, H)),
            jax.random.normal(kv, (2, S, K, H)))


@pytest.mark.parametrize("causal", [False, True])
def test_xla_block_matches_reference_and_returns_natural_log_sum_exp(causal):
    q, k, v = _qkv()
    out, lse = cp.xla_block(q, k, v, causal)
    np.testing.assert_allclose(out, reference_attention(q, k, v, causal), atol=2e-5)
    scores = np.einsum("btnh,bsnh->btns", np.float64(q), np.repeat(np.float64(k), 2, axis=2)) / 4.0
    if causal:
        scores = np.where(np.tril(np.ones((48, 48), bool))[None, :, None, :], scores, -np.inf)
    expected = np.log(np.exp(scores).sum(-1))  # (B, T, N)
    assert lse.shape == (2, 48, 4) and lse.dtype == jnp.float32
    np.testing.assert_allclose(lse, expected, atol=2e-5)


def test_merging_two_halves_of_the_keys_gives_attention_over_all_of_them():
    q, k, v = _qkv(S=64)
    halves = [cp.xla_block(q, k[:, s], v[:, s], False) for s in (slice(0, 24), slice(24, 64))]
    out, lse = cp.merge(*halves[0], *halves[1])
    np.testing.assert_allclose(out, reference_attention(q, k, v, False), atol=2e-5)
    np.testing.assert_allclose(lse, cp.xla_block(q, k, v, False)[1], atol=2e-5)


def test_merge_with_nothing_is_the_identity():
    q, k, v = _qkv()
    o, lse = cp.xla_block(q, k, v, True)
    o0, lse0 = cp._nothing(q)
    merged, merged_lse = cp.merge(o0, lse0, o, lse)
    np.testing.assert_allclose(merged, o, atol=1e-6)
    np.testing.assert_allclose(merged_lse, lse, atol=1e-6)
    assert np.all(np.asarray(cp.merge(o0, lse0, o0, lse0)[0]) == 0)  # no keys at all: zeros, not NaN


def test_zigzag_order_puts_chunk_d_and_2p_minus_1_minus_d_on_device_d():
    order = cp.zigzag_order(16, 2)  # 4 chunks of 4
    assert order.tolist() == [0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 8, 9, 10, 11]
    x = jnp.arange(2 * 16 * 3).reshape(2, 16, 3)
    np.testing.assert_array_equal(cp.from_zigzag(cp.to_zigzag(x, 2), 2), x)
    with pytest.raises(ValueError, match="multiple of 2 x devices"):
        cp.zigzag_order(10, 2)


def test_one_device_mesh_is_plain_attention_and_bad_shapes_are_explained():
    q, k, v = _qkv(T=32, S=32)
    mesh = cp.sequence_mesh(1)
    out = cp.context_parallel_attention(q, k, v, mesh, causal=True, block=cp.xla_block)
    np.testing.assert_allclose(out, reference_attention(q, k, v, True), atol=2e-5)
    with pytest.raises(ValueError, match=r"heads \(4\) must be a multiple of kv_heads \(3\)"):
        cp.context_parallel_attention(q, k[:, :, :1].repeat(3, 2), v[:, :, :1].repeat(3, 2), mesh)
    with pytest.raises(ValueError, match="method must be"):
        cp.context_parallel_attention(q, k, v, mesh, method="tree")


def test_default_block_is_plain_jax_off_gpu():
    if jax.default_backend() != "gpu":
        assert cp.default_block() is cp.xla_block


# --------------------------------------------------------------------------------------------
# the model on paper
# --------------------------------------------------------------------------------------------
def test_bytes_per_step_are_k_and_v_blocks():
    # B1, S 32768 over 2 devices, 16 KV heads of 128, bf16: 2·1·16384·16·128·2 = 128 MiB
    assert rs.bytes_per_step(1, 32768, 16, 128, 2, 2) == 2 * 16384 * 16 * 128 * 2 == 128 * 2**20
    assert rs.bytes_per_step(2, 256, 2, 32, 4, 4) == 2 * 2 * 64 * 2 * 32 * 4  # GQA: K heads, not N


def test_block_flops_are_halved_on_the_diagonal_and_zero_when_skipped():
    full = rs.block_flops(1, 4096, 4096, 16, 128, 2)
    assert full == 4 * 2048 * 2048 * 16 * 128
    assert rs.block_flops(1, 4096, 4096, 16, 128, 2, rs.DIAGONAL) == full / 2
    assert rs.block_flops(1, 4096, 4096, 16, 128, 2, rs.SKIPPED) == 0


@pytest.mark.parametrize("devices", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_every_device_meets_every_block_once_passing_it_to_the_right(devices, layout):
    schedule = rs.ring_schedule(devices, causal=False, layout=layout)
    assert all(isinstance(r, rs.RingStep) for r in schedule) and len(schedule) == devices * devices
    for d in range(devices):
        assert sorted(r.kv_from_device for r in schedule if r.device == d) == list(range(devices))
    by = {(r.step, r.device): r for r in schedule}
    for r in schedule:
        if r.sends_to is not None:  # what I send now, my neighbour holds next step
            assert by[(r.step + 1, r.sends_to)].kv_from_device == r.sends_kv_of_device
    assert rs.work_per_device(schedule) == [devices] * devices


@pytest.mark.parametrize("devices", [2, 4, 8])
def test_zigzag_balances_causal_work_and_contiguous_does_not(devices):
    zig = rs.ring_schedule(devices, causal=True, layout="zigzag")
    con = rs.ring_schedule(devices, causal=True, layout="contiguous")
    assert rs.work_per_device(zig) == [devices / 2] * devices  # half of the full square each
    assert all(r.work == 0.5 for r in zig)
    assert rs.work_per_device(con) == [d + 0.5 for d in range(devices)]
    assert rs.ring_time_in_steps(zig) == devices / 2
    assert rs.ring_time_in_steps(con) == devices - 0.5  # the last device sets the pace
    assert sum(r.compute == rs.SKIPPED for r in con) == devices * (devices - 1) // 2
    assert {r.compute for r in zig if r.step == 0} == {rs.DIAGONAL}
    assert {r.compute for r in zig if r.step > 0} == {"partly skipped"}


def test_overlap_threshold_is_block_size_over_flops_per_byte():
    # 600 TFLOP/s, 400 GB/s, MHA, bf16: c >= 1·2·600e12 / (2·400e9) = 1500 tokens per device
    assert rs.overlap_threshold_tokens(600e12, 400e9, 16, 16, 2) == 1500
    assert rs.overlap_threshold_tokens(600e12, 400e9, 16, 2, 2) == 188  # GQA sends 8x fewer bytes
