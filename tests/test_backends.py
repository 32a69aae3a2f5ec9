"""The registry: every backend matches float64 where it runs, and says why where it cannot."""

import dataclasses

import numpy as np
import pytest

from attnlab import device
from attnlab.backends import REGISTRY, get
from attnlab.backends.base import Requirement, abstract_inputs
from attnlab.math import checks
from attnlab.measure import runs
from attnlab.shapes import AttentionShape

RANDOM_SHAPES = [
    AttentionShape(batch=2, q_len=48, kv_len=80, heads=4, kv_heads=4, head_dim=32),  # T != S
    AttentionShape(batch=1, q_len=64, kv_len=64, heads=8, kv_heads=2, head_dim=16, causal=True),  # GQA causal
    AttentionShape(batch=3, q_len=33, kv_len=17, heads=6, kv_heads=1, head_dim=8),  # MQA, odd lengths
    AttentionShape(batch=2, q_len=40, kv_len=72, heads=4, kv_heads=2, head_dim=64, causal=True),  # T < S causal
    AttentionShape(batch=2, q_len=40, kv_len=72, heads=4, kv_heads=2, head_dim=16, window=(8, 2), kv_lengths=(70, 33)),
]
DTYPES = ["float32", "bfloat16", "float16"]


def _runnable(shape):
    info = device.info()
    return [n for n, b in REGISTRY.items() if b.unmet(shape, info) is None]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", RANDOM_SHAPES, ids=lambda s: s.describe())
def test_every_runnable_backend_matches_the_float64_reference(shape, dtype):
    shape = shape.replace(dtype=dtype)
    names = _runnable(shape)
    assert "naive" in names  # the from-scratch version runs every shape, to check the others
    if not (dtype == "float16" and device.info().backend == "cpu"):
        assert "sdpa_xla" in names
    for seed in (0, 1):  # fresh inputs: the same function on any valid input
        q, k, v = runs.make_inputs(shape, seed=seed)
        ref = checks.float64_reference(shape, q, k, v)
        for name in names:
            if name == "cudnn_fp8":
                continue  # FP8 has its own, looser check (GPU tests)
            out = get(name).jit(shape)(q, k, v)
            assert out.shape == shape.q_shape() and str(out.dtype) == dtype
            acc = ref.check(out)
            assert acc.allclose, (name, acc)
            assert acc.relative_error < {"float32": 1e-3, "bfloat16": 1e-2, "float16": 3e-3}[dtype], (name, acc)


def test_registry_lists_each_backend_once_with_labels_and_requirements_as_data():
    assert list(REGISTRY)[:3] == ["naive", "sdpa_auto", "sdpa_xla"]  # the ladder's order, from the bottom rung
    assert {"flash_jax", "tokamax_triton", "tokamax_mosaic", "sdpa_cudnn", "te_dpa", "cudnn_fp8"} <= set(REGISTRY)
    assert list(REGISTRY).index("sdpa_cudnn") < list(REGISTRY).index("cudnn_fp8")
    info = device.info()
    for b in REGISTRY.values():
        assert b.label and b.description and b.adds
        assert all(isinstance(r, Requirement) for r in b.requirements(AttentionShape(), info))
        assert b.device_bytes(AttentionShape()) > AttentionShape().input_bytes()


@pytest.mark.skipif(device.info().backend != "cpu", reason="the CPU's reasons")
def test_on_cpu_each_gpu_backend_says_what_it_needs():
    info = device.info()
    shape = AttentionShape(dtype="bfloat16")
    why = get("sdpa_cudnn").unmet(shape, info)
    assert "a CUDA GPU" in why and "here: cpu" in why
    assert "a CUDA GPU" in get("cudnn_fp8").unmet(shape, info) and "a CUDA GPU" in get("te_dpa").unmet(shape, info)
    assert get("naive").unmet(shape, info) is None


def _gpu(**changes) -> device.DeviceInfo:
    base = device.DeviceInfo("gpu", "cuda 12080", "NVIDIA Test", 1, (9, 0), None, None, "x", "x", "9.1.0", None, None)
    return dataclasses.replace(base, **changes)


def _first_unmet(name, shape, info):
    return next((r for r in get(name).requirements(shape, info) if not r.met), None)


def test_cudnn_requirements_by_capability_dtype_and_head_dim():
    ok = AttentionShape(dtype="bfloat16")
    assert _first_unmet("sdpa_cudnn", ok, _gpu()) is None
    assert _first_unmet("sdpa_cudnn", ok, _gpu(compute_capability=(7, 5))).what == "compute capability"
    assert _first_unmet("sdpa_cudnn", ok.replace(dtype="float32"), _gpu()).what == "dtype"
    assert _first_unmet("sdpa_cudnn", ok.replace(head_dim=160), _gpu(compute_capability=(8, 0))).what == "head_dim"
    assert _first_unmet("sdpa_cudnn", ok.replace(head_dim=160), _gpu()) is None  # 256 on Hopper
    assert _first_unmet("sdpa_cudnn", ok, _gpu(cudnn_version=None)).what == "cuDNN loaded by JAX"
    assert _first_unmet("cudnn_fp8", ok, _gpu(compute_capability=(8, 9))).what == "compute capability"
    assert _first_unmet("cudnn_fp8", ok.replace(kv_heads=2), _gpu()).what == "head layout"
    assert _first_unmet("te_dpa", ok.replace(window=(4, 0)), _gpu()).what in ("TransformerEngine", "masks within")


def test_unknown_backend_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown implementation 'flash9'"):
        get("flash9")


@pytest.mark.skipif(device.info().backend != "cpu", reason="a CPU backend limitation")
def test_xla_sdpa_in_float16_on_cpu_is_refused_by_its_rule_as_xla_refuses_it_when_lowered():
    shape, info = AttentionShape(dtype="float16"), device.info()
    if info.is_cuda:
        pytest.skip("the rule is the CPU backend's")
    why = get("sdpa_xla").unmet(shape, info)
    assert why and "float16" in why and "CPU" in why
    with pytest.raises(Exception, match="not supported"):  # the declared rule is XLA's own: lowering says the same
        get("sdpa_xla").jit(shape).lower(*abstract_inputs(shape))


def test_a_shape_checked_again_is_not_traced_again_and_a_new_shape_is():
    """The trace check keeps no cache of its own: JAX's trace cache, keyed by the static shape, answers again."""
    from attnlab.backends import base

    calls = []
    naive = get("naive")
    counting = dataclasses.replace(naive, fn=lambda q, k, v, shape: calls.append(shape) or naive.fn(q, k, v, shape))
    shape = AttentionShape(batch=1, q_len=8, kv_len=8, heads=2, kv_heads=1, head_dim=8)
    assert base.trace_error(counting, shape) is None and len(calls) == 1
    assert base.trace_error(counting, shape) is None and len(calls) == 1
    assert base.trace_error(counting, shape.replace(q_len=9)) is None and len(calls) == 2


def test_checking_a_shape_traces_without_waiting_for_the_device():
    """A check traces to a jaxpr only: it never waits for a run holding the device (on the H200 checks that
    lowered took turns with every run, and a class waited behind them)."""
    import threading

    from attnlab.admission import DEVICE

    shape = AttentionShape(batch=1, q_len=24, kv_len=41, heads=4, kv_heads=2, head_dim=8, causal=True)  # new here
    held, release, answer = threading.Event(), threading.Event(), {}

    def hold():
        with DEVICE.use():
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    checker = threading.Thread(target=lambda: answer.update(why=get("naive").unmet(shape, device.info())))
    checker.start()
    checker.join(30)
    release.set()
    holder.join(10)
    assert not checker.is_alive() and answer == {"why": None}


def test_memory_estimates_grow_as_t_squared_when_materialised_and_as_t_when_streamed():
    a, b = AttentionShape(q_len=1024, kv_len=1024), AttentionShape(q_len=2048, kv_len=2048)
    ratio = lambda n: get(n).device_bytes(b) / get(n).device_bytes(a)  # noqa: E731
    assert 3.5 < ratio("naive") <= 4.0 and 3.5 < ratio("sdpa_xla") <= 4.0
    assert 1.5 < ratio("sdpa_cudnn") <= 2.0
    np.testing.assert_equal(get("naive").device_bytes(AttentionShape(kv_heads=1)) <
                            get("naive").device_bytes(AttentionShape()), True)  # no K/V copies for MQA


def test_cudnns_head_dim_rule_is_said_per_gpu_family_and_for_the_gpu_it_judged():
    gemma = AttentionShape(heads=16, kv_heads=8, head_dim=256, dtype="bfloat16")
    (row,) = [r for r in get("sdpa_cudnn").requirements(gemma, device.info()) if r.what == "head_dim"]
    assert all(family in row.needed for family in ("Ampere", "Hopper", "Blackwell"))
    if not device.info().is_cuda:  # judged for the H200 the shipped numbers come from, and said so
        assert row.met and "H200" in row.here


def test_a_known_compiler_abort_is_refused_in_one_plain_sentence_without_xlas_internals():
    import dataclasses

    from attnlab import device
    from attnlab.backends import known_aborts

    k = known_aborts.KNOWN[0]
    info = dataclasses.replace(device.info(), backend=k.backend)
    said = known_aborts.refusal(k.backends[0], AttentionShape(dtype=k.dtype, head_dim=k.head_dim), info)
    assert said and "known to crash" in said and "head_dim" in said
    assert not any(w in said for w in ("Check failed", ".cc", "HloOpcode", "SIGABRT")), said


def test_the_four_line_naive_attention_page_4_shows_matches_the_float64_reference():
    import jax.numpy as jnp
    import numpy as np

    from attnlab.math import attention

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 16, 4, 8)) for _ in range(3))
    want = attention.attention(q, k, v, xp=np)  # float64, NumPy
    got = np.asarray(attention.naive_attention(*(jnp.asarray(x, jnp.float32) for x in (q, k, v))))
    assert np.abs(got - want).max() < 1e-5


def test_a_new_device_worker_imports_every_optional_backend_once_no_request_is_in_flight():
    """warm.worker_start (in the background as a worker starts, and each time Ray restarts it) asks every backend
    module that has an import check, so a later page does not wait for TE's or tokamax's import; but only after
    QUIET_S with no request in flight, so a restarted worker's first requests do not share the GIL with them."""
    import importlib
    import pkgutil
    import threading

    import attnlab.backends as pkg
    from attnlab.studies import warm

    checks = [m.import_error for m in (importlib.import_module(f"attnlab.backends.{i.name}")
                                       for i in pkgutil.iter_modules(pkg.__path__)) if hasattr(m, "import_error")]
    assert len(checks) >= 2  # tokamax and TransformerEngine
    for check in checks:
        check.cache_clear()
    busy = threading.Event()
    busy.set()
    thread = threading.Thread(target=warm.worker_start, args=(busy.is_set,), daemon=True)
    thread.start()
    thread.join(1.5)
    assert thread.is_alive() and all(c.cache_info().currsize == 0 for c in checks)  # requests in flight: not yet
    busy.clear()
    thread.join(60)
    assert not thread.is_alive()
    assert all(c.cache_info().currsize == 1 for c in checks), [c.__module__ for c in checks]
