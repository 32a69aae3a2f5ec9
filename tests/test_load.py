"""Many learners at once on one server (scripts/load_test.py), and the check it relies on: that
attnlab.measure.timing logs every measurement's interval when ATTNLAB_TIMING_LOG is set, and that the device
device (attnlab.admission: one run at a time) keeps those intervals apart.

The load test itself is marked `load` (and `browser`): 20 concurrent browser contexts through all
nine pages take several minutes on a 2-core machine. Run it with `pytest -m load`; leave it out
with `-m "not load"`.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import load_test  # noqa: E402

# The server's resident memory at its peak under 20 sessions, with room to spare. Measured here
# (CPU backend): about 0.5 GB idle after the first page, 1.1-1.7 GB at the peak (JAX, XLA's
# compiled programs for the shapes the sessions use, Streamlit's bounded caches, 20 sessions'
# state). 3 GB is below the pod's 12 GiB request by a wide margin, and far enough above what we
# see that a failure means memory grows with sessions or runs (a leak), not noise.
MAX_PEAK_RSS_MB = 3072


def test_overlap_counting():
    assert load_test.overlaps([]) == 0
    assert load_test.overlaps([(0, 1), (1, 2), (2.5, 3)]) == 0  # touching is not overlapping
    assert load_test.overlaps([(0, 2), (1, 3)]) == 1
    assert load_test.overlaps([(0, 10), (1, 2), (3, 4)]) == 2  # both inside the first
    assert load_test.overlaps([(5, 6), (0, 1), (0.5, 2)]) == 1  # order of the log does not matter


def test_time_compiled_logs_each_measurement_and_the_device_keeps_them_apart(tmp_path, monkeypatch):
    """Four threads time at once; the log has four intervals and none overlaps another."""
    import jax
    import jax.numpy as jnp

    from attnlab import settings
    from attnlab.measure import timing

    log = tmp_path / "timings.log"
    monkeypatch.setattr(settings, "_CURRENT", [settings.settings()])
    settings._CURRENT[0] = settings.Settings(timing_log=str(log))
    compiled = jax.jit(lambda x: jnp.tanh(x @ x)).lower(jnp.ones((64, 64))).compile()
    args = [jnp.ones((64, 64))]
    errors = []

    def measure():
        try:
            timing.time_compiled(compiled, args, repeats=5, budget_s=0.05, device_time=False)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=measure) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    intervals = load_test.read_timing_log(log)
    assert len(intervals) == 4
    assert all(end > start for start, end in intervals)
    assert load_test.overlaps(intervals) == 0


def test_the_device_rule_check_reads_turns_builds_and_timings_and_flags_a_shared_timing(tmp_path, monkeypatch):
    """Threads time while others hold turns and tuned builds: every timing inside its own turn, none shared; a log
    with a build of another thread across a timing, or a timing without a turn, is flagged."""
    import jax
    import jax.numpy as jnp

    from attnlab import settings
    from attnlab.admission import DEVICE
    from attnlab.measure import timing

    log = tmp_path / "spans.log"
    monkeypatch.setattr(settings, "_CURRENT", [settings.Settings(timing_log=str(log))])
    compiled = jax.jit(lambda x: jnp.tanh(x @ x)).lower(jnp.ones((64, 64))).compile()

    def measure():
        with DEVICE.use():  # as the run layer: the turn around the inputs and the timing
            timing.time_compiled(compiled, [jnp.ones((64, 64))], repeats=5, budget_s=0.05, device_time=False)

    def build():
        with DEVICE.building():
            time.sleep(0.02)

    threads = [threading.Thread(target=f) for f in (measure, build, measure, build, measure)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    rule = load_test.device_rule(log)
    assert (rule["timings"], rule["turns"], rule["tuned_builds"], rule["violations"]) == (3, 3, 2, 0), rule

    bad = tmp_path / "bad.log"
    bad.write_text("1.0 2.0 7 100 turn\n1.1 1.9 7 100 timing\n1.5 2.5 8 100 build\n3.0 4.0 9 100 timing\n"
                   "1.2 1.8 5 200 turn\n")  # pid 200's turn is another GPU's
    rule = load_test.device_rule(bad)
    assert rule["violations"] == 2 and "overlapped a build" in rule["examples"][0] and "outside a turn" in rule["examples"][1]


def test_without_the_variable_nothing_is_logged(tmp_path, monkeypatch):
    import jax.numpy as jnp

    from attnlab import settings
    from attnlab.measure import timing

    monkeypatch.setattr(settings, "_CURRENT", [settings.Settings(timing_log=None)])
    monkeypatch.chdir(tmp_path)
    compiled = __import__("jax").jit(lambda x: x + 1).lower(jnp.ones(4)).compile()
    timing.time_compiled(compiled, [jnp.ones(4)], repeats=3, budget_s=0.01, device_time=False)
    assert list(tmp_path.iterdir()) == []


def test_unresponsive_stretch():
    ok = [(0.0, 0.1, True), (1.0, 0.2, True)]
    assert load_test.unresponsive_stretch(ok) == 0.0
    slow = [(0.0, 0.1, True), (1.0, 6.0, True), (7.5, 10.0, False), (18.0, 0.1, True), (19.0, 5.5, True)]
    assert load_test.unresponsive_stretch(slow) == pytest.approx(16.5)  # 1.0 .. 17.5, then 5.5 on its own


@pytest.mark.load
@pytest.mark.browser
def test_twenty_learners_at_once_get_every_page_without_an_exception_and_untangled_timings():
    fig = load_test.run_load(sessions=20)
    print("\n" + fig.table())
    problems = "\n".join(fig.error_messages[:10] + fig.exception_messages[:5])
    assert fig.errors == 0, problems
    assert fig.exceptions == 0, problems
    assert fig.pages_served == fig.pages_planned == 20 * len(load_test.PAGES)
    # the server keeps answering: every health check answered, and never so slowly for so long
    # that GKE's readiness probe (5 s timeout, every 10 s, 3 failures) would take it out of service
    failures, stretch = fig.health_failures, fig.health_unresponsive_s
    assert failures == 0, f"{failures} health checks got no answer within {fig.health_timeout_s:.0f} s"
    assert stretch < 30.0, f"no answer within 5 s for {stretch:.1f} s in a row"
    measured, overlapping = fig.measurements, fig.overlapping_timings
    assert measured is not None and measured >= 15, f"{measured} measurements: too few to say anything about the queue"
    assert overlapping == 0, f"{overlapping} of {measured} measurements overlapped another"
    peak = fig.peak_rss_mb
    assert peak is not None and peak < MAX_PEAK_RSS_MB, f"peak server RSS {peak} MB"


def test_each_program_compiled_is_one_compile_span_and_a_kept_one_none(tmp_path, monkeypatch):
    """compiled.PROGRAMS logs each XLA compile as a 'compile' span (with whether it was tuned and who asked), so
    scripts/request_log.py can say how many compiles ran at once in a class; a program it kept logs nothing."""
    import jax.numpy as jnp

    from attnlab import settings
    from attnlab.measure import compiled

    log = tmp_path / "spans.log"
    monkeypatch.setattr(settings, "_CURRENT", [settings.Settings(timing_log=str(log))])
    fn = lambda x: jnp.sin(x) * 3.25 + 0.125  # noqa: E731  (a program no other test compiles)
    args = [jnp.ones((3, 17))]
    compiled.compile_timed(fn, args, "the span test")
    compiled.compile_timed(fn, args, "the span test")
    rows = [r.split(maxsplit=5) for r in log.read_text().splitlines() if r.split()[4] == "compile"]  # not 'build'
    assert [r[5] for r in rows] == ["tuned the span test"]
    assert float(rows[0][1]) >= float(rows[0][0])


def test_a_checked_run_logs_its_turns_parts_inputs_reference_and_each_output(tmp_path, monkeypatch):
    """runs._part: inside a run's turn, its inputs, its float64 reference, each implementation's first run and its
    check (the copy back, the comparison) are spans of their own, inside the turn's span (what a long turn was)."""
    from attnlab import settings
    from attnlab.measure import runs
    from attnlab.shapes import AttentionShape

    log = tmp_path / "spans.log"
    monkeypatch.setattr(settings, "_CURRENT", [settings.Settings(timing_log=str(log))])
    shape = AttentionShape(batch=1, q_len=24, kv_len=24, heads=2, kv_heads=1, head_dim=8, dtype="float32")
    assert all(r.ok for r in runs.run(shape, ["naive", "sdpa_xla"]))
    rows = [r.split(maxsplit=5) for r in log.read_text().splitlines()]
    turn = next((float(r[0]), float(r[1])) for r in rows if r[4] == "turn")
    parts = [(float(r[0]), float(r[1]), r[5]) for r in rows if r[4] == "part"]
    assert [p[2] for p in parts] == ["inputs", "reference", "run naive", "check naive", "run sdpa_xla", "check sdpa_xla"]
    assert all(turn[0] <= a <= b <= turn[1] for a, b, _ in parts)
