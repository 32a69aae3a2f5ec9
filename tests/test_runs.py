"""The run layer: typed results, one vocabulary of columns, failures as results, never exceptions."""

import jax
import pytest

from attnlab.admission import DEVICE, Device
from attnlab.budget import Budget
from attnlab.measure import runs
from attnlab.shapes import AttentionShape

TINY = AttentionShape(batch=1, q_len=32, kv_len=32, heads=2, kv_heads=2, head_dim=16)


def test_a_timed_run_reports_every_timing_named_for_what_it_measures():
    r = runs.run(TINY, ["naive"], timed=True)[0]
    assert r.ok and r.accuracy.allclose
    row = r.row()
    for key in ("compile_ms", "wall_ms", "throughput_ms", "wall_ms_iqr", "tflops", "gflop", "temp_bytes"):
        assert row[key] is not None and row[key] >= 0, key
    assert row["gflop"] == pytest.approx(TINY.flops() / 1e9)
    assert row["tflops"] == pytest.approx(TINY.flops() / (row["throughput_ms"] * 1e-3) / 1e12)
    if jax.default_backend() != "gpu":
        assert row["device_ms"] is None and "CUPTI" in row["device_note"]


def test_every_row_has_every_column_in_one_order():
    df = runs.to_frame(runs.run(TINY, ["naive", "sdpa_cudnn"]))
    assert list(df.columns) == runs.COLUMNS
    df = runs.to_frame(runs.run(TINY.replace(heads=3, kv_heads=2)))
    assert list(df.columns) == runs.COLUMNS and (df.status == runs.INVALID).all()
    assert df.reason.str.contains("heads \\(3\\) must be a multiple of kv_heads \\(2\\)").all()


def test_forward_backward_counts_three_and_a_half_forwards():
    r = runs.run(TINY, ["sdpa_xla"], accuracy=False, timed=True, backward=True)[0]
    assert r.ok and r.row()["pass"] == "forward+backward"
    assert r.row()["gflop"] == pytest.approx(3.5 * TINY.flops() / 1e9)


def test_a_program_only_run_compiles_and_allocates_nothing():
    before = DEVICE.stats.admitted
    r = runs.run(TINY.replace(q_len=4096, kv_len=4096), ["naive"], accuracy=False, program=True)[0]
    assert r.ok and r.program.temp_bytes and r.timing is None and r.accuracy is None
    assert DEVICE.stats.admitted == before  # it asked for no turn on the device


def test_a_program_only_run_is_not_stopped_by_a_busy_device(monkeypatch):
    from attnlab.admission import DeviceBusy

    class Full(Device):
        def use(self, *a, **k):
            raise DeviceBusy("The GPU is busy: 64 runs are already waiting. Try again shortly.")

    monkeypatch.setattr(runs, "DEVICE", Full(Budget(2**30, 2**30, True)))
    (r,) = runs.run(TINY.replace(q_len=24, kv_len=24), ["sdpa_xla"], accuracy=False, program=True)
    assert r.ok and r.program.temp_bytes is not None


def test_a_second_compile_of_the_same_program_says_it_came_from_the_cache():
    shape = TINY.replace(q_len=40, kv_len=40)
    auto, xla = runs.run(shape, ["sdpa_auto", "sdpa_xla"], accuracy=False, program=True)
    # one program under two names, compiled side by side: one compiles it, the other names that one
    first, second = (auto, xla) if auto.compiled_before is None else (xla, auto)
    assert first.compiled_before is None
    assert second.compiled_before and first.implementation in second.compiled_before


def test_sweep_yields_one_result_per_value_and_backend_with_failures_as_results():
    results = list(runs.sweep(TINY, "q_len", [16, 32], ["naive", "sdpa_xla", "sdpa_cudnn"], accuracy=False,
                              timed=True))
    assert [(r.shape.q_len, r.implementation) for r in results] == [
        (16, "naive"), (16, "sdpa_xla"), (16, "sdpa_cudnn"), (32, "naive"), (32, "sdpa_xla"), (32, "sdpa_cudnn")]
    assert all(r.shape.q_len == r.shape.kv_len for r in results)  # a sequence sweep moves both
    if jax.default_backend() != "gpu":
        cudnn = [r for r in results if r.implementation == "sdpa_cudnn"]
        assert all(r.status == runs.UNSUPPORTED and "CUDA GPU" in r.reason for r in cudnn)


def test_sweep_refuses_an_unknown_field():
    with pytest.raises(ValueError, match="cannot sweep over 'colour'"):
        list(runs.sweep(TINY, "colour", [1], ["naive"]))


def test_over_the_memory_budget_is_a_result_with_a_reason(monkeypatch):
    monkeypatch.setattr(runs, "DEVICE", Device(Budget(2**20, 2**20, True)))
    r = runs.run(TINY.replace(q_len=512, kv_len=512), ["naive", "sdpa_xla"])
    assert all(x.status == runs.OVER_BUDGET and "over this lab's budget" in x.reason for x in r)


def test_out_of_memory_and_backend_errors_become_results(monkeypatch):
    from attnlab.measure import compiled

    def boom(*a, **k):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 99.00GiB.")

    monkeypatch.setattr(compiled, "compile_backend", boom)
    r = runs.run(TINY.replace(q_len=64), ["naive"], timed=True)[0]
    assert r.status == runs.OOM and "RESOURCE_EXHAUSTED" in r.reason
    monkeypatch.setattr(compiled, "compile_backend", lambda *a, **k: (_ for _ in ()).throw(ValueError("bad")))
    r = runs.run(TINY.replace(q_len=48), ["naive"], timed=True)[0]
    assert r.status == runs.ERROR and "ValueError: bad" in r.reason


def test_host_memory_error_in_the_reference_is_a_result(monkeypatch):
    from attnlab.math import checks

    monkeypatch.setattr(checks, "float64_reference", lambda *a, **k: (_ for _ in ()).throw(MemoryError()))
    r = runs.run(TINY.replace(q_len=24), ["naive"])
    assert r[0].status == runs.OOM


def test_a_busy_device_is_a_result(monkeypatch):
    from attnlab.admission import DeviceBusy

    class Full(Device):
        def use(self, *a, **k):
            raise DeviceBusy("The GPU is busy: 64 runs are already waiting. Try again shortly.")

    monkeypatch.setattr(runs, "DEVICE", Full(Budget(2**30, 2**30, True)))
    r = runs.run(TINY, ["naive"])[0]
    assert r.status == runs.BUSY and "busy" in r.reason


def test_max_difference_compares_the_checked_slices():
    a, b = runs.run(TINY, ["naive", "sdpa_xla"])
    assert runs.max_difference(a, b) is not None and runs.max_difference(a, b) < 1e-5


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_inputs_are_the_same_for_a_seed_on_either_path(monkeypatch, dtype):
    # Small inputs are drawn by NumPy on the host (no compile per shape), large ones by a jitted
    # jax.random program; either way a seed gives the same arrays every time, standard normal.
    import numpy as np

    from attnlab.measure import inputs

    shape = AttentionShape(batch=2, q_len=64, kv_len=96, heads=4, kv_heads=2, head_dim=32, dtype=dtype)
    for host_max in (inputs.HOST_DRAW_MAX, 0):  # 0: every shape takes the jitted path
        monkeypatch.setattr(inputs, "HOST_DRAW_MAX", host_max)
        a, b = runs.make_inputs(shape, seed=3), runs.make_inputs(shape, seed=3)
        c = runs.make_inputs(shape, seed=4)
        assert [x.shape for x in a] == [shape.q_shape(), shape.kv_shape(), shape.kv_shape()]
        assert all(str(x.dtype) == dtype for x in a)
        assert all(np.array_equal(np.asarray(x, np.float32), np.asarray(y, np.float32)) for x, y in zip(a, b, strict=True))
        assert not np.array_equal(np.asarray(a[0], np.float32), np.asarray(c[0], np.float32))
        q = np.asarray(a[0], np.float64)
        assert abs(q.mean()) < 0.05 and abs(q.std() - 1) < 0.05


def test_a_small_reference_is_computed_before_the_device_turn_and_checks_alike(monkeypatch):
    """The float64 reference of inputs drawn on the host is NumPy's work: computed before the turn, the device is not
    held meanwhile; a reference over AHEAD_MAX_BYTES is computed in the turn. The accuracy is the same either way."""
    import numpy as np

    from attnlab.admission import DEVICE
    from attnlab.math import checks

    shape = AttentionShape(batch=2, q_len=40, kv_len=40, heads=4, kv_heads=2, head_dim=16, causal=True)
    held: list[bool] = []
    real = checks.float64_reference

    def watched(*args, **kw):
        held.append(DEVICE.held_here())
        return real(*args, **kw)

    monkeypatch.setattr(checks, "float64_reference", watched)
    ahead = runs.run(shape, ["naive", "sdpa_xla"])
    monkeypatch.setattr(runs, "AHEAD_MAX_BYTES", 0)
    inside = runs.run(shape, ["naive", "sdpa_xla"])
    assert held == [False, True]
    for a, b in zip(ahead, inside, strict=True):
        assert a.ok and b.ok and a.accuracy == b.accuracy and a.reference_note == b.reference_note
        assert np.array_equal(a.output_slice, b.output_slice)
    # one turn for several shapes (page 8's variants): their references before it, each run inside finds its own
    monkeypatch.setattr(runs, "AHEAD_MAX_BYTES", 1 << 25)
    variants = [shape, shape.replace(kv_heads=1), shape.replace(kv_heads=4)]
    held.clear()
    with runs.one_turn(variants, ["naive"]):
        together = [runs.run(v, ["naive"])[0] for v in variants]
    assert held == [False, False, False] and all(r.ok for r in together)
    assert together[0].accuracy == ahead[0].accuracy


def test_a_program_checked_or_described_compiles_without_autotuning_and_a_timed_one_with_it(monkeypatch):
    from attnlab.measure import compiled

    asked, real = [], compiled.compile_timed
    monkeypatch.setattr(compiled.jax, "default_backend", lambda: "gpu")  # the options are a GPU's
    monkeypatch.setattr(compiled, "compile_timed", lambda fn, args, who="", options=None, name=None: asked.append(
        (who.split(" at ")[0], options)) or real(fn, args, who, options, name))
    shape = TINY.replace(q_len=44, kv_len=44)
    assert runs.run(shape, ["naive"], accuracy=True)[0].ok
    assert asked == [("naive", compiled.CHECK_OPTIONS)]
    asked.clear()
    assert runs.run(shape, ["naive"], accuracy=True, timed=True, budget_s=0.01, repeats=2)[0].ok
    assert asked and all(opts is None for _, opts in asked)  # timed: the tuned program, also checked
    asked.clear()  # described, not timed (pages 4 and 5 on opening): untuned, so it takes no turn on the device
    described = runs.run(shape.replace(q_len=46, kv_len=46), ["naive"], accuracy=True, program=True)[0]
    assert described.ok and described.program is not None
    assert asked == [("naive", compiled.CHECK_OPTIONS)]


def test_a_timed_run_checks_and_times_every_implementation_in_one_turn(device_turns):
    """In a class every turn waits behind the line's build phases: a page that times three implementations
    asks for the device once, not once to check and once per timing."""
    out = runs.run(TINY.replace(q_len=52, kv_len=52), ["naive", "sdpa_xla"], timed=True, budget_s=0.01, repeats=2)
    assert [r.status for r in out] == [runs.OK, runs.OK] and all(r.timing for r in out) and len(device_turns) == 1


def test_runs_inside_one_turn_compile_what_they_need_without_waiting_for_themselves():
    """runs.one_turn holds the device for several runs; a run inside it whose programs are new compiles them in
    the holding thread (a compile pool's threads would wait for the turn it holds: a deadlock, seen in a class)."""
    import threading

    shapes = [TINY.replace(q_len=58 + i, kv_len=58 + i) for i in range(2)]
    done = []

    def held():
        with runs.one_turn(shapes, ["naive", "sdpa_xla"]):
            for s in shapes:
                done.extend(r.status for r in runs.run(s, ["naive", "sdpa_xla"]))

    t = threading.Thread(target=held, daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "a run inside one turn waited for itself"
    assert done == [runs.OK] * 4


def test_a_timing_asked_untuned_compiles_and_times_only_the_untuned_program(monkeypatch):
    from attnlab.measure import compiled

    seen, real = [], compiled.compile_timed  # each compile's name ends with whether it is tuned
    monkeypatch.setattr(compiled, "compile_timed", lambda fn, args, who="", options=None, name=None: seen.append(
        name[-1]) or real(fn, args, who, options, name))
    shape = AttentionShape(batch=1, q_len=19, kv_len=19, heads=2, kv_heads=2, head_dim=8)
    (r,) = runs.run(shape, ["naive"], timed=True, tuned=False, budget_s=0.05)
    assert r.ok and r.timing is not None and seen and not any(seen), seen
    seen.clear()
    (r,) = runs.run(shape, ["naive"], timed=True, budget_s=0.05)  # JAX's default: the timed program autotuned
    assert r.ok and seen and all(seen), seen
