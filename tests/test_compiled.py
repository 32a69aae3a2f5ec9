"""What the compiler made: kernels in words, scratch bytes, and how they grow."""

import jax
import pandas as pd
import pytest

from attnlab.measure import compiled
from attnlab.measure.compiled import CompiledInfo
from attnlab.shapes import AttentionShape

TINY = AttentionShape(batch=1, q_len=32, kv_len=32, heads=2, kv_heads=2, head_dim=16)


def test_compiled_memory_of_naive_grows_with_the_square_of_the_length():
    small = compiled.describe_compiled(compiled.compile_backend("naive", TINY.replace(q_len=256, kv_len=256))[0])
    large = compiled.describe_compiled(compiled.compile_backend("naive", TINY.replace(q_len=512, kv_len=512))[0])
    assert small.temp_bytes and large.temp_bytes
    assert large.temp_bytes / small.temp_bytes > 3


def test_which_kernel_recognises_cudnn_custom_calls():
    cudnn = CompiledInfo(0, 0, 0, ("__cudnn$fmhaSoftmax",), 1)
    assert "cuDNN" in compiled.which_kernel(cudnn) and "__cudnn$fmhaSoftmax" in compiled.which_kernel(cudnn)
    assert compiled.which_kernel(CompiledInfo(0, 0, 0, (), 3)) == "XLA's own code: 3 fusions"


def test_growth_gives_the_log_log_slope():
    df = pd.DataFrame({"implementation": ["a", "a", "b", "b"], "status": "ok", "q_len": [256, 1024, 256, 1024],
                       "temp_bytes": [1, 16, 10, 40]})
    g = compiled.growth(df).set_index("implementation")
    assert g.loc["a", "slope"] == 2.0 and g.loc["b", "slope"] == 1.0


def test_forward_backward_is_the_gradient_of_the_sum():
    import jax.numpy as jnp

    grads = compiled.forward_backward(lambda q, k, v: q * k * v)(jnp.ones(2), 2 * jnp.ones(2), 3 * jnp.ones(2))
    assert [float(g[0]) for g in grads] == [6.0, 3.0, 2.0]


@pytest.fixture
def compiles():
    """A list that grows by one per XLA compile during the test (JAX's own monitoring event)."""
    import jax.monitoring

    seen = []

    def listen(event, secs, **kw):
        if event.endswith("backend_compile_duration"):
            seen.append(secs)

    jax.monitoring.register_event_duration_secs_listener(listen)
    yield seen
    jax.monitoring.unregister_event_duration_listener(listen)


def test_threads_asking_for_one_new_program_at_once_compile_it_once(compiles):
    import threading

    shape = TINY.replace(q_len=24, kv_len=40)  # a shape no other test compiles
    fn = compiled.get("naive").jit(shape)
    out, barrier = [], threading.Barrier(4)

    def ask():
        barrier.wait()
        out.append(compiled.compile_timed(fn, compiled.abstract_inputs(shape), "a learner"))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(compiles) == 1
    assert len({id(exe) for exe, _, _ in out}) == 1
    assert sorted(before is None for _, _, before in out) == [False, False, False, True]  # one compiled, three waited


def test_compile_many_compiles_side_by_side_and_returns_each_jobs_error(monkeypatch, compiles):
    from attnlab import settings

    monkeypatch.setattr(settings, "_CURRENT", [settings.Settings(compile_threads=3)])
    assert compiled.compile_threads() == 3
    shapes = [TINY.replace(q_len=t, kv_len=t) for t in (37, 53)]  # lengths no other test compiles
    jobs = [(n, s, False) for n in ("naive", "sdpa_xla") for s in shapes] + [("sdpa_xla", shapes[0], False)]
    errors = compiled.compile_many(jobs + [("no such backend", shapes[0], False)])
    assert len(errors) == 5  # the repeated job once
    assert all(errors[j] is None for j in jobs)
    assert isinstance(errors[("no such backend", shapes[0], False)], ValueError)
    assert len(compiles) == 4
    compiled.compile_backend("naive", shapes[1])
    assert len(compiles) == 4  # kept: asking again compiles nothing


def test_lowering_and_tracing_take_turns_in_a_process(monkeypatch):
    # Mosaic GPU's lowering crashed a server process when threads lowered side by side (backend.lower); a check's
    # trace takes the same turn (Python throughout: the oldest page's first, attnlab/oldest_first.py)
    import inspect
    import threading

    import jax

    from attnlab import oldest_first
    from attnlab.backends import base, get

    entered = []

    class Recording:
        def __init__(self):
            self.lock = threading.Lock()

        def __enter__(self):
            entered.append(inspect.stack()[1].function)  # who took the turn
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

    monkeypatch.setattr(oldest_first, "PYTHON", Recording())
    shape = AttentionShape(batch=1, q_len=12, kv_len=13, heads=2, kv_heads=2, head_dim=8)  # traced by no other test
    assert base.trace_error(get("naive"), shape) is None  # a check traces to a jaxpr: nothing lowered
    assert entered == ["trace_error"]
    compiled.compile_timed(lambda x: x * 3.0, [jax.ShapeDtypeStruct((5,), "float32")], "test")
    assert entered == ["trace_error", "lower"]  # the compile's lowering, under the lock


def test_one_cache_holds_each_program_once_under_every_name_and_its_bound_takes_the_names_with_it():
    shape = TINY.replace(q_len=29, kv_len=29)  # a shape no other test compiles
    xla = compiled.compile_backend("sdpa_xla", shape)
    auto = compiled.compile_backend("sdpa_auto", shape)  # the same program lowered under another name
    assert auto[0] is xla[0] and auto[2] is not None and "sdpa_xla" in auto[2]
    assert compiled.compile_backend("sdpa_xla", shape) is xla  # asked again: the first answer, nothing compiled
    small = compiled.Programs(size=1)
    jitted = jax.jit(lambda x: x + 1.0)
    for n, arg in enumerate([jax.ShapeDtypeStruct((3,), "float32"), jax.ShapeDtypeStruct((4,), "float32")]):
        exe, first, key = small.compile(jitted.lower(arg), f"f{n}", None)
        small.name(("f", n), key, (exe, 0.0, first))
    assert len(small) == 1 and small.named(("f", 0)) is None and small.named(("f", 1)) is not None


def test_a_program_compiled_after_its_check_is_not_traced_again_and_runs_on_q_k_v(monkeypatch):
    """compile_backend lowers the function the check traced (Backend.program), so JAX's trace cache hands the
    lowering that jaxpr: one trace per backend and shape, not one for the check and one for the program."""
    import dataclasses

    import numpy as np

    from attnlab import device
    from attnlab.backends import REGISTRY, get

    calls = []
    naive = get("naive")
    counting = dataclasses.replace(naive, fn=lambda q, k, v, shape: calls.append(shape) or naive.fn(q, k, v, shape))
    monkeypatch.setitem(REGISTRY, "naive", counting)
    shape = TINY.replace(q_len=20, kv_len=44)  # a shape no other test compiles
    assert counting.unmet(shape, device.info()) is None and len(calls) == 1
    exe = compiled.compile_backend("naive", shape, tuned=False)[0]
    assert len(calls) == 1  # the lowering found the check's trace
    q, k, v = (np.ones(s.shape, s.dtype) for s in compiled.abstract_inputs(shape))
    assert exe(q, k, v).shape == shape.q_shape()


def test_two_backends_lowered_to_the_same_text_but_their_names_are_one_program(compiles):
    """The program's key leaves out the module's name (the Python function's), so the same program reached
    through two functions compiles once."""
    import jax.numpy as jnp

    def one(x):
        return jnp.sin(x) * 3

    def two(x):
        return jnp.sin(x) * 3

    args = [jax.ShapeDtypeStruct((5, 7), jnp.float32)]
    first = compiled.compile_timed(one, args, "one")
    second = compiled.compile_timed(two, args, "two")
    assert len(compiles) == 1 and second[0] is first[0] and second[2] == "one"


def test_a_program_compiled_in_a_helper_process_loads_here_and_gives_this_processs_outputs(monkeypatch):
    """scripts/program_handoff.py --across: a second Python lowers, compiles and serializes each program; this one
    loads the executable and runs it beside its own compile at the same inputs. The outputs must be equal to the
    last bit, or a hand-off to helper processes would change what the lab computes."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "scripts"))
    import program_handoff

    rows = program_handoff.across(["naive", "sdpa_xla"], shapes=1, dtype="float32")
    assert [r["backend"] for r in rows] == ["naive", "sdpa_xla"]
    assert all(r["equal_outputs"] == "1 of 1" and r["load_ms"] > 0 for r in rows), rows
