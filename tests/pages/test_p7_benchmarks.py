"""AppTests for page 7 (Benchmarks), run through app.py at the codelab's shape and at small shapes from
the URL; sweeps are clicked with tiny shapes. The shipped H200 results are the small stand-in of
tests/apptest_util.py (`with_shipped`) or absent (`without_shipped`)."""

from __future__ import annotations

import dataclasses
import inspect
import json

import jax
import pandas as pd
import pytest

pytest.importorskip("streamlit")

from attnlab import admission, device, shipped
from attnlab.backends import REGISTRY  # noqa: E402
from attnlab.measure import timing
from attnlab.shapes import AttentionShape  # noqa: E402
from attnlab.studies import clocks, timing_demo  # noqa: E402
from pages import benchmarks_ui  # noqa: E402
from tests.apptest_util import SMALL, button, chart_data, charts, codes, frame_with, frames, open_page, texts  # noqa: E402

P7 = "pages/p7_benchmarks.py"
HOW, SWEEPS, LONG = ("p7_tab", "How it is timed"), ("p7_tab", "Sweeps"), ("p7_tab", "Long context on an H200")
ON_CPU = jax.default_backend() != "gpu"
SMALL_SHAPE = AttentionShape(batch=1, q_len=32, kv_len=32, heads=4, kv_heads=2, head_dim=16)


def supported(shape: AttentionShape) -> list[str]:
    info = device.info()
    return [n for n, b in REGISTRY.items() if b.unmet(shape, info) is None]


def timings(at) -> pd.DataFrame:
    (table,) = [d for d in frames(at, "wall_ms") if "compile" in d]  # on a GPU a kernels table has wall_ms too
    return table


def run_sweep(at, key: str, field: str, impls: list[str], values: list[int], dtypes=("float32", "bfloat16")):
    at.multiselect(key=f"{key}_impls").set_value(impls)
    at.multiselect(key=f"{key}_values").set_value(values)
    at.multiselect(key=f"{key}_dtypes").set_value(list(dtypes))
    at.run()
    button(at, f"btn_{key}").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return next(d for d in frames(at, field) if "dtype" in d and "pass" in d)


# --------------------------------------------------------------------------------------------
# at your shape
# --------------------------------------------------------------------------------------------
CODELAB_THREE = ("naive", "sdpa_xla", "sdpa_cudnn")  # timed on load; every other implementation on the button


def every_implementation(at):
    """Turn on 'all implementations' and press the timing button."""
    at.toggle(key="p7_every").set_value(True).run()
    button(at, "btn_p7_here").click().run()
    assert not at.exception
    return at


def test_benchmarks_page_times_the_codelabs_three_on_load_and_every_implementation_on_a_click(without_shipped):
    at = open_page(P7)
    table = timings(at)
    here = supported(AttentionShape())
    assert sorted(table["implementation"]) == sorted(n for n in CODELAB_THREE if n in here)
    assert (table["wall_ms"] > 0).all() and (table["tflops"] > 0).all()
    assert len(charts(at)) >= 2  # timing bars and TFLOP/s bars
    assert sorted(timings(every_implementation(at))["implementation"]) == sorted(here)


@pytest.mark.skipif(not ON_CPU, reason="on a GPU cuDNN runs")
def test_in_a_class_the_opening_timings_are_untuned_and_say_so_and_a_click_times_them_autotuned(without_shipped,
                                                                                                 monkeypatch):
    from pages import workers
    from tests.apptest_util import record_runs

    monkeypatch.setattr(workers, "in_class", lambda: True)
    monkeypatch.setattr(workers, "device_info", lambda: dataclasses.replace(device.info(), backend="gpu"))  # a GPU's
    calls = record_runs(monkeypatch)
    at = open_page(P7, {**SMALL, "q_len": "24", "kv_len": "24"})  # a shape no other test times
    assert [c.get("tuned") for c in calls if c.get("timed")] == [False]
    assert "without XLA's autotuning" in texts(at)
    button(at, "btn_p7_tuned").click().run()
    assert [c.get("tuned") for c in calls if c.get("timed")] == [False, None]
    assert "without XLA's autotuning" not in texts(at)


def test_in_a_class_on_cpus_the_opening_timings_are_as_everywhere_else(without_shipped, monkeypatch):
    """XLA's CPU backend does not autotune: nothing to say, no second button (a class on fake GPUs in CI)."""
    from pages import workers
    from tests.apptest_util import record_runs

    monkeypatch.setattr(workers, "in_class", lambda: True)
    calls = record_runs(monkeypatch)
    at = open_page(P7, {**SMALL, "q_len": "26", "kv_len": "26"})
    assert [c.get("tuned") for c in calls if c.get("timed")] == [None]
    assert "without XLA's autotuning" not in texts(at) and not [b for b in at.button if b.key == "btn_p7_tuned"]


def test_benchmarks_page_says_why_cudnn_and_cupti_need_a_gpu_on_cpu(without_shipped):
    at = open_page(P7, SMALL)
    (why,) = frames(at, "why not")
    (row,) = [r for _, r in why.iterrows() if "sdpa_cudnn" in r["implementation"].split(", ")]  # one reason, one row
    assert "CUDA GPU" in row["why not"] and why["why not"].is_unique
    assert "CUPTI" in texts(at, "info")


def test_benchmarks_page_at_a_custom_shape_from_the_url(without_shipped):
    at = open_page(P7, SMALL)
    assert SMALL_SHAPE.describe() in texts(at, "header")
    assert sorted(timings(every_implementation(at))["implementation"]) == sorted(supported(SMALL_SHAPE))


def test_the_page_is_five_tabs_each_saying_what_to_look_at(without_shipped):
    at = open_page(P7, SMALL)
    assert [t.label for t in at.tabs] == ["At your shape", "How it is timed", "Sweeps", "Long context on an H200",
                                          "NVIDIA's H200 table"]
    said = [texts(open_page(P7, SMALL, tab=("p7_tab", t.label)), "caption").count("What to look at")
            for t in at.tabs[:3]]  # the long-context tab says it only with data
    assert said == [1, 1, 1]


def test_a_closed_tab_is_not_run_until_it_is_opened(without_shipped):
    at = open_page(P7, SMALL)  # opens at its first tab: the demonstration and the sweeps' controls wait
    assert not frames(at, "what it is") and not [m for m in at.multiselect if m.key == "p7_seq_values"]
    assert "How the harness times a call" not in texts(at, "header")
    at = open_page(P7, SMALL, tab=HOW)
    assert frames(at, "what it is") and "How the harness times a call" in texts(at, "header")
    assert not frames(at, "compile"), "the first tab's timings wait until it is opened again"


def test_a_program_compiled_before_says_cached_and_the_spread_is_shown(without_shipped):
    at = every_implementation(open_page(P7, SMALL))
    table = timings(at).set_index("implementation")
    if ON_CPU:  # sdpa_auto and sdpa_xla are one program: the second is not a compile
        pair = table.loc[["sdpa_auto", "sdpa_xla"], "compile"]  # whichever was compiled second names the other
        assert any("(sdpa_xla's)" in c for c in pair) or any("(sdpa_auto's)" in c for c in pair), list(pair)
        assert "same program" in texts(at, "markdown")
    assert table["compile"].str.contains("ms").all()
    assert (table["wall_ms_iqr"] >= 0).all() and "wall_spread_pct" in table
    assert "Wall spread" in texts(at, "markdown")


def test_notes_explain_throughput_above_wall_and_noise_between_identical_programs():
    row = {"status": "ok", "wall_ms_iqr": 0.1, "compile_ms": 1.0}
    df = pd.DataFrame([{**row, "implementation": "sdpa_auto", "wall_ms": 1.0, "throughput_ms": 2.0,
                        "compiled_before": None},
                       {**row, "implementation": "sdpa_xla", "wall_ms": 3.0, "throughput_ms": 1.0,
                        "compiled_before": "sdpa_auto at B1 T32"}])
    text = " ".join(timing_demo.notes(timing_demo.annotate(df), on_gpu=False))
    assert "more than their spread" in text and "noise" in text
    assert "Throughput time is above wall time for sdpa_auto" in text and "same cores" in text
    assert timing_demo.compile_text(0.8, "sdpa_auto at B1").startswith("cached")
    assert not timing_demo.compile_text(900.0, "sdpa_auto at B1").startswith("cached")


def test_a_large_shape_waits_for_its_button(without_shipped):
    at = open_page(P7, {"batch": "16", "q_len": "2048", "kv_len": "2048"})
    assert not frames(at, "compile") and any(b.key == "btn_p7_here" for b in at.button)
    assert "press the button" in texts(at, "info")


def test_a_timing_the_cost_model_puts_over_20_s_is_announced_before_its_button(without_shipped, monkeypatch):
    import re

    from attnlab.measure import cost, timing

    monkeypatch.setattr(cost, "attention_rate", lambda dtype: 1e9)  # a slow device: 1 GFLOP/s
    big = open_page(P7, {"batch": "4", "q_len": "1024", "kv_len": "1024"})  # 8.6 GFLOP a call
    (label,) = [b.label for b in big.button if b.key == "btn_p7_here"]
    n = int(re.search(r"Time (\d+) implementations", label).group(1))
    said = texts(big, "warning")
    want = n * (timing.MIN_CALLS + 1) * AttentionShape(batch=4, q_len=1024, kv_len=1024).flops() / 1e9
    assert f"about {want:,.0f} s here" in said and "other learners' runs wait" in said, said
    assert "about" not in texts(open_page(P7, {"batch": "1", "q_len": "512", "kv_len": "512"}), "warning")


# --------------------------------------------------------------------------------------------
# how it is timed
# --------------------------------------------------------------------------------------------
def test_the_harness_code_shown_is_the_code_that_runs():
    shown, source = timing_demo.harness_source(), inspect.getsource(timing.time_compiled)
    for part in shown.split("\n    ...\n"):
        for line in part.splitlines():
            assert line.strip() in source
    for word in ("block_until_ready", "perf_counter", "statistics.median", "warmup"):
        assert word in shown


def test_the_dispatch_demonstration_shows_queuing_is_cheaper_than_waiting(without_shipped):
    at = open_page(P7, tab=HOW)  # the codelab's shape: a call costs far more than its dispatch
    assert timing_demo.harness_source().splitlines()[0] in "\n".join(c for c in codes(at))
    demo = frame_with(at, "what it is").set_index("measured")
    assert any("what it is" in t.value.columns for t in at.table)  # a static table: its sentences wrap, not cut
    ms = demo["ms per call"].map(lambda x: float(str(x).replace(",", "")))
    no_wait, wall = ms["one call, no wait"], ms["one call + block_until_ready (wall)"]
    assert 0 < no_wait < wall
    assert "block_until_ready" in texts(at, "markdown") and "queued" in texts(at, "markdown")


# --------------------------------------------------------------------------------------------
# sweeps
# --------------------------------------------------------------------------------------------
def test_sequence_and_batch_sweeps_run_on_their_buttons_with_both_dtypes(without_shipped):
    at = open_page(P7, SMALL, tab=SWEEPS)
    assert not [d for d in frames(at, "q_len") if "pass" in d], "no sweep before its button"
    seq = run_sweep(at, "p7_seq", "q_len", ["naive", "sdpa_xla"], [64, 128])
    assert len(seq) == 8 and (seq["wall_ms"] > 0).all()  # the table lists the cells that ran
    assert set(seq["dtype"]) == {"float32", "bfloat16"}
    spec = next(s for s in charts(at) if '"q_len"' in s and "strokeDash" in s)
    assert '"dtype"' in spec and '"implementation"' in spec  # dash per dtype, colour per implementation

    batch = run_sweep(at, "p7_batch", "batch", ["sdpa_xla"], [1, 2], dtypes=("float32",))
    assert sorted(batch["batch"]) == [1, 2]
    assert len(at.download_button) == 2  # sequence sweep, batch sweep (the timings of the first tab: not drawn)


def test_sweep_lists_cells_that_do_not_fit_with_their_reason(without_shipped, small_memory_cap, monkeypatch):
    monkeypatch.setattr(admission.DEVICE, "_budget", None)  # read the cap now, not the budget an earlier test saw
    # 64 MiB: naive's float32 scores at T = 1024 (B1 N16: 2 x 64 MiB) do not fit, at T = 64 they do
    at = open_page(P7, {"batch": "1", "heads": "16", "kv_heads": "16", "head_dim": "8"}, tab=SWEEPS)
    seq = run_sweep(at, "p7_seq", "q_len", ["naive"], [64, 1024], dtypes=("float32",))
    assert list(seq["q_len"]) == [64]
    bad = next(d for d in frames(at, "reason") if "q_len" in d).set_index("q_len")
    assert "budget" in bad.loc[1024, "reason"] and bad.loc[1024, "implementation"] == "naive"


def test_a_sweep_that_would_take_minutes_says_so_instead_of_offering_its_button(without_shipped):
    at = open_page(P7, tab=SWEEPS)  # the codelab's shape at T = 16,384: ~2e12 FLOPs a call, ten calls a cell
    at.multiselect(key="p7_seq_values").set_value([16384]).run()
    assert not at.exception
    assert any("would hold this CPU for at least" in w.value for w in at.warning)
    assert "btn_p7_seq" not in [b.key for b in at.button] and "btn_p7_batch" in [b.key for b in at.button]


def test_cpu_sweep_defaults_are_small(without_shipped):
    at = open_page(P7, tab=SWEEPS)
    if ON_CPU:
        assert max(at.multiselect(key="p7_seq_values").value) <= 256
        assert at.multiselect(key="p7_seq_dtypes").value == ["float32", "bfloat16"]


# --------------------------------------------------------------------------------------------
# shipped H200 results
# --------------------------------------------------------------------------------------------
def test_benchmarks_page_says_when_no_shipped_results(without_shipped):
    at = open_page(P7, SMALL)
    assert "No H200 results ship" in texts(at, "info")
    assert "Measured on" not in texts(at, "caption")


def test_benchmarks_page_shows_the_shipped_results_only_when_they_exist(with_shipped):
    at = open_page(P7, SMALL, tab=LONG)
    assert "No H200 results ship" not in texts(at, "info")
    assert "Measured on NVIDIA H200" in texts(at, "caption")
    assert "700 TFLOP/s" in [m.value for m in at.metric]  # the ceiling, from the shipped results
    assert [s for s in charts(at) if "forward+backward" in s], "long-context chart"
    left_out = next(d for d in frames(at, "reason") if "q_len" in d and "pass" in d)
    assert "naive" in set(left_out[left_out["q_len"] == 4096]["implementation"])  # left out, with its reason


def test_fidelity_columns_have_labels_with_units(with_shipped):
    at = open_page(P7, SMALL, tab=LONG)
    shown, every = frames(at, "harness_over_bare")
    # the table in view fits the page's width (twelve columns scrolled sideways); the rest are one click away
    assert len(shown.columns) <= 5 and set(shown.columns) <= set(every.columns)
    assert {"harness_over_bare", "harness_tflops", "bare_tflops"} <= set(shown.columns)
    for d in at.dataframe:
        if "harness_over_bare" in d.value.columns:
            config = json.loads(d.proto.columns)
            assert set(d.value.columns) <= set(config)
            assert config["harness_over_bare"]["label"] == "harness ÷ bare loop, TFLOP/s (×)"


def test_memory_refusals_and_out_of_memory_are_told_apart_under_the_shipped_tables():
    # the shipped H200 long-context table (the real one) refuses some lengths over one run's cap and lists
    # XLA's out-of-memory for others: a newcomer reads different limits unless the page says what each is
    long = shipped.frame("long_context")
    assert (long["status"] == "over the memory budget").any() and (long["status"] == "out of memory").any()
    at = open_page(P7, SMALL, tab=LONG)
    assert "Two kinds of memory failure" in texts(at, "caption")
    # one budget, the GPU's memory beside it (the file's own reasons named caps of 52.43, 52.05 and 51.68 GiB)
    reasons = " ".join(str(v) for f in frames(at, "reason") for v in f["reason"])
    assert "83.88 GiB: 80 % of the 104.85 GiB JAX's allocator may use of the H200's 141 GB" in reasons
    assert "cap of" not in reasons


def test_the_shipped_sweeps_are_the_codelabs_table_of_ms_per_call_and_a_chart_of_a_chosen_axis():
    # the real shipped sweeps: the codelab prints ms per call, one column per implementation
    at = open_page(P7, SMALL, tab=SWEEPS)
    seq = next(d for d in frames(at, "q_len") if "sdpa_cudnn" in d.columns and "wall_ms" not in d.columns)
    batch = next(d for d in frames(at, "batch") if "sdpa_cudnn" in d.columns and "wall_ms" not in d.columns)
    ref = shipped.frame("seq_sweep").query("status == 'ok' and implementation == 'naive'").set_index("q_len")
    assert seq.set_index("q_len").loc[1024, "naive"] == pytest.approx(ref.loc[1024, "wall_ms"], abs=1e-3)
    # each median beside its spread: the page says two runs of one cell differ by about it (issue 42)
    assert seq.set_index("q_len").loc[1024, "naive IQR"] == pytest.approx(ref.loc[1024, "wall_ms_iqr"], abs=1e-4)
    assert list(batch["batch"]) == sorted(batch["batch"]) and 16 in set(batch["batch"])
    assert any("H200: wall" in s for s in charts(at))  # wall ms first: what the codelab prints
    at.selectbox(key="p7_seq_ship_y").set_value("device_tflops").run()
    assert not at.exception and any("H200: device TFLOP/s" in s for s in charts(at))
    assert "bfloat16 only" in texts(at, "caption")


def test_lines_on_top_of_each_other_are_drawn_dashed_and_named(with_shipped):
    # the stand-in gives sdpa_xla, sdpa_cudnn and te_dpa identical numbers: they overlap everywhere
    at = open_page(P7, SMALL, tab=LONG)
    assert "overlap: within 3%" in texts(at, "caption")
    assert any("line" in d and d["line"].str.startswith("dashed").any() for d in chart_data(at))
    pairs = timing_demo.overlapping(pd.DataFrame({"q_len": [1, 2, 1, 2], "implementation": ["a", "a", "b", "b"],
                                                  "y": [1.0, 2.0, 1.005, 2.0]}), "q_len", "y")
    assert pairs == [("a", "b")]


# --------------------------------------------------------------------------------------------
# on a GPU (python -m attnlab gpucheck runs these there)
# --------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_benchmarks_page_on_a_gpu_shows_device_time_and_kernels():
    at = open_page(P7, {"dtype": "bfloat16"})
    (table,) = [d for d in frames(at, "wall_ms") if "kernels" in d]  # "What ran on the GPU"
    assert "sdpa_cudnn" in set(table["implementation"])
    assert table.set_index("implementation").loc["sdpa_cudnn", "device_ms"] > 0


@pytest.mark.parametrize("params", [
    {"q_len": "12abc", "heads": "<script>"},
    {"kv_heads": "3"},
    {"dtype": "float8", "causal": "maybe"},
])
def test_hostile_query_strings_give_messages_not_exceptions(params):
    at = open_page(P7, params)
    assert at.error, "the URL's problem is stated"
    assert "computes nothing" in texts(at, "warning")
    assert not frames(at, "wall_ms")


def test_one_kernels_shipped_tflops_are_set_side_by_side_each_with_its_clock_state():
    # cuDNN at B4 T8192 N16 H128 read 586, ~613, 646 and 595/685 TFLOP/s on four pages, only page 9 saying why
    at = open_page(P7, SMALL, tab=LONG)
    same = next(f for f in frames(at, "clock") if "where" in f.columns)
    assert list(same["TFLOP/s"].astype(float)) == [586.4, 564.2, 612.9, 645.5, 684.7, 594.8]
    assert set(same["clock"]) == {clocks.WARM, clocks.BOOST, clocks.SUSTAINED}
    words = texts(at, "caption")
    assert benchmarks_ui.CLOCK_NOTE in words  # clocks.NOTE, naming this page's tab as page 7 calls it
    # the copy's 3.37 TB/s is no ceiling: page 8's decode step reads faster
    assert "what bf16 attention can hope for" not in words and "yardsticks from two plain programs" in words


def test_the_clock_note_on_page_7_points_to_this_pages_tab_by_its_name():
    # "page 7's *Long context* tab" read on page 7 itself, under a tab called "Long context on an H200"
    for tab in (None, LONG):
        words = texts(open_page(P7, SMALL, tab=tab), "caption")
        assert "timed warm, with the clock not read" in words
        assert "page 7's" not in words and "this page's *Long context on an H200* tab" in words


@pytest.mark.skipif(not ON_CPU, reason="a Hopper GPU measures live (tests/test_gpu.py)")
def test_nvidias_table_on_a_cpu_shows_the_h200_measurement_labelled_beside_nvidias_figures(without_shipped):
    from attnlab.studies import vendor

    at = open_page(P7, SMALL, tab=("p7_tab", "NVIDIA's H200 table"))
    assert not at.exception, [e.value for e in at.exception]
    (table,) = [d for d in frames(at, "nvidia_tflops")]
    assert list(table["nvidia_tflops"]) == [r.tflops for r in vendor.VENDOR]
    measured = table.dropna(subset=["lab_tflops"])
    assert set(measured["seq"]) == {8192} and len(measured) == 4  # the H200 run: 8k rows, bf16 and FP8
    assert (measured["lab_over_nvidia"] - measured["lab_tflops"] / measured["nvidia_tflops"]).abs().max() < 1e-9
    said = f"{texts(at, 'info')} {texts(at, 'caption')}"
    assert "no Hopper GPU" in said and "measured on an H200" in said and "2026-12-03" in said
    assert not [b for b in at.button if b.key == "btn_p7_vendor"]  # nothing to press without a GPU


def test_the_last_shapes_timing_table_is_gone_while_the_new_shape_is_timed(without_shipped, monkeypatch):
    """A new shape in the sidebar times again at once (a small shape): while it runs, the table of the shape before
    is not on the screen as if it were this one's (issue 42: the old result stayed readable, only faded)."""
    from pages import common
    from tests.apptest_util import Screen

    at = open_page(P7, SMALL)
    screen = Screen(monkeypatch)
    at.number_input(key="shape_q_len").set_value(48).run()  # a first timing drawn under the eyes of `screen`
    screen.settle()
    assert "wall_spread_pct" in screen.text()  # the timing table (its columns travel with the table)
    during, real = [], common._on_device
    monkeypatch.setattr(common, "_on_device", lambda fn, args, kwargs: (
        during.append(screen.text()) if fn.endswith("runs:run") and dict(kwargs).get("timed") else None)
        or real(fn, args, kwargs))
    at.number_input(key="shape_q_len").set_value(64).run()
    assert not at.exception
    assert during and all("wall_spread_pct" not in seen for seen in during)
    assert "wall_spread_pct" in screen.text()  # and the new shape's table is drawn
