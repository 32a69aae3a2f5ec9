"""Issue 44, in this process: the bounds of a learner's traced program (attnlab/yourturn/bounds.py), every failure a
sentence, no wrong answer passing or timed, heatmaps bounded, programs that crashed a worker remembered
(attnlab/yourturn/suspects.py), and the class's counts by distinct answers (attnlab/yourturn/progress.py)."""

from __future__ import annotations

import os
import pickle

import jax
import jax.numpy as jnp
import pytest

from attnlab.measure import cost, runs
from attnlab.yourturn import allowlist, bounds, exercises, grade, progress, share, suspects, timed
from tests.yourturn_cases.hostile import HOSTILE, TIME_SHAPE


def test_the_walk_sees_an_element_count_past_int64_as_the_number_it_is():
    f = jax.jit(lambda x: x + jnp.broadcast_to(x.sum(), (2**20,) * 4).sum())
    stats = bounds.walk(f.trace(jax.ShapeDtypeStruct((4,), "float32")).jaxpr)
    assert stats.peak_bytes == 4 * 2**80 and "broadcast_in_dim" in stats.peak_what
    why = bounds.refusal(stats, bounds.limits_for(exercises.ATTENTION, [((2, 8, 2, 16), "float32")] * 3))
    assert why and "far more than this exercise needs" in why and "2^82 bytes" in why


def test_the_walk_counts_operations_inside_called_functions_once_per_call():
    def inner(x):
        return jnp.exp(x) * 2.0 + 1.0

    def outer(x):
        for _ in range(50):
            x = jax.jit(inner)(x)  # a sub-program, called 50 times
        return x

    stats = bounds.walk(jax.jit(outer).trace(jax.ShapeDtypeStruct((8,), "float32")).jaxpr)
    assert stats.eqns >= 50 * 3


def test_the_limits_come_from_the_exercise_and_its_solution():
    lim = bounds.limits_for(exercises.ATTENTION, [((1, 4096, 8, 64), "bfloat16")] * 3)
    scores = 1 * 8 * 4096 * 4096 * 4  # the lab's solution's (B, N, T, S) float32 scores
    assert lim.max_bytes >= bounds.BYTES_OVER_LAB * scores and lim.outputs == 1
    assert bounds.limits_for(exercises.STEP, [((4,), "float32")] * 2 + [((4, 8), "float32"), ((4, 4), "float32"),
                                                                          ((4, 8), "float32")]).outputs == 3


@pytest.mark.parametrize("code", ["for i in range(0, 8, 0):\n    q = q + 1", "for i in range(8, 0, 0):\n    q = q"])
def test_range_with_step_zero_is_a_sentence_typed_or_in_a_link(code):
    source = "def attention(q, k, v):\n" + "".join(f"    {line}\n" for line in code.splitlines()) + "    return q\n"
    why = allowlist.refusal(source, "attention")  # raised ValueError before
    assert why and "step must not be 0" in why
    linked, problem = share.decode(share.encode(source))
    assert problem is None and allowlist.refusal(linked, "attention") == why


@pytest.mark.parametrize("case", ["returns None", "returns nothing", "returns two arrays", "step returns None",
                                  "complex output, imaginary part 1000"])
def test_a_function_returning_none_or_complex_numbers_is_refused_with_a_sentence(case):
    exercise, source, _ = HOSTILE[case]
    v = grade.check(exercise, source)  # None: AttributeError before; complex: passed before
    assert v.status == "refused" and not v.passed and ("returns" in v.message), (case, v.status, v.message)


def test_the_grader_never_raises():
    assert grade.check("no such exercise", "def f():\n    return 1\n").status == "stopped"
    assert grade.check("attention", None).status == "refused"


def test_an_online_softmax_without_the_running_max_and_rescale_fails():
    _, source, _ = HOSTILE["online softmax with no running max and no rescale"]
    v = grade.check("online_softmax", source)  # passed all three cases before
    assert v.status == "wrong" and any(not c.passed and "large scores" in c.what for c in v.cases)


def test_a_heatmap_is_at_most_the_drawn_size_and_a_verdict_small():
    _, source, _ = HOSTILE["causal weights at 2048 squared (within the bound)"]
    v = grade.check("causal", source)
    assert v.status == "wrong" and (v.heatmap is None or max(v.heatmap[0].shape) <= grade.HEATMAP_MAX)
    assert len(pickle.dumps(v)) < 2**20
    right = grade.check("causal", exercises.CAUSAL.solution)
    assert right.passed and right.heatmap is not None and right.heatmap[0].shape == (8, 8)


def test_a_function_right_only_at_the_checked_shapes_is_not_timed():
    _, source, _ = HOSTILE["right at the checks, q at the timing shape"]
    assert grade.check("attention", source).passed  # the checks' shapes cannot see it
    r = timed.time_solution("attention", source, TIME_SHAPE)  # was timed as OK before
    assert r.status != runs.OK and "not timed" in r.reason and r.timing is None
    assert timed.time_solution("attention", exercises.ATTENTION.solution, TIME_SHAPE).status == runs.OK


def test_a_learners_timing_takes_no_place_in_the_devices_line_to_compile(monkeypatch):
    """Time compiles the learner's program untuned: a tuned build waits in the device's line and no run is admitted
    while it builds (up to COMPILE_S), so one learner's compile would hold every other learner's runs (issue 44)."""
    from attnlab import admission

    builds, real = [], admission.DEVICE.building
    monkeypatch.setattr(admission.DEVICE, "building", lambda quiet=False, what="": builds.append(quiet) or real(quiet, what))
    assert timed.time_solution("attention", exercises.ATTENTION.solution, TIME_SHAPE).status == runs.OK
    assert builds and all(builds), builds  # every build of the timing quiet (before: the learner's was not)


def test_the_cost_model_refuses_a_run_past_the_run_limit_before_it_compiles(monkeypatch):
    monkeypatch.setattr(cost, "matmul_rate", lambda dtype: 1e9)
    why = grade.refused_before(b"x", bounds.Stats(flops=1e12))
    assert why and why.startswith("would hold the device for at least 1,000 s")
    assert grade.refused_before(b"y", bounds.Stats(flops=1e6)) is None


def test_a_program_that_crashed_a_worker_is_refused_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_SUSPECTS_DIR", str(tmp_path))
    seen = []
    real = grade.digest
    monkeypatch.setattr(grade, "digest", lambda blob: seen.append(real(blob)) or seen[-1])
    solution = exercises.ATTENTION.solution
    assert grade.check("attention", solution).passed
    # a worker (pid long gone) died while this program's first case was in flight, with nothing else in flight
    gone = 2**22 + 12345
    assert not os.path.exists(f"/proc/{gone}")
    (tmp_path / f"{seen[0]}.{gone}.0.run").write_text("0")
    v = grade.check("attention", solution)
    assert v.status == "stopped" and "stopped the device worker when it ran before" in v.message
    assert (tmp_path / f"{seen[0]}.bad").exists()


def test_a_program_in_flight_beside_another_at_a_death_is_refused_only_at_its_second(tmp_path):
    for death, pid in enumerate((4242424, 4242425)):
        for d in ("a1", "b2"):
            (tmp_path / f"{d}.{pid}.{death}.run").write_text("0")
        digests, _ = suspects.left_by(pid, "was killed by signal 6 (SIGABRT)", str(tmp_path))
        assert digests == ["a1", "b2"]
        assert (tmp_path / "a1.bad").exists() == (death == 1)


def test_the_class_counts_distinct_answers_per_learner_not_presses():
    progress.reset()
    for _ in range(12):  # one learner pressing Check twelve times on the same wrong code
        progress.record("attention", False, ("no scale",), learner="s1", answer="code-a")
    progress.record("attention", False, ("no scale",), learner="s1", answer="code-b")
    progress.record("attention", True, learner="s2", answer="code-c")
    snap = progress.snapshot()["attention"]
    assert snap == {"attempts": 3, "passes": 1, "refused": 0, "learners": 2, "mistakes": {"no scale": 2}}
    progress.reset()
