"""A run that would hold the device past the lab's limit is refused before it starts, with a sentence."""

import pytest

from attnlab import settings
from attnlab.measure import cost, runs, timing
from attnlab.settings import Settings
from attnlab.shapes import AttentionShape

# one decode step of a long cache with many wide heads: ~1.1e12 FLOPs a call (4 · N · S · H)
HUGE_DECODE = AttentionShape(batch=1, q_len=1, kv_len=262_144, heads=1024, kv_heads=1, head_dim=1024)


def test_the_lower_bound_is_the_flops_over_a_measured_matmul_rate():
    rate = cost.matmul_rate("float32")
    assert 1e8 < rate < 1e16  # FLOP/s: a real measurement, not a constant
    assert cost.at_least_seconds(HUGE_DECODE, 10) == HUGE_DECODE.flops() * 10 / rate
    assert cost.at_least_seconds(AttentionShape(), 10) == 0.0  # the codelab's shape is not worth measuring a rate for


def test_a_buttons_estimate_is_its_calls_at_the_measured_rate_of_naive_attention():
    """The estimate before a button: on this CPU the matmul bound said under 20 s for a 2,000-token timing that
    took 45 s, so a page warned of nothing (issue 42)."""
    shape = AttentionShape(batch=4, q_len=2000, kv_len=2000)
    rate = cost.attention_rate("float32")
    assert 1e8 < rate < 1e16  # FLOP/s: a real measurement, not a constant
    assert cost.timing_seconds([shape], 3) == pytest.approx(3 * (timing.MIN_CALLS + 1) * shape.flops() / rate)
    assert cost.timing_seconds([AttentionShape()], 3) == 0.0  # the codelab's shape: not worth a sentence


def test_a_run_over_the_limit_is_refused_at_once_and_says_how_long_it_would_take():
    small = AttentionShape(batch=1, q_len=1024, kv_len=1024, heads=8, kv_heads=8, head_dim=64)
    need = cost.at_least_seconds(small, timing.MIN_CALLS)
    assert need > 0
    with settings.override(run_seconds=need / 2):
        (r,) = runs.run(small, ["naive"], accuracy=False, timed=True)
        assert r.status == runs.TOO_SLOW and "would hold the device for at least" in r.reason
        assert "over the lab's limit" in r.reason and r.timing is None  # nothing was timed
    with settings.override(run_seconds=need * 100):
        (r,) = runs.run(small, ["naive"], accuracy=False, timed=True)
        assert r.status == runs.OK


def test_a_buttons_plan_is_summed_over_its_cells():
    assert cost.too_slow_plan([AttentionShape()], [3], timing.MIN_CALLS, limit_s=60) is None
    said = cost.too_slow_plan([HUGE_DECODE, HUGE_DECODE.replace(kv_heads=4)], [3, 3], timing.MIN_CALLS, limit_s=60)
    assert said.startswith("These 6 runs would hold this CPU for at least")


def test_the_limit_is_a_setting():
    assert Settings.from_env({}).run_seconds == 60
    assert Settings.from_env({"ATTNLAB_RUN_SECONDS": "300"}).run_seconds == 300
    bad = Settings.from_env({"ATTNLAB_RUN_SECONDS": "soon"})
    assert bad.run_seconds == 60 and any("ATTNLAB_RUN_SECONDS" in p for p in bad.problems)
