"""The ring benchmark's JSON as tables (attnlab.studies.ring_results), the bytes-vs-compute model and the step
sentences (attnlab.studies.ring_schedule), and the live ring-vs-one-device check (attnlab.studies.ring_live) on one CPU."""

import dataclasses
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from attnlab.shapes import AttentionShape
from attnlab.studies import ring_live, ring_results
from attnlab.studies import ring_schedule as rs
from attnlab.studies.suite import SuiteRun

SMOKE = Path(__file__).with_name("ring_smoke_cpu_x2.json")  # scripts/ring_bench.py --smoke on 2 CPU devices


def smoke_json() -> dict:
    """A real file of the benchmark's structure (CPU, two virtual devices; one length marked skipped)."""
    return json.loads(SMOKE.read_text())


def smoke() -> ring_results.RingRun:
    return ring_results.RingRun.from_json(smoke_json())


def as_gpu(data: dict) -> ring_results.RingRun:
    data["environment"].update(backend="gpu", device_kind="NVIDIA H200")
    return ring_results.RingRun.from_json(data)


def test_a_ring_file_is_read_once_into_typed_fields_with_units():
    run = smoke()
    assert isinstance(run, ring_results.RingRun) and dataclasses.is_dataclass(run)
    e = run.environment
    assert (e.device_count, e.device_kind, e.backend, e.block) == (2, "cpu", "cpu", "xla_block")
    assert e.shape == {"B": 1, "N": 4, "K": 4, "H": 16, "dtype": "float32"}
    assert [r.T for r in run.lengths if r.skipped] == [256] and all(r.skipped is None for r in run.measured)
    first = run.measured[0]
    assert first.ms("causal", "ring") > 0 and first.speedup("causal", "ring") == pytest.approx(
        first.one_device_ms("causal") / first.ms("causal", "ring"))
    t = run.timeline["causal"]
    assert isinstance(t, ring_results.RingTimeline) and isinstance(t.steps[0], ring_results.RingStep)
    assert t.steps[-1].transfer_ms == 0 and t.send_GBps > 0 and 0 <= t.transfer_hidden <= 1
    assert run.correctness.T == 32 and run.correctness.causal < 1e-5
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.lengths = ()  # type: ignore[misc]


def test_the_shipped_ring_file_loads_as_a_ring_run_and_other_files_are_refused():
    run = ring_results.RingRun.load("ring_h200x2")
    assert run.environment.device_count == 2 and run.environment.backend == "gpu"
    assert set(run.timeline) == set(ring_results.MASKS) and "causal_fenced" in run.schedule
    assert ring_results.RingRun.load("ring_h200x64") is None  # not shipped
    from attnlab import shipped

    with pytest.raises(ValueError, match="not a ring benchmark file"):
        ring_results.RingRun.from_json(shipped.load("h200"))
    with pytest.raises(ValueError, match="not a ring benchmark file"):
        ring_results.RingRun.from_json({"results": []})


def test_speedups_has_one_row_per_length_mask_and_variant_and_efficiency_is_speedup_over_p():
    data = smoke()
    df = ring_results.speedups(data)
    assert len(df) == len(data.measured) * (3 + 4)  # non-causal: 3 variants, causal: 4 (with the unbalanced ring)
    assert set(df["mask"]) == {"non-causal", "causal"}
    assert (df["speedup"] - df["one_device_ms"] / df["ms"]).abs().max() < 1e-9
    assert (df["efficiency"] - df["speedup"] / 2).abs().max() < 1e-9
    assert ring_results.skipped(data) == [256]


def test_absent_file_gives_empty_tables_and_says_not_measured():
    assert ring_results.speedups(None).empty and ring_results.timeline(None).empty
    assert ring_results.timeline_summary(None) is None and ring_results.crossovers(None).empty
    assert ring_results.label(None) == "not measured"


def test_label_names_the_devices_versions_and_date():
    text = ring_results.label(smoke())
    assert "2 × cpu" in text and "jax 0.10.2" in text and "xla_block" in text and "2026-11-30" in text


@pytest.mark.parametrize("mask", ["non_causal", "causal"])
def test_timeline_overlapped_sends_start_with_their_compute_and_finish_no_later_than_serial(mask):
    df = ring_results.timeline(smoke(), mask)
    over, serial = df[df["schedule"] == "overlapped"], df[df["schedule"] == "one after the other"]
    assert set(df["part"]) == {"compute", "transfer"}
    for s in over["step"].unique():
        c = over[(over["step"] == s) & (over["part"] == "compute")].iloc[0]
        t = over[(over["step"] == s) & (over["part"] == "transfer")]
        if not t.empty:
            assert t.iloc[0]["start_ms"] == c["start_ms"]
            ts = serial[(serial["step"] == s) & (serial["part"] == "transfer")].iloc[0]
            cs = serial[(serial["step"] == s) & (serial["part"] == "compute")].iloc[0]
            assert ts["start_ms"] == pytest.approx(cs["end_ms"])
    assert over["end_ms"].max() <= serial["end_ms"].max() + 1e-12
    t = smoke().timeline[mask]
    assert serial["end_ms"].max() == pytest.approx(t.sum_of_parts_serial_ms)


def test_rates_come_from_the_ring_file_on_gpu_else_from_the_h200_results_else_nothing():
    data = as_gpu(smoke_json())
    r = ring_results.rates(data)
    assert isinstance(r, ring_results.Rates)
    last = max(data.measured, key=lambda x: x.T)
    s = data.environment.shape
    assert r.flops_per_s == pytest.approx(4 * s["B"] * last.T ** 2 * s["N"] * s["H"]
                                          / (last.one_device_ms("non_causal") / 1e3))
    assert r.bytes_per_s == pytest.approx(data.timeline["non_causal"].send_GBps * 1e9)
    h200 = {"environment": {"device": "NVIDIA H200", "date": "2000-01-01"}, "tables": {"long_context": [
        {"implementation": "sdpa_cudnn", "pass": "forward", "causal": False, "status": "ok", "q_len": 4096,
         "head_dim": 128, "shape": "B4 T4096", "tflops": 500.0, "device_tflops": 600.0}]}}
    cpu = ring_results.rates(smoke(), SuiteRun.from_json(h200))  # a CPU smoke run is no H200 rate
    assert cpu.flops_per_s == 600e12 and cpu.bytes_per_s == ring_results.NVLINK_ONE_WAY_BYTES_PER_S
    assert "assumed" in cpu.bytes_source and "H200" in cpu.flops_source
    assert ring_results.rates(None).flops_per_s is None
    # both rates are bf16 measurements: a float32 shape gets the TF32 share of them, and is told so
    f32 = ring_results.rates(data, dtype="float32")
    assert f32.flops_per_s == pytest.approx(r.flops_per_s * 494.7 / 989.5)
    assert "bfloat16" in f32.flops_source and "TF32" in f32.flops_source
    assert ring_results.rates(data, dtype="float16").flops_per_s == r.flops_per_s


def test_scaling_shows_what_ships_and_lists_the_ring_sizes_not_measured():
    df, missing = ring_results.scaling({2: smoke(), 4: None, 8: None})
    assert missing == [4, 8] and set(df["P"]) == {2}
    assert set(df["variant"]) == {ring_results.VARIANTS["ring"], "all-gather"} and df["T"].nunique() == 1
    empty, missing = ring_results.scaling({2: None})
    assert empty.empty and missing == [2]


def test_step_costs_bytes_follow_the_formula_and_compute_hides_the_send_from_the_hiding_length_on():
    B, N, K, H, item, P, F, W = 2, 8, 2, 64, 2, 4, 500e12, 450e9
    T_star = rs.hiding_length(N, K, item, P, F, W, causal=False)
    rows = rs.step_costs(B, N, K, H, item, P, [T_star - 2 * P, T_star + 2 * P, 8 * T_star], F, W, causal=False)
    assert isinstance(rows, pd.DataFrame) and list(rows["T"]) == [T_star - 2 * P, T_star + 2 * P, 8 * T_star]
    assert rows["bytes_per_step"][0] == 2 * B * ((T_star - 2 * P) // P) * K * H * item
    assert list(rows["hidden"]) == [False, True, True]
    # balanced causal: a step computes half a block, so the send needs twice the length to hide
    assert rs.hiding_length(N, K, item, P, F, W, causal=True) == pytest.approx(2 * T_star, abs=P)
    assert rs.hiding_length(N, K, item, P, F, W, causal=True, layout="contiguous") == T_star


def test_each_step_is_described_in_one_sentence_and_the_last_sends_nothing():
    schedule = rs.ring_schedule(4, causal=True, layout="contiguous")
    assert rs.describe_step(schedule, 0).startswith("Step 0 of 3: every device attends its queries to its own")
    assert "2 devices compute a full block, 2 devices compute nothing" in rs.describe_step(schedule, 2)
    assert "nothing is sent" in rs.describe_step(schedule, 3)
    assert "4 devices compute half a block" in rs.describe_step(rs.ring_schedule(4, causal=True), 1)


def test_live_ring_says_why_it_cannot_run_a_shape():
    assert "jax sees 1" in ring_live.unmet(AttentionShape(), 2)
    assert ring_live.unmet(AttentionShape(q_len=33, kv_len=33), 1) is None  # one device: any length
    assert "must be a multiple of 2" in ring_live.unmet(AttentionShape(q_len=33, kv_len=33, causal=True), 1)
    assert "q_len (32) = kv_len (48)" in ring_live.unmet(AttentionShape(q_len=32, kv_len=48, causal=True), 1)
    assert "sliding window" in ring_live.unmet(AttentionShape(window=(4, 0)), 1)


@pytest.mark.parametrize("causal", [False, True])
def test_live_ring_on_one_device_matches_one_device_attention_and_is_timed(causal):
    shape = AttentionShape(batch=1, q_len=32, kv_len=32, heads=4, kv_heads=2, head_dim=16, causal=causal)
    r = ring_live.compare(shape, 1)
    assert isinstance(r, ring_live.RingComparison) and (r.devices, r.layout, r.method) == (1, "zigzag", "ring")
    assert r.relative_error < 1e-5 and r.max_abs_error < 1e-5
    assert r.ring.wall_ms > 0 and r.one.wall_ms > 0 and not math.isnan(r.ring.compile_ms)
    assert r.speedup == pytest.approx(r.one.wall_ms / r.ring.wall_ms)


def with_fenced_ring(data: dict, slower_by: float = 0.9) -> dict:
    """The smoke file as if the benchmark had also measured the fenced ring (the lab's default)."""
    for r in data["results"]:
        for mask in ring_results.MASKS:
            if f"{mask}_ring_ms" in r:
                r[f"{mask}_ring_fenced_ms"] = r[f"{mask}_ring_ms"] * slower_by
                r[f"{mask}_ring_fenced_speedup"] = r[f"{mask}_ring_speedup"] / slower_by
                r[f"{mask}_ring_fenced_efficiency"] = r[f"{mask}_ring_efficiency"] / slower_by
    return data


def test_the_headline_ring_is_the_fenced_default_where_measured_else_the_ring_xla_ordered():
    assert ring_results.headline(smoke()) == "ring"  # written before the fence
    data = ring_results.RingRun.from_json(with_fenced_ring(smoke_json()))
    assert ring_results.headline(data) == "ring_fenced"
    df, _ = ring_results.scaling({2: data})
    assert set(df["variant"]) == {ring_results.VARIANTS["ring_fenced"], "all-gather"}
    summary = ring_results.timeline_summary(data, "causal")
    assert isinstance(summary, ring_results.TimelineSummary)
    row = next(r for r in data.lengths if r.T == summary.T)
    assert summary.ring_ms == row.ms("causal", "ring_fenced") and "fenced" in summary.variant


def test_program_order_reads_as_sends_waits_and_attention_and_crossovers_list_only_what_was_measured():
    data = smoke_json()
    data["schedule"] = {"causal_fenced": ["collective-permute-start", "__cudnn$fmhaSoftmax",
                                          "collective-permute-done", "conditional"]}
    data["crossover_T"]["non_causal_ring_grouped"] = None  # listed by the benchmark, never measured
    data = ring_results.RingRun.from_json(data)
    order = ring_results.program_order(data)
    assert order.to_dict("records") == [{"program": "causal fenced", "order": "send starts → cuDNN attention → "
                                         "wait for the send → branch (holds a cuDNN attention)"}]
    rows = {(r["mask"], r["variant"]) for r in ring_results.crossovers(data).to_dict("records")}
    assert ("non-causal", "ring grouped") not in rows
    assert ("causal", ring_results.VARIANTS["ring_unbalanced"]) in rows  # named as in the speed-up chart's legend


def test_every_line_of_the_speed_up_chart_has_its_crossover_read_from_the_measured_speed_ups():
    # the shipped crossover_T left out send-after-compute and causal all-gather, which the chart draws
    data = ring_results.RingRun.load("ring_h200x2")
    table = ring_results.crossovers(data)
    lines = ring_results.speedups(data)[["mask", "variant"]].drop_duplicates()
    assert len(table) == len(lines)
    found = {(r["mask"], r["variant"]): r["shortest T faster than one GPU"] for r in table.to_dict("records")}
    assert found[("non-causal", ring_results.VARIANTS["ring_no_overlap"])] == "8,192"  # 1.33 there, 0.61 at 4,096
    assert found[("causal", ring_results.VARIANTS["all_gather"])] == "16,384"  # 0.87 at 8,192, 1.42 at 16,384
    for k, t in data.crossover_T.items():  # where the benchmark computed one, the same length
        mask = "non-causal" if k.startswith("non_causal_") else "causal"
        variant = ring_results.VARIANTS.get(k.split("causal_", 1)[1])
        if (mask, variant) in found and t is not None:
            assert found[(mask, variant)] == f"{t:,}", k


def test_same_programs_names_the_masks_where_the_fence_changed_nothing():
    data = smoke_json()
    order = ["collective-permute-start", "__cudnn$fmhaSoftmax", "collective-permute-done"]
    data["schedule"] = {"non_causal": order, "non_causal_fenced": list(order),
                        "causal": order[::-1], "causal_fenced": order}
    assert ring_results.same_programs(ring_results.RingRun.from_json(data)) == ["non_causal"]
    assert ring_results.same_programs(None) == []
