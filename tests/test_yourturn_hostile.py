"""Issue 44: the hostile corpus (tests/yourturn_cases/hostile.py) through the device worker's real entry points,
in a child process (the app's default worker), and the supervisor's rule for learners' crashes.

Every program is refused, stopped or found wrong with a sentence; the worker is the same process afterwards
(no crash); its peak RSS stays within 1.5 GB; every verdict it sends back is at most 8 MiB. Then: a learner's
program that aborts the worker natively, again and again, never makes the supervisor give up, and is
remembered; one that holds the worker past its bound is ended by the watchdog, and remembered too."""

import pickle
import time

import pytest

from attnlab.measure import runs
from attnlab.service import faults
from attnlab.service.child import QUICK_DEATHS, ChildWorker
from attnlab.service.request import Request, WorkerLost
from attnlab.shapes import AttentionShape
from attnlab.yourturn import exercises, grade, timed
from tests.yourturn_cases.hostile import HOSTILE, REFUSED_IN_THE_SANDBOX, TIME_SHAPE

CPU = {"JAX_PLATFORMS": "cpu", "ATTNLAB_FAULT_INJECTION": "1", "ATTNLAB_WARM": "0"}
MAX_VERDICT_BYTES = 8 * 2**20
MAX_RSS_BYTES = 1.5e9
TINY = AttentionShape(batch=1, q_len=16, kv_len=16, heads=2, kv_heads=2, head_dim=8)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    home = tmp_path_factory.mktemp("suspects")
    c = ChildWorker(env={**CPU, "ATTNLAB_SUSPECTS_DIR": str(home), "ATTNLAB_REQUEST_LOG": str(home / "requests.jsonl")},
                    threads=4)
    c.request_log = home / "requests.jsonl"
    assert c.wait_ready(180)
    c.first_pid = c.proc.pid
    yield c
    c.close()


def _peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


VERDICT_BYTES: dict[str, int] = {}  # each case's verdict as it crosses the process boundary (pickled)


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_program_is_refused_or_stopped_with_a_sentence_and_the_worker_lives(worker, case):
    exercise, source, where = HOSTILE[case]
    pid = worker.proc.pid
    request = (Request.of(grade.check, exercise, source) if where == "check" else
               Request.of(timed.time_solution, exercise, source, TIME_SHAPE))
    reply = worker.call(request)
    assert reply.error is None, (case, reply.error)
    value = reply.value
    VERDICT_BYTES[case] = len(pickle.dumps(value))
    assert VERDICT_BYTES[case] <= MAX_VERDICT_BYTES, case
    if where == "check":
        sentence = value.message or " ".join(value.hints)
        assert not value.passed and value.status in ("refused", "stopped", "wrong", "too big"), (case, value.status)
        if case in REFUSED_IN_THE_SANDBOX:
            assert value.status == "refused", (case, value.status, value.message)
        if case.startswith(("a helper called", "4,096 unrolled")):  # stopped while tracing, not once it was whole
            assert "traces to more than" in sentence, (case, sentence)
    else:
        sentence = value.reason
        assert value.status != runs.OK, (case, value.status)
        if case in REFUSED_IN_THE_SANDBOX:
            assert value.program is None, (case, value.reason)  # never compiled here
    assert sentence and len(sentence) > 20 and "Traceback" not in sentence, (case, sentence)
    assert worker.proc.pid == pid == worker.first_pid, f"{case}: the worker died"


@pytest.mark.alone  # the lab's solutions within the sandbox's wall limit (30 s), which cores another test keeps busy can stretch
def test_the_labs_own_solutions_still_pass_and_are_timed_in_the_same_worker(worker):
    for name, ex in exercises.EXERCISES.items():
        assert worker.call(Request.of(grade.check, name, ex.solution)).value.passed, name
    assert worker.call(Request.of(timed.time_solution, "attention", exercises.ATTENTION.solution, TIME_SHAPE)).value.ok
    assert worker.proc.pid == worker.first_pid


def test_the_workers_peak_memory_over_the_corpus_is_within_bounds(worker):
    peak = _peak_rss(worker.proc.pid)
    print(f"the device worker's peak RSS over the hostile corpus: {peak / 2**20:,.0f} MiB")
    if VERDICT_BYTES:
        big = max(VERDICT_BYTES, key=VERDICT_BYTES.get)
        print(f"the largest verdict over {len(VERDICT_BYTES)} cases: {VERDICT_BYTES[big] / 2**10:,.1f} KiB ({big})")
    assert worker.proc.pid == worker.first_pid and peak <= MAX_RSS_BYTES


def test_no_learners_request_held_the_device_or_a_build_past_its_bound(worker):
    """The device worker's own ledger of each request (ATTNLAB_REQUEST_LOG): the device held for a learner's run at
    most ATTNLAB_RUN_SECONDS (a timing's TIMING_CALLS of them), a compile at most its COMPILE_S."""
    import json

    from attnlab.settings import settings
    from attnlab.yourturn import program

    lines = [json.loads(x) for x in worker.request_log.read_text().splitlines() if x.strip()]
    learners = [x for x in lines if x["fn"] in ("check", "time_solution") and x["how"] == "computed"]
    assert len(learners) >= len(HOSTILE), len(learners)
    held = max(x.get("run_s", 0.0) for x in learners)
    built = max(x.get("build_s", 0.0) for x in learners)
    print(f"the longest a learner's request held the device: {held:.2f} s; its longest tuned build: {built:.2f} s")
    for x in learners:
        bound = settings().run_seconds * (timed.TIMING_CALLS if x["fn"] == "time_solution" else 1)
        assert x.get("run_s", 0.0) <= bound and x.get("build_s", 0.0) <= program.COMPILE_S, x


# -- a learner's program that crashes or hangs the worker (after the corpus: these end the worker) ----------------
def test_a_learners_crash_never_makes_the_supervisor_give_up_and_is_remembered(worker):
    for _ in range(QUICK_DEATHS + 1):  # within seconds of each start: the supervisor's "keeps dying" rule
        with pytest.raises(WorkerLost, match=r"SIGABRT.*learner's program.*refuses it at once"):
            worker.call(Request.of(faults.learner_abort, "c0ffee"))
    assert not worker.gave_up and worker.learner_deaths >= QUICK_DEATHS + 1
    assert worker.call(Request.of(runs.run, TINY, ("naive",))).value[0].ok
    words = worker.call(Request.of(faults.remembered, "c0ffee")).value
    assert words and "stopped the device worker" in words and "SIGABRT" in words
    assert worker.call(Request.of(faults.remembered, "other")).value is None


def test_a_learners_program_that_holds_the_worker_past_its_bound_is_ended_and_remembered(worker):
    t0 = time.monotonic()
    with pytest.raises(WorkerLost, match=r"held the device worker past 2 s"):
        worker.call(Request.of(faults.learner_hang, "deadbeef", 50, 2))
    assert time.monotonic() - t0 < 30 and not worker.gave_up
    assert "held the device worker past 2 s" in worker.call(Request.of(faults.remembered, "deadbeef")).value
