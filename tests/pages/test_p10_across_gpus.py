"""Page 10 · Across GPUs: the ring drawn per step, bytes against compute per step, the shipped 2 × H200
measurements (timeline, speed-up, scaling) or why they are absent, and the live ring only on several GPUs."""

import json
import re
from pathlib import Path

import jax
import pytest

from attnlab import shipped
from attnlab.studies import ring_results
from tests.apptest_util import (
    CUSTOM,
    button,
    chart_data,
    charts,
    frame_with,
    frames,
    metric,
    open_page,
    texts,
)
from tests.test_ring_results import with_fenced_ring

PAGE = "pages/p10_across_gpus.py"
MEASURED = ("p11_tab", "Measured on 2 × H200")
MORE = ("p11_tab", "More GPUs, and live")
SMOKE = Path(__file__).resolve().parents[1] / "ring_smoke_cpu_x2.json"


@pytest.fixture
def ring_shipped(monkeypatch):
    """The page sees a small ring_h200x2.json (a real smoke file, relabelled as from GPUs, with the fenced
    ring and a compiled order added as a newer benchmark writes them); 4 and 8 absent."""
    data = with_fenced_ring(json.loads(SMOKE.read_text()))
    data["environment"].update(backend="gpu", device_kind="NVIDIA H200")
    data["schedule"] = {"causal": ["collective-permute-start", "collective-permute-done", "__cudnn$fmhaSoftmax"],
                        "causal_fenced": ["collective-permute-start", "__cudnn$fmhaSoftmax", "collective-permute-done"]}
    real = shipped.load
    monkeypatch.setattr(shipped, "load", lambda name="h200": data if name == "ring_h200x2" else
                        None if name.startswith("ring_") else real(name))
    return data


@pytest.fixture
def no_ring(monkeypatch):
    real = shipped.load
    monkeypatch.setattr(shipped, "load", lambda name="h200": None if name.startswith("ring_") else real(name))


def grid_of(at):
    return next(c for c in chart_data(at) if {"step", "device", "work", "holds"} <= set(c.columns))


def set_ring(at, P, causal, layout):
    at.slider(key="p11_P").set_value(P)
    at.toggle(key="p11_causal").set_value(causal)
    at.radio(key="p11_layout").set_value(layout)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_default_shape_renders_the_ring_the_model_and_explains_absent_results(no_ring):
    at = open_page(PAGE)
    grid = grid_of(at)
    assert sorted(grid["device"].unique()) == [0, 1, 2, 3] and sorted(grid["step"].unique()) == [0, 1, 2, 3]
    assert "Step 0 of 3" in texts(at, "info")
    costs = frame_with(at, "hidden")  # default: B4 N8 K8 H64 float32, P=4
    row = costs[costs["T"] == 1024].iloc[0]
    assert row["bytes"] == 2 * 4 * (1024 // 4) * 8 * 64 * 4
    assert "T ≈" in metric(at, "sequence length where compute hides")
    assert "do not ship with this version yet" not in texts(at)  # the other tabs are not run until opened
    assert "do not ship with this version yet" in texts(open_page(PAGE, tab=MEASURED))
    assert "Not measured (no results ship): 2 GPUs, 4 GPUs, 8 GPUs" in texts(open_page(PAGE, tab=MORE))


def test_each_tab_says_what_to_look_at_and_draws_only_its_own_charts(ring_shipped):
    seen = []
    for tab in (None, MEASURED, MORE):
        at = open_page(PAGE, tab=tab)
        assert "What to look at" in texts(at, "caption"), tab
        seen.append({c for df in chart_data(at) for c in df.columns})
    model, measured, more = seen
    assert {"step", "device", "work"} <= model and "start_ms" not in model and "speedup" not in model
    assert {"start_ms", "speedup"} <= measured and "work" not in measured
    assert not more  # one ring size ships here: its scaling is a table, not a chart


def test_custom_shape_sets_the_model_and_the_ring_is_causal():
    at = open_page(PAGE, CUSTOM)  # B2 T32 S48 N4 K2 H16 float32 causal
    assert at.toggle(key="p11_causal").value is True
    assert "B=2, N=4, K=2, H=16, float32, causal" in texts(at)
    costs = frame_with(at, "hidden")
    assert costs[costs["T"] == 1024].iloc[0]["bytes"] == 2 * 2 * (1024 // 4) * 2 * 16 * 4
    assert set(grid_of(at)["compute"]) >= {"diagonal"}


def test_ring_grid_p4_causal_balanced_gives_every_device_equal_work_and_contiguous_does_not():
    at = set_ring(open_page(PAGE), 4, True, "zigzag")
    work = grid_of(at).groupby("device")["work"].sum()
    assert work.nunique() == 1 and work.iloc[0] == 2.0
    assert "2 on the busiest GPU and 2 on the idlest" in texts(at)
    work = grid_of(set_ring(at, 4, True, "contiguous")).groupby("device")["work"].sum()
    assert list(work) == [0.5, 1.5, 2.5, 3.5]


def test_step_slider_describes_each_step_and_survives_a_smaller_ring():
    at = set_ring(open_page(PAGE), 8, False, "zigzag")
    at.slider(key="p11_step").set_value(7).run()
    assert "Step 7 of 7" in texts(at, "info") and "nothing is sent" in texts(at, "info")
    at = set_ring(at, 2, False, "zigzag")
    assert "Step 1 of 1" in texts(at, "info")


def test_with_shipped_ring_results_the_timeline_speedup_and_scaling_charts_render(ring_shipped):
    at = open_page(PAGE)
    assert any("TFLOP/s" in m.value for m in at.metric) and "one GPU, non-causal" in texts(at)  # the model's rates
    at = open_page(PAGE, tab=MEASURED)
    assert "Measured on 2 × NVIDIA H200" in texts(at)
    data = chart_data(at)
    timeline = next(c for c in data if "start_ms" in c.columns)
    assert set(timeline["part"]) == {"compute", "transfer"}
    assert set(timeline["schedule"]) == {"overlapped", "one after the other"}
    speed = next(c for c in data if "speedup" in c.columns and "ms" in c.columns)
    assert {ring_results.VARIANTS["ring_fenced"], ring_results.VARIANTS["ring"], "all-gather",
            "ring, contiguous (unbalanced)"} <= set(speed["implementation"])
    orders = [str(t.value) for t in at.table]  # what the compiler scheduled, in words
    assert any("send starts → cuDNN attention → wait for the send" in o for o in orders), orders
    assert "transfer hidden" in " ".join(m.label for m in at.metric)
    assert "T = [256]" in texts(at)  # the length the benchmark skipped is named
    at.radio(key="p11_mask").set_value("causal").run()
    assert not at.exception
    assert len(charts(at)) >= 2
    at = open_page(PAGE, tab=MORE)
    assert any({"efficiency", "P"} <= set(f.columns) for f in frames(at))  # scaling: one ring size, a table
    assert "there is no scaling line to draw yet" in texts(at)
    assert "Not measured (no results ship): 4 GPUs, 8 GPUs" in texts(at)


def test_no_live_ring_on_a_cpu_and_the_page_says_why():
    at = open_page(PAGE, tab=MORE)
    assert "so the ring cannot run here" in texts(at)
    assert "device(s)" not in texts(at)  # "(1 CPU device(s))": the count in words, singular or plural
    assert re.search(r"\(\d+ CPU devices?\)", texts(at))
    assert not [b for b in at.button if b.key == "btn_p11_live"]



@pytest.mark.gpu
def test_live_ring_on_several_gpus_matches_one_gpu():
    if jax.device_count() < 2:
        pytest.skip("needs two GPUs")
    at = open_page(PAGE, {"batch": "1", "q_len": "1024", "kv_len": "1024", "heads": "8", "kv_heads": "8",
                          "head_dim": "64", "dtype": "bfloat16", "causal": "true"}, tab=MORE)
    button(at, "btn_p11_live").click().run()
    assert not at.exception
    assert float(metric(at, "relative error vs one GPU")) < 2e-2


def test_speed_up_lines_are_saturated_and_skipped_squares_differ_from_partly_skipped(ring_shipped):
    # seven variants drew in the palette's pale extra hues; 'partly skipped' (#fdd0a2) and 'skipped' (#eeeeee)
    # squares were two pale tints a newcomer could not tell apart
    import json

    from pages import ring_ui

    specs = [json.loads(s) for s in charts(open_page(PAGE, tab=MEASURED))]
    speed = next(s for s in specs if "speed-up vs one GPU" in json.dumps(s))
    ranges = [e["scale"]["range"] for e in _encodings(speed, "color") if "range" in e.get("scale", {})]
    assert ranges and all(c in ring_ui.VARIANT_COLORS for c in ranges[0])
    assert '"strokeWidth": 2.5' in json.dumps(speed)
    kinds = dict(zip(ring_ui.KINDS, ring_ui.KIND_COLORS, strict=True))
    assert kinds["skipped"] == "#ffffff" and kinds["partly skipped"] == "#f58518"
    grid = next(s for s in (json.loads(c) for c in charts(open_page(PAGE))) if "computes" in json.dumps(s))
    assert '"symbolStrokeColor": "#555"' in json.dumps(grid)  # the white square has an outline in the legend


def _encodings(spec, channel):
    """Every `channel` encoding anywhere in a Vega-Lite spec (layers, facets)."""
    found = []
    if isinstance(spec, dict):
        if channel in (spec.get("encoding") or {}):
            found.append(spec["encoding"][channel])
        for v in spec.values():
            found += _encodings(v, channel)
    elif isinstance(spec, list):
        for v in spec:
            found += _encodings(v, channel)
    return found
