"""Your turn on a real GPU: every reference solution passes and is timed, every listed mistake is recognised,
and a learner's program exported in the sandbox (JAX on the CPU there) runs on the GPU here."""

import pytest

from attnlab.measure import runs
from attnlab.shapes import AttentionShape
from attnlab.yourturn import exercises, grade, timed
from tests.yourturn_cases import MISTAKES

pytestmark = pytest.mark.gpu
SHAPE = AttentionShape(batch=2, q_len=512, kv_len=512, heads=8, kv_heads=2, head_dim=64, dtype="bfloat16")


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_every_solution_passes_on_the_gpu(name):
    assert grade.platform() == "cuda"
    v = grade.check(name, exercises.get(name).solution)
    assert v.passed, (v.status, v.message, v.cases)


@pytest.mark.parametrize("name", timed.TIMED)
def test_every_timed_solution_is_timed_with_device_time(name):
    r = timed.time_solution(name, exercises.get(name).solution, SHAPE)
    assert r.status == runs.OK, r.reason
    assert r.timing.device_ms and r.timing.device_ms > 0 and r.program.temp_bytes is not None
    assert r.row()["tflops"] > 0


@pytest.mark.parametrize(("exercise", "mistake"), list(MISTAKES))
def test_every_mistake_is_recognised_on_the_gpu(exercise, mistake):
    assert mistake in grade.check(exercise, MISTAKES[(exercise, mistake)]).mistakes
