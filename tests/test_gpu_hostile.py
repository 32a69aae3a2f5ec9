"""Issue 44's hostile corpus on a real GPU: the same programs and assertions as tests/test_yourturn_hostile.py,
through a child device worker that compiles and runs for CUDA, so the bounds hold where XLA compiles for the GPU.

On a GPU the worker's resident memory starts higher (the CUDA context and cuDNN's libraries), so its bound is on
the growth over the corpus; the device's own peak (`memory_stats`) and the longest a learner's request held the
worker are printed beside it."""

import time

import pytest

from attnlab.service.child import ChildWorker
from attnlab.service.request import Request
from attnlab.yourturn import grade, timed
from tests.test_yourturn_hostile import (
    MAX_RSS_BYTES,
    _peak_rss,
    test_a_hostile_program_is_refused_or_stopped_with_a_sentence_and_the_worker_lives,  # noqa: F401 (collected here)
    test_the_labs_own_solutions_still_pass_and_are_timed_in_the_same_worker,  # noqa: F401
)
from tests.yourturn_cases.hostile import HOSTILE, TIME_SHAPE

pytestmark = pytest.mark.gpu
GPU = {"ATTNLAB_FAULT_INJECTION": "1", "ATTNLAB_WARM": "0", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    c = ChildWorker(env={**GPU, "ATTNLAB_SUSPECTS_DIR": str(tmp_path_factory.mktemp("suspects"))}, threads=4)
    assert c.wait_ready(300)
    c.first_pid = c.proc.pid
    # the worker's own start-up (CUDA context, cuDNN) before any learner's program: the lab's solution once
    from attnlab.yourturn import exercises

    assert c.call(Request.of(grade.check, "attention", exercises.ATTENTION.solution)).value.passed
    c.rss_before = _rss(c.proc.pid)
    yield c
    c.close()


def test_on_the_gpu_each_learners_request_is_bounded_in_time_and_the_workers_memory_growth_too(worker):
    held = {}
    worker.forget()  # the tests imported above ran the corpus first (pytest collects them first): compute each anew
    for case, (exercise, source, where) in HOSTILE.items():
        t0 = time.monotonic()
        reply = worker.call(Request.of(grade.check, exercise, source) if where == "check" else
                            Request.of(timed.time_solution, exercise, source, TIME_SHAPE))
        held[case] = time.monotonic() - t0
        assert not reply.cached, case  # a kept answer would time nothing
    growth = _peak_rss(worker.proc.pid) - worker.rss_before
    worst = max(held, key=held.get)
    print(f"\nGPU worker: RSS {worker.rss_before / 2**20:,.0f} MiB after start, peak growth over the corpus "
          f"{growth / 2**20:,.0f} MiB; longest request {held[worst]:.1f} s ({worst})")
    assert worker.proc.pid == worker.first_pid, "the worker died"
    assert growth <= MAX_RSS_BYTES
    assert held[worst] <= 75, held  # the 75 s: a learner's check or timing never holds the worker that long
