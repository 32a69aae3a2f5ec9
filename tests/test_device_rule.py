"""Issue 41, section 1: the device rule by construction. Every entry point of the device worker
(attnlab/service/entries.py) runs, at small shapes, against a device that records each turn and each launch
(arrays put on the device, a jitted or compiled program called, a wait for results, a compile outside
`DEVICE.building()`); a launch from a thread that does not hold the device fails the test. On this CPU the
TransformerEngine and FP8 studies refuse at once (no TE, no cuDNN): their turns are exercised on a GPU only."""

from __future__ import annotations

import contextlib
import threading

import jax
import pytest

from attnlab.admission import DEVICE, OutsideTurn
from attnlab.measure import compiled, cost, runs
from attnlab.service import entries
from attnlab.shapes import AttentionShape
from attnlab.yourturn import exercises
from tests.yourturn_cases import MISTAKES

SMALL = AttentionShape(batch=1, q_len=16, kv_len=16, heads=4, kv_heads=2, head_dim=8)
BIG = AttentionShape(batch=8, q_len=4096, kv_len=4096, heads=16, kv_heads=16, head_dim=128)  # its rate is measured

ARGS: dict[str, list[tuple[tuple, dict]]] = {  # how each entry point is called here (each at least once)
    "attnlab.measure.runs:run": [((SMALL, ["naive"]), dict(timed=True, budget_s=0.02, repeats=2)),
                                 ((SMALL, ["naive"]), dict(backward=True, timed=True, budget_s=0.02, repeats=2)),
                                 ((BIG, ["naive"]), dict(timed=True))],  # refused as too slow: measures the rate
    "attnlab.backends:unmet": [((SMALL,), {})],
    "attnlab.backends:requirement_rows": [((SMALL,), {})],
    "attnlab.backends:refusal": [(("naive", SMALL), {})],
    "attnlab.measure.timing:launch_note": [((), {})],
    "attnlab.measure.cost:too_slow_plan": [(([BIG], [1], 1), {})],
    "attnlab.measure.cost:timing_seconds": [(([BIG], 2), {})],
    "attnlab.studies.vendor:measure": [((("bf16 T8192", "fp8 T8192"),), {})],
    "attnlab.studies.memory:compiled_memory": [((SMALL, ["naive"], [16, 32]), {})],
    "attnlab.studies.memory:same_program": [((SMALL, "naive", "sdpa_xla"), {})],
    "attnlab.studies.layout:placement": [((SMALL,), {})],
    "attnlab.studies.weights:first_vs_last": [((SMALL,), {})],
    "attnlab.studies.timing_demo:dispatch_demo": [((SMALL, "naive"), dict(calls=3, repeats=2))],
    "attnlab.studies.kvcache:output_checks": [((SMALL, ["naive"]), {})],
    # TransformerEngine and cuDNN FP8 refuse a CPU at once: on a GPU these run their studies under the same device
    "attnlab.studies.fp8_study:te_autocast_study": [((SMALL.replace(dtype="bfloat16"),), {})],
    "attnlab.studies.fp8_study:te_block_study": [((SMALL.replace(dtype="bfloat16"),), {})],
    "attnlab.studies.fp8_study:fp8_attention_study": [(([SMALL.replace(dtype="bfloat16", kv_heads=4)],), {})],
    "attnlab.backends.tokamax:inner_loop_source": [(("tokamax_triton",), {})],
    "attnlab.studies.ring_live:unmet": [((SMALL, 1), {})],
    "attnlab.studies.ring_live:compare": [((SMALL, 1), {})],
    "attnlab.studies.warm:warm_shape": [((SMALL, ("naive",)), {})],
    "attnlab.yourturn.grade:check": [(("attention", MISTAKES[("attention", "no scale")]), {}),  # mistakes recognised
                                     (("gqa", exercises.get("gqa").solution), {})],  # the lab's own scratch compiled
    "attnlab.yourturn.timed:time_solution": [(("attention", exercises.get("attention").solution, SMALL), {})],
    "attnlab.yourturn.progress:record": [(("attention", True), {})],
    "attnlab.yourturn.progress:snapshot": [((), {})],
}


class Recorder:
    """Each turn on the device and each launch, with whether the launching thread held the device."""

    def __init__(self):
        self.turns, self.launches, self.lock = 0, [], threading.Lock()

    def launch(self, what: str, args=()) -> None:
        if any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(args)):
            return  # a call inside a trace is part of a program, not a launch
        with self.lock:
            self.launches.append((what, DEVICE.held_here(), threading.current_thread().name))


class _Jitted:
    """jax.jit's function, its calls recorded (lower, trace and the rest pass through)."""

    def __init__(self, rec, fn):
        self._rec, self._fn = rec, fn

    def __call__(self, *args, **kwargs):
        self._rec.launch("a jitted call", (args, kwargs))
        return self._fn(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._fn, name)


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    real_use, real_jit, real_put, real_ready = DEVICE.use, jax.jit, jax.device_put, jax.block_until_ready
    real_call, real_launch = jax.stages.Compiled.__call__, DEVICE.launch
    real_building, real_compile, building = DEVICE.building, jax.stages.Lowered.compile, threading.local()

    @contextlib.contextmanager
    def builds(*a, **k):
        with real_building(*a, **k):
            building.depth = getattr(building, "depth", 0) + 1
            try:
                yield
            finally:
                building.depth -= 1

    def compile_(self, *a, **k):  # a compile (tuned, on a GPU) between runs, or by the holder of a turn
        if not getattr(building, "depth", 0) and not DEVICE.held_here():
            rec.launch("a compile outside DEVICE.building()")
        return real_compile(self, *a, **k)

    def use(*a, **k):
        if not DEVICE.held_here():
            rec.turns += 1
        return real_use(*a, **k)

    def jit(fn=None, *a, **k):
        if fn is None:
            return lambda f: jit(f, *a, **k)
        return _Jitted(rec, real_jit(fn, *a, **k))

    def put(x, *a, **k):
        rec.launch("device_put", x)
        return real_put(x, *a, **k)

    def ready(x):
        rec.launch("block_until_ready")
        return real_ready(x)

    def call(self, *args):
        rec.launch("a compiled program", args)
        return real_call(self, *args)

    def launch(what):
        rec.launch(what)
        return real_launch(what)

    monkeypatch.setattr(DEVICE, "use", use)
    monkeypatch.setattr(DEVICE, "launch", launch)
    monkeypatch.setattr(DEVICE, "building", builds)
    monkeypatch.setattr(jax.stages.Lowered, "compile", compile_)
    monkeypatch.setattr(jax, "jit", jit)
    monkeypatch.setattr(jax, "device_put", put)
    monkeypatch.setattr(jax, "block_until_ready", ready)
    monkeypatch.setattr(jax.stages.Compiled, "__call__", call)
    cost.matmul_rate.cache_clear()  # measured again, under the recorder
    cost.attention_rate.cache_clear()
    monkeypatch.setattr(compiled, "PROGRAMS", compiled.Programs())  # every program compiled again, recorded
    yield rec
    cost.matmul_rate.cache_clear()
    cost.attention_rate.cache_clear()


def test_every_entry_point_has_a_call_here():
    assert set(ARGS) == {name for name, _ in entries.LISTED}


@pytest.mark.parametrize("name", [name for name, _ in entries.LISTED])
def test_no_entry_point_launches_outside_a_turn(name, recorder):
    entry = entries.get(name)
    for args, kwargs in ARGS[name]:
        with DEVICE.serving():
            entry.fn(*args, **kwargs)
    outside = [(what, thread) for what, held, thread in recorder.launches if not held]
    assert not outside, f"{name} launched outside a turn: {outside[:5]}"
    assert recorder.turns or not recorder.launches  # whatever launched took a turn


def test_a_launch_outside_a_turn_is_refused_while_serving_and_allowed_in_a_turn():
    with DEVICE.serving():
        with pytest.raises(OutsideTurn, match="outside a turn"):
            runs.make_inputs(SMALL)
        with DEVICE.use():
            q, _, _ = runs.make_inputs(SMALL)
    assert q.shape == SMALL.q_shape()
    runs.make_inputs(SMALL)  # outside a served request (a script, a test) nothing is enforced


def test_the_worker_serves_every_entry_under_the_rule(monkeypatch):
    from attnlab.service.request import Request
    from attnlab.service.worker import DeviceWorker

    def careless(shape, names, **kw):  # an entry point that forgot its turn
        return runs.make_inputs(shape)

    monkeypatch.setattr(runs, "run", careless)  # entries look their function up when a request is served
    reply = DeviceWorker("rule-test").call(Request.of("attnlab.measure.runs:run", SMALL, ("naive",)))
    assert "outside a turn" in str(reply.error), reply
