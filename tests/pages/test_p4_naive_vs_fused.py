"""Page 4 · Naive vs fused, on the CPU backend (GPU-only checks marked `gpu`)."""

import json
import re

import jax
import numpy as np
import pytest

from attnlab.math.checks import TOLERANCES
from attnlab.shapes import AttentionShape
from tests.apptest_util import (
    CUSTOM,
    CUSTOM_SHAPE,
    HEAVY,
    button,
    chart_data,
    charts,
    codes,
    frame_with,
    frames,
    metric,
    open_page,
    record_runs,
    texts,
)

PAGE = "pages/p4_naive_vs_fused.py"
on_gpu = jax.default_backend() == "gpu"
FLOAT_PATHS = ["naive", "sdpa_auto", "sdpa_xla", "sdpa_cudnn", "te_dpa"]


def test_valid_but_heavy_link_opens_and_runs_nothing_heavy_without_a_click(monkeypatch):
    calls = record_runs(monkeypatch)
    at = open_page(PAGE, HEAVY)
    assert all(not kw.get("accuracy", True) and not kw.get("timed") for kw in calls), calls  # compiles only
    assert button(at, "btn_p4_same").label.startswith("Run naive")  # the float64 check waits for a click
    assert not [m for m in at.metric if m.label.startswith("max |naive")]


def test_says_implementation_none_compiled_to_xla_own_code_on_this_machine():
    at = open_page(PAGE)
    said = " ".join(s.value for s in at.success)
    if on_gpu:  # JAX 0.4.35..0.11: still XLA on a GPU; the day it picks cuDNN this test says so
        assert "implementation=None" in said
    else:
        assert "`implementation=None` compiled to **XLA's own code" in said
        assert 'the very same program as `implementation="xla"`' in said
        assert "cannot compile here" in texts(at, "info")  # cuDNN's side, with its reason
    progs = next(t.value for t in at.table if "what ran" in t.value.columns)
    assert progs.loc["sdpa_auto", "what ran"].startswith("XLA's own code")


@pytest.mark.parametrize("params,shape", [({}, AttentionShape()), (CUSTOM, CUSTOM_SHAPE)])
def test_same_shape_and_allclose_on_a_small_shape(params, shape):
    at = open_page(PAGE, params)
    assert metric(at, "naive output") == str(shape.q_shape())
    assert metric(at, "SDPA output") == str(shape.q_shape())
    assert metric(at, "allclose") == "True"
    assert float(metric(at, "max |naive − SDPA|")) < TOLERANCES[shape.dtype]["atol"]
    acc = frame_with(at, "relative_error")
    assert {"naive", "sdpa_auto", "sdpa_xla"} <= set(acc["implementation"])
    assert acc[acc.implementation.isin(FLOAT_PATHS)]["allclose"].all()
    assert "def naive_attention" in codes(at)[0] and "einsum" in codes(at)[0]  # the four lines lead
    assert any("def attention" in c for c in codes(at)[1:])  # the lab's own, below them


def test_max_difference_is_explained_and_labels_are_short():
    at = open_page(PAGE)
    caption = texts(at, "caption")
    assert ("compiled to different programs here" in caption
            or "compiled to the same program here, so they agree exactly" in caption)
    assert "exactly 0 means every rounding" not in caption  # "different programs" beside "every rounding the same" read as a contradiction
    assert all(len(m.label) <= 28 for m in at.metric), [m.label for m in at.metric]


def test_timing_button_reports_wall_time_and_offers_only_what_runs():
    at = open_page(PAGE, CUSTOM)
    button(at, "btn_p4_time").click().run()
    assert not at.exception
    timed = frame_with(at, "wall_ms")
    assert (timed["wall_ms"] > 0).all()
    assert "Wall spread (the middle half of the samples, IQR) is" in texts(at, "caption")  # how far to trust a difference
    if not on_gpu:
        assert "sdpa_cudnn" not in set(timed["implementation"])
        assert "need an NVIDIA GPU" in texts(at)
        assert "kernels" not in timed.columns  # no empty "kernels (GPU time each)" column on a CPU


def test_compiled_memory_slopes_are_measured_and_every_line_explained():
    at = open_page(PAGE, CUSTOM)
    button(at, "btn_p4_memory").click().run()
    assert not at.exception
    chart = next(c for c in chart_data(at) if "temp_bytes" in c.columns)
    n = chart[chart.implementation == "naive"].set_index("q_len")["temp_bytes"]
    assert list(n.index) == ([256, 512, 1024] if on_gpu else [128, 256, 512, 1024])
    said = texts(at, "markdown")
    for impl in set(chart["implementation"]):  # every line has its slope and its reason
        m = re.search(rf"\*\*{impl}\*\*: ×[\d,]+ from T = [\d,]+ to 1,024, slope ([\d.]+) \((.+?)\): \w", said)
        assert m, (impl, said)
        x = chart[chart.implementation == impl].set_index("q_len")["temp_bytes"]
        assert float(m[1]) == pytest.approx(np.log(x[1024] / x.iloc[0]) / np.log(1024 / x.index[0]), abs=0.05)
    xla = chart[chart.implementation == "sdpa_xla"].set_index("q_len")["temp_bytes"]
    assert xla[1024] >= CUSTOM_SHAPE.replace(q_len=1024, kv_len=1024).score_bytes()  # XLA holds the scores
    at.radio(key="p4_mem_measure").set_value(at.radio(key="p4_mem_measure").options[1]).run()
    chart = next(c for c in chart_data(at) if "total_bytes" in c.columns)
    assert (chart["total_bytes"] > chart["temp_bytes"]).all()


def test_overlapping_memory_lines_are_said_to_overlap(with_shipped):
    at = open_page(PAGE, CUSTOM)  # the stand-in ships equal scratch for naive and sdpa_xla
    assert re.search(r"\*\*naive\*\* and \*\*sdpa_xla\*\* lie on top of each other", texts(at, "caption"))
    spec = next(s for s in charts(at) if "strokeDash" in s)
    assert '"shape"' in spec and "strokeDash" in spec  # markers and dashes tell overlapping lines apart


def test_one_colour_per_implementation_on_every_chart(with_shipped):
    at = open_page(PAGE, CUSTOM)
    from attnlab.backends import REGISTRY

    specs = [json.loads(s) for s in charts(at) if '"implementation"' in s]
    domains = [layer["encoding"]["color"]["scale"]["domain"] for spec in specs
               for layer in spec.get("layer", [spec]) if "color" in layer.get("encoding", {})
               and layer["encoding"]["color"].get("field") == "implementation"]
    assert domains and all(d[: len(REGISTRY)] == list(REGISTRY) for d in domains)  # the registry's order
    ranges = [layer["encoding"]["color"]["scale"]["range"] for spec in specs
              for layer in spec.get("layer", [spec]) if layer.get("encoding", {}).get("color", {}).get("field")
              == "implementation"]
    assert all(r == ranges[0] for r in ranges) and len(set(ranges[0])) == len(REGISTRY)
    # no implementation is drawn in a pale grey that reads as "disabled" on the page's light background
    assert all(sum(int(c[i:i + 2], 16) for i in (1, 3, 5)) < 3 * 0xD0 for c in ranges[0])


def test_shipped_memory_is_labelled_and_page_5s_block_is_not_repeated_here(with_shipped):
    said = texts(open_page(PAGE, CUSTOM))
    assert "Shipped from the H200" in said
    # page 5's shipped XLA-at-scale block was shown here too, word for word
    assert "Measured on the H200 (shipped)" not in said and 'implementation="xla" (what None runs)' not in said
    assert 'implementation="xla" (what None runs)' in texts(open_page("pages/p5_cudnn.py", CUSTOM))


def test_without_shipped_page_5_names_the_model(without_shipped):
    assert "shape.score_bytes()" in texts(open_page("pages/p5_cudnn.py", CUSTOM))


def test_backward_memory_compiled_here_explains_log_sum_exp():
    at = open_page(PAGE, CUSTOM)
    said = texts(at, "markdown")
    assert "log-sum-exp" in said and "recomputes the scores tile by tile" in said
    button(at, "btn_p4_backward").click().run()
    assert not at.exception
    chart = next(c for c in chart_data(at) if "temp_bytes" in c.columns and "pass" in c.columns
                 and (c["pass"] == "forward+backward").all())
    assert {"naive", "sdpa_xla"} <= set(chart["implementation"])
    assert "forward+backward scratch here" in " ".join(charts(at))


@pytest.mark.gpu
def test_names_the_cudnn_kernel_and_its_device_time_on_gpu():
    at = open_page(PAGE, {**CUSTOM, "dtype": "bfloat16"})
    prog = next(t.value for t in at.table if "what ran" in t.value.columns)
    assert "cuDNN" in prog.loc["sdpa_cudnn", "what ran"]
    button(at, "btn_p4_time").click().run()
    timed = frame_with(at, "wall_ms").set_index("implementation")
    assert timed.loc["sdpa_cudnn", "device_ms"] > 0
    assert len(frames(at))


def test_whether_two_programs_are_one_is_kept_by_the_device_worker_for_every_ui_process(monkeypatch):
    # page 4 says whether naive and SDPA compiled to one program: another UI process (nothing of this one's
    # st.cache_data) asking the same is answered from the worker's kept results, without compiling again
    import streamlit as st

    from attnlab.measure import compiled
    from pages import fused_ui

    shape = AttentionShape(batch=1, q_len=24, kv_len=24, heads=2, kv_heads=2, head_dim=8)
    first = fused_ui.same_program(shape, "naive", "sdpa_auto")
    st.cache_data.clear()  # as another UI process: nothing of this one in its memory
    monkeypatch.setattr(compiled, "compile_backend", lambda *a, **k: pytest.fail("compiled again"))
    assert fused_ui.same_program(shape, "naive", "sdpa_auto") == first


def test_the_memory_caption_names_one_budget_and_todays_rule_for_shipped_refusals():
    # the shipped H200 tables refuse T = 16,384 by today's one rule (attnlab/shipped/refusals.py): no "different caps"
    words = texts(open_page(PAGE), "caption")
    assert "80 % of the GPU memory free when the device worker starts" in words
    assert "Shipped refusals are restated by today's rule" in words
    assert "different caps" not in words and "as its run wrote it" not in words
    # the shipped out-of-memory rows (naive and XLA, forward+backward at T = 8,192) need 148.5 GiB by today's
    # estimate, over today's budget: they passed the estimate of the version that ran them, not today's
    assert "passed the estimate the lab made when it ran (a shipped one, an older version's)" in words


def test_the_queue_notice_counts_runs_in_words(monkeypatch):
    # "1 run(s) on the device": one run, or several runs
    import dataclasses

    from pages import workers

    real = workers.worker_info
    monkeypatch.setattr(workers, "worker_info", lambda: dataclasses.replace(real(), running=1, waiting=2))
    at = open_page(PAGE, CUSTOM)
    button(at, "btn_p4_time").click().run()
    said = texts(at, "info")
    assert "1 run on the device, 2 waiting (as of the last 30 s)" in said and "run(s)" not in said


@pytest.mark.skipif(on_gpu, reason="the known abort is XLA's CPU compiler's")
def test_a_known_abort_is_said_once_for_every_implementation_it_stops():
    at = open_page(PAGE, {"dtype": "bfloat16", "head_dim": "1"})
    tables = [str(f.values.tolist()) for f in frames(at)]
    assert [t.count("known to crash at bfloat16 with head_dim 1") for t in tables if "known to crash" in t] == [1, 1]
    assert any("sdpa_auto, sdpa_xla" in t for t in tables)  # Not run here: one row naming both
    assert any("as for sdpa_auto" in t for t in tables)  # the compiled programs: said on its first row
    if jax.default_backend() == "cpu":  # XLA's own words once, behind an expander, never in a table or a sentence
        (words,) = [e for e in at.expander if "What the compiler said" in e.label]
        assert "Check failed" in " ".join(c.value for c in words.code)
        assert not any("Check failed" in t for t in tables) and "Check failed" not in texts(at)
