"""Page 10 · Inside the fused kernel: the flash algorithm step by step, memory traffic, the backward pass,
masks that skip tiles, and the shipped ladder (AppTest, CPU backend; a fake ladder stands in for the H200's)."""

import json

import pytest

from attnlab.studies import ladder, roofline
from tests.apptest_util import (
    CUSTOM,
    _row,
    button,
    chart_data,
    charts,
    codes,
    frames,
    metric,
    open_page,
    texts,
)

PAGE = "pages/p5b_fused_kernel.py"
MASKED = {**CUSTOM, "window": "8,0", "kv_lengths": "40,30"}
TABS = ["Step through", "Memory traffic", "The backward pass", "Masks that skip work", "The ladder"]
STEP, TRAFFIC, BACKWARD, MASKS, LADDER = (("p10_tab", t) for t in TABS)


def fake_ladder() -> dict:
    anchor = dict(q_len=8192, batch=4, head_dim=128, heads=16)
    rows = []
    for causal in (False, True):
        for rung, name in enumerate(ladder.LADDER):
            row = _row(name, causal=causal, ok=name != "tokamax_mosaic", **anchor)
            row.update(rung=rung, gflop=None, tflops=100.0 + 100 * rung, device_tflops=100.0 + 100 * rung if row["status"] == "ok"
                       else None)
            rows.append(row)
        rows.append({**_row("flash_jax", causal=causal, pass_="forward+backward", **anchor), "rung": 2})
    masks = [{**_row(n, **anchor), "mask": m, "device_ms": ms}
             for n in ("sdpa_cudnn", "sdpa_xla") for m, ms in zip([m for m, _ in ladder.masks(ladder.ANCHOR)],
                                                                   (3.1, 1.7, 0.55, 0.27, 0.88), strict=True)]
    env = {"date": "2000-01-01", "device": "NVIDIA H200", "compute_capability": "9.0", "driver": "test",
           "jax": "test", "cudnn": "test", "peak": {"bf16_tflops": 1000.0, "fp8_tflops": 2000.0}}
    return json.loads(json.dumps({
        "environment": env, "anchor": "B4 T8192 S8192 N16 K16 H128 bfloat16",
        "ceilings": {"matmul_bf16_tflops": 800.0, "copy_tb_s": 4.0}, "ladder": rows, "masks": masks,
        "ncu": {"sdpa_cudnn": {"kernel": "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128", "read_bytes": 2**30, "write_bytes": 2**28},
                "tokamax_mosaic": {"reason": "test reason: counters not readable"}}}))


@pytest.fixture
def no_ladder(monkeypatch):
    monkeypatch.setattr(ladder, "load_shipped", lambda: None)


@pytest.fixture
def with_ladder(monkeypatch):
    data = ladder.LadderRun.from_json(fake_ladder())
    monkeypatch.setattr(ladder, "load_shipped", lambda: data)
    return data


@pytest.mark.parametrize("params", [None, MASKED], ids=["default", "masked"])
def test_every_tab_renders(params, no_ladder):
    at = open_page(PAGE, params)
    assert [t.label for t in at.tabs] == TABS
    assert metric(at, "tile (Q block 0, K block 0)") in ("full", "partial", "skipped")
    assert any("def update(" in c for c in codes(at))  # the plain-JAX online softmax
    assert "GPU memory traffic (model)" not in "".join(charts(at)), "a closed tab is not run"
    assert "GPU memory traffic (model)" in "".join(charts(open_page(PAGE, params, tab=TRAFFIC)))
    assert any("◀ max" in c for c in codes(open_page(PAGE, params, tab=LADDER)))  # Pallas excerpt, lines marked
    assert "compute capability" not in texts(open_page(PAGE, params, tab=BACKWARD), "error")
    assert metric(open_page(PAGE, params, tab=MASKS), "tiles skipped").endswith("%")


def test_masks_start_from_the_sidebar_and_skip_tiles(no_ladder):
    at = open_page(PAGE, MASKED, tab=MASKS)
    assert at.toggle(key="p10_masks_causal").value and at.toggle(key="p10_masks_use_padding").value
    assert (at.number_input(key="p10_masks_left").value, at.number_input(key="p10_masks_length").value) == (8, 40)
    assert metric(at, "tiles skipped") != "0%"
    tiles = next(d for d in chart_data(at) if "kind" in d.columns and "state" in d.columns and d["K block j"].max() > 0
                 and len(d) != 16)
    assert {"skipped", "partial"} <= set(tiles["kind"])


def test_step_through_last_step_reaches_the_exact_output():
    at = open_page(PAGE)
    at.toggle(key="p10_walk_causal").set_value(True).run()
    slider = at.slider(key="p10_step")
    assert slider.max == 16  # 4 × 4 tiles of 4
    slider.set_value(slider.max).run()
    assert not at.exception
    assert float(metric(at, "max |partial − exact|")) < 1e-5
    tiles = next(d for d in chart_data(at) if "state" in d.columns and len(d) == 16)
    assert (tiles["state"] == "skipped").sum() == 6  # causal: the tiles above the diagonal
    assert tiles["current"].sum() == 1 and tiles.loc[tiles["current"], "step"].item() == 16
    table = next(f for f in frames(at) if "rescale exp(m_old − m_new)" in f.columns)
    assert len(table) == 4 and (table["rescale exp(m_old − m_new)"] <= 1).all()
    # the chart is the error, which starts high: "starts at 0" read as the line's start
    words = texts(at, "caption")
    assert "partial output starts at 0, so its line starts high" in words and "block starts at 0 and" not in words


def test_step_through_first_step_is_far_and_slider_shrinks_with_bigger_blocks():
    at = open_page(PAGE)
    assert float(metric(at, "max |partial − exact|")) > 1e-3  # one key block of four: not the answer yet
    at.slider(key="p10_step").set_value(10).run()
    at.select_slider(key="p10_bq").set_value(8).run()
    at.select_slider(key="p10_bk").set_value(8).run()
    assert not at.exception and at.slider(key="p10_step").max == 4 and at.slider(key="p10_step").value == 1



def test_absent_ladder_is_explained(no_ladder):
    at = open_page(PAGE, tab=LADDER)
    assert "Not measured yet: run `python -m attnlab ladder" in texts(at, "info")
    assert "Roofline" not in "".join(charts(at))
    assert "Expected on an H200 (reference figures" in " ".join(e.label for e in at.expander)
    assert "the model above is all there is" in texts(open_page(PAGE, tab=TRAFFIC), "info")


def test_fake_ladder_chart_table_and_roofline(with_ladder):
    at = open_page(PAGE, tab=LADDER)
    spec = "".join(charts(at))
    assert "Roofline" in spec and "best_tflops" in spec
    table = next(f for f in frames(at) if "what this rung adds" in f.columns)  # a wrapping st.table
    xla = table[(table["label"] == "sdpa_xla") & ~table["causal"].astype(bool)].iloc[0]
    assert float(xla["TFLOP/s"]) == 100 and float(xla["% of the bf16 matmul measured there (bf16 rungs)"]) == pytest.approx(12.5)
    fp8 = table[table["label"] == "cudnn_fp8"].iloc[0]
    assert float(fp8["% of datasheet peak (FP8 peak for FP8)"]) == pytest.approx(35.0)  # 700 of the FP8 peak 2000
    # an FP8 rung is never a share of the bf16 matmul (it read 87.5 %, on the H200 100.3 %)
    assert fp8["% of the bf16 matmul measured there (bf16 rungs)"] == "—"  # an empty cell
    assert "tokamax_mosaic" not in set(table["label"])  # it did not run: in the reasons table instead
    assert "cudnn_fp8 ran forward only" in texts(at, "caption")  # no backward row and no reason row: said
    assert any("test reason" in str(v) for f in frames(at) for v in f.get("reason", []))
    roof = next(d for d in chart_data(at) if "bytes" in d.columns and set(d["bytes"]) == {roofline.MODEL})
    assert set(roof["implementation"]) == set(ladder.LADDER) - {"tokamax_mosaic"}
    assert "Measured on NVIDIA H200" in texts(at, "caption")
    at = open_page(PAGE, tab=MASKS)
    assert any("3.1" in str(d["ms"].tolist()) for d in chart_data(at) if "mask" in d.columns)


def test_compiled_memory_and_backward_buttons_draw_bytes_against_t(no_ladder, monkeypatch):
    small = {"batch": "1", "q_len": "64", "kv_len": "64", "heads": "2", "kv_heads": "2", "head_dim": "16"}
    at = open_page(PAGE, small, tab=TRAFFIC)
    button(at, "btn_p10_compiled").click().run()
    temp = [d for d in chart_data(at) if "temp_bytes" in d.columns]
    spec = "".join(charts(at))
    at.session_state["p10_tab"] = "The backward pass"
    from pages import common

    asked, real = [], common.ask_ahead
    monkeypatch.setattr(common, "ask_ahead", lambda fn, *args, **kw: asked.append(args[0].q_len) or real(fn, *args, **kw))
    button(at.run(), "btn_p10_backward").click().run()
    assert not at.exception
    assert len(asked) >= 3 and len(set(asked)) == len(asked), asked  # every length asked at once, before the first wait
    spec += "".join(charts(at))
    assert "compiled scratch (temp) bytes" in spec and "forward+backward scratch (temp) bytes" in spec
    # where and at what shape the backward bytes were compiled: here, at the sidebar's shape (not the H200's)
    assert "Compiled on this machine (CPU) at B1 T64 S64 N2 K2 H16 float32, T = S varied." in texts(at, "caption")
    temp += [d for d in chart_data(at) if "temp_bytes" in d.columns]
    assert len(temp) == 2 and {"naive", "flash_jax"} <= set(temp[1]["implementation"])
    naive = temp[1][temp[1]["implementation"] == "naive"].sort_values("q_len")["temp_bytes"].tolist()
    assert naive == sorted(naive) and naive[-1] > naive[0]
    at_4096 = temp[1][temp[1]["q_len"] == 4096].set_index("implementation")["temp_bytes"]
    assert at_4096["flash_jax"] < at_4096["naive"] / 4  # past its 512-wide tile, flash's memory is O(T)


def test_the_nsight_table_wraps_its_long_kernel_names_and_reasons(with_ladder):
    # a 60-character cuDNN kernel name and the "why not measured" column were cut off at the page's edge
    at = open_page(PAGE, None, tab=TRAFFIC)
    (ncu,) = [t.value.reset_index() for t in at.table if "the model's total" in t.value.reset_index()]
    assert list(ncu["implementation"]) == ["sdpa_cudnn", "tokamax_mosaic"]
    # what the kernel is in words, its raw name cut short (one unbreakable word ran off the page)
    assert ncu.loc[0, "kernel"] == "cuDNN flash attention, forward (cudnn_generated_fort_native_sdpa_sm90_flash_fpr…)"
    assert ncu.loc[1, "why not measured"].startswith("test reason")


def test_the_shipped_roofline_names_the_dots_that_hide_each_other_and_the_rung_at_its_ridge():
    words = texts(open_page(PAGE, tab=LADDER), "caption")  # the H200 ladder shipped with the lab
    assert ("Hollow dots on top of one another (the same traffic model, TFLOP/s within a tenth): SDPA, cuDNN fused (causal), "
            "tokamax, Pallas Mosaic GPU (causal) at 63 FLOPs/byte (573-581 TFLOP/s); SDPA, cuDNN fused, cuDNN FP8 "
            "(JAX internal) (causal), tokamax, Pallas Mosaic GPU at 126 FLOPs/byte (616-646 TFLOP/s).") in words
    assert ("The measured roof turns from bandwidth to compute at 245 FLOPs/byte: cuDNN FP8 (JAX "
            "internal) (252, 827 TFLOP/s) sits there.") in words


def test_the_shipped_roofline_places_counted_kernels_by_their_dram_bytes_under_two_labelled_roofs():
    # the x-axis used only the traffic model (16 GiB for cuDNN), so cuDNN and Mosaic sat far above a single
    # roof drawn at the copy's 3.37 TB/s; Nsight Compute counted about 0.5 GB for each
    at = open_page(PAGE, tab=LADDER)
    data = chart_data(at)
    dots = next(d for d in data if "bytes" in d.columns and set(d["bytes"]) == {roofline.MEASURED})
    counted = dots[dots["bytes"] == roofline.MEASURED].set_index("implementation")
    assert set(counted.index) == {"sdpa_cudnn", "tokamax_mosaic"}
    found = ladder.load_shipped()
    c = found.ncu["sdpa_cudnn"]
    flops = 4 * 4 * 16 * 8192 * 8192 * 128
    assert counted.loc["sdpa_cudnn", "intensity"] == pytest.approx(flops / (c.read_bytes + c.write_bytes))
    assert counted.loc["sdpa_cudnn", "tflops"] < found.ceilings.matmul_bf16_tflops  # under the roof
    model = next(d for d in data if "bytes" in d.columns and set(d["bytes"]) == {roofline.MODEL})
    assert model[model["implementation"] == "sdpa_cudnn"]["intensity"].min() < 130  # the model's point, beside it
    roofs = next(d for d in data if "roof" in d.columns)
    assert set(roofs["roof"]) == {"datasheet: 4.8 TB/s, 989.5 TFLOP/s (bf16)", "measured: 3.37 TB/s, 824 TFLOP/s"}
    words = texts(at, "caption")
    assert "Sdpa" not in words and "moved 33× fewer bytes than its model counts" in words
    assert ("Why the solid roof (measured: 3.37 TB/s, 70 % of the datasheet's 4.8; 824 TFLOP/s, 83 % of its 989.5) "
            "sits under the dashed one") in words
    assert "reads K and V at up to 4.51 TB/s" in words  # page 8's decode step passes the copy's rate


def test_the_tile_grids_tell_partial_from_skipped_tiles():
    # partial (#9ecae9) and skipped (#d9d9d9) were two pale squares; now orange against white, crossed and outlined
    import json

    from pages import kernel_ui

    kinds = dict(zip(kernel_ui.KINDS, kernel_ui.KIND_COLORS, strict=True))
    assert kinds == {"full": "#4c78a8", "partial": "#f58518", "skipped": "#ffffff"}
    at = open_page(PAGE, {**CUSTOM, "causal": "true"}, tab=MASKS)
    spec = next(s for s in charts(at) if "tiles of" in s)
    assert '"symbolStrokeColor": "#555"' in spec and '"text": "\\u00d7"' in json.dumps(json.loads(spec))


def test_the_nsight_table_names_its_gpu_and_shape_not_the_sidebars():
    # under the model's table at the sidebar's shape, the counted bytes (16 GiB "model's total") read as this shape's
    at = open_page(PAGE, CUSTOM, tab=TRAFFIC)
    assert f"DRAM bytes counted by an H200 (Nsight Compute) at {ladder.ANCHOR.describe()}" in texts(at, "markdown")


def test_the_last_compiled_memory_chart_is_gone_while_the_device_is_asked_again(no_ladder, monkeypatch):
    """An answer the lab does not keep (a busy GPU's refusal, a lost worker) is asked for again on the next run:
    while it is, the chart from before is not on the screen beside the spinner as if it answered (issue 42)."""
    from pages import common
    from tests.apptest_util import Screen

    small = {"batch": "1", "q_len": "64", "kv_len": "64", "heads": "2", "kv_heads": "2", "head_dim": "16"}
    at = open_page(PAGE, small, tab=TRAFFIC)
    button(at, "btn_p10_compiled").click().run()
    screen = Screen(monkeypatch)
    at.run()  # the chart drawn where the button was, under the eyes of `screen`
    screen.settle()
    assert "compiled scratch (temp) bytes" in screen.text()
    during, real = [], common._on_device
    monkeypatch.setattr(common, "_on_device", lambda fn, args, kwargs: (
        during.append(screen.text()) if fn.endswith("memory:compiled_memory") else None) or real(fn, args, kwargs))
    at.run()  # asked again, as for an answer not kept
    assert not at.exception
    assert during and all("compiled scratch (temp) bytes" not in seen for seen in during)
    assert "compiled scratch (temp) bytes" in screen.text()  # and drawn again when it comes


def test_the_tile_note_names_only_the_lengths_where_flash_compiled_more_scratch_than_naive():
    import pandas as pd

    from pages import flash_ui

    df = pd.DataFrame({"implementation": ["naive", "flash_jax"] * 3, "q_len": [128, 128, 256, 256, 512, 512],
                       "temp_bytes": [1, 2, 4, 4, 20, 16], "status": ["ok"] * 6})
    assert "the larger at T = 128." in flash_ui.tile_note(df)
    assert "the larger" not in flash_ui.tile_note(df[df["q_len"] > 128])
