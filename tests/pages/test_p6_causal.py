"""Page 6 · Causal masking: full vs causal heatmaps, the first-vs-last table, and the sliding
window and padding masks through the fused API, checked against float64 (AppTest, CPU backend)."""

import jax
import numpy as np
import pytest

from attnlab.math.checks import TOLERANCES
from attnlab.shapes import AttentionShape
from attnlab.studies import weights
from pages import weights_ui
from tests.apptest_util import (
    CUSTOM,
    button,
    codes,
    frame_with,
    frames,
    heatmaps,
    metric,
    open_page,
    texts,
)

PAGE = "pages/p6_causal.py"
on_gpu = jax.default_backend() == "gpu"


def weight_maps(at):
    return heatmaps(at)


def assert_drawn(cells, expected: np.ndarray, masked: np.ndarray):
    """The image's cells are the expected weights on the blues scale, grey exactly where masked."""
    assert cells["masked"].to_numpy().reshape(expected.shape).tolist() == masked.tolist()
    want = weights_ui.colours(expected, masked, cells.attrs["vmax"]).reshape(-1, 3)
    np.testing.assert_allclose(cells[["r", "g", "b"]].to_numpy(), want, atol=1)



def test_causal_page_shows_first_vs_last_table_with_zero_last_row_when_t_equals_s():
    at = open_page(PAGE)
    fvl = frame_with(at, "max |full − causal|")
    assert fvl["position"].iloc[-1] == 127
    assert fvl["max |full − causal|"].iloc[-1] <= (TOLERANCES["float32"]["atol"] if on_gpu else 0.0)
    assert fvl["max |full − causal|"].iloc[0] > 0
    assert list(fvl["keys seen (causal)"]) == [p + 1 for p in fvl["position"]]
    assert any("sees all keys" in s.value for s in at.success)


def test_causal_page_heatmaps_are_capped_at_64_and_causal_is_lower_triangular():
    at = open_page(PAGE)  # T = S = 128: the view is 64 × 64
    full, causal = weight_maps(at)[:2]
    assert full["query"].max() == 63 and full["key"].max() == 63
    assert "over these 64 keys" in texts(at)
    view = weights.view_shape(AttentionShape())
    ref_full = weights.heatmap_weights(view.replace(causal=False))[0, 0]
    ref_causal = weights.heatmap_weights(view.replace(causal=True))[0, 0]
    np.testing.assert_allclose(ref_full.sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(ref_causal.sum(-1), 1.0, rtol=1e-5)
    upper = np.triu(np.ones((64, 64), bool), k=1)
    assert ref_causal[upper].max() == 0
    assert full.attrs["vmax"] == pytest.approx(ref_full.max())
    assert_drawn(full, ref_full, np.zeros_like(upper))  # no grey
    assert_drawn(causal, ref_causal, upper)  # grey is exactly the mask


def test_causal_page_custom_shape_head_choice_and_unequal_lengths():
    at = open_page(PAGE, CUSTOM)
    assert at.selectbox(key="p6_head").options == [str(h) for h in range(4)]
    assert at.selectbox(key="p6_batch").options == ["0", "1"]
    at.selectbox(key="p6_head").set_value(3).run()
    assert not at.exception
    assert "reads key/value head 1" in texts(at)
    assert any("T (32) ≠ S (48)" in i.value for i in at.info)


def test_causal_page_fused_masks_match_weights_times_v():
    at = open_page(PAGE, CUSTOM)
    atol = TOLERANCES["float32"]["atol"] if on_gpu else 1e-5  # TF32 matmuls on a GPU
    assert float(metric(at, "max |fused − weights·V|")) < atol
    assert metric(at, "allclose at the float32 tolerance") == "yes"
    at.toggle(key="p6_use_padding").set_value(True).run()
    at.number_input(key="p6_len_1").set_value(5).run()
    assert not at.exception
    assert float(metric(at, "max |fused − weights·V|")) < atol
    masked = weight_maps(at)[-1]
    assert masked[masked["key"] > masked["query"]]["masked"].all()  # causal is on in CUSTOM
    assert any("key_value_seq_lengths" in c for c in codes(at))


def test_causal_page_window_heatmap_greys_the_keys_outside_the_window():
    at = open_page(PAGE, {**CUSTOM, "causal": "false"})
    at.number_input(key="p6_left").set_value(2).run()
    at.number_input(key="p6_right").set_value(1).run()
    assert not at.exception
    masked = weight_maps(at)[-1]
    outside = (masked["key"] < masked["query"] - 2) | (masked["key"] > masked["query"] + 1)
    assert masked["masked"].eq(outside).all()
    assert any("local_window_size=(2, 1)" in c for c in codes(at))
    assert float(metric(at, "max |fused − weights·V|")) < (TOLERANCES["float32"]["atol"] if on_gpu else 1e-5)


def test_causal_page_takes_its_starting_masks_from_the_shape_and_compares_causal_alone():
    at = open_page(PAGE, {**CUSTOM, "window": "3,0", "kv_lengths": "20,10"})
    assert (at.number_input(key="p6_left").value, at.number_input(key="p6_right").value) == (3, 0)
    assert at.toggle(key="p6_use_padding").value
    assert (at.number_input(key="p6_len_0").value, at.number_input(key="p6_len_1").value) == (20, 10)
    fvl = frame_with(at, "max |full − causal|")  # causal against no mask: the window and padding are left out
    assert (fvl["keys seen (full)"] == 48).all()
    assert "left out" in texts(at)
    code = "\n".join(c for c in codes(at))
    assert "local_window_size=(3, 0)" in code and "[20, 10]" in code
    (call,) = [c for c in codes(at) if "key_value_seq_lengths" in c]
    # in a half-width column a long line wrapped to an unindented piece: each line short, each after the first indented
    lines = call.splitlines()
    assert all(len(line) <= 44 for line in lines) and all(line.startswith("    ") for line in lines[1:-1]), call


def test_causal_page_a_query_that_sees_no_key_is_explained_not_compared():
    at = open_page(PAGE, {**CUSTOM, "causal": "false"})
    at.toggle(key="p6_use_window").set_value(False).run()
    at.toggle(key="p6_use_padding").set_value(True).run()
    at.number_input(key="p6_len_0").set_value(0).run()
    assert not at.exception
    assert "see no key at all" in texts(at, "caption")
    assert metric(at, "allclose at the float32 tolerance") == "yes"


def test_causal_page_says_why_cudnn_is_not_offered_on_cpu():
    if on_gpu:
        pytest.skip("cuDNN may run here")
    at = open_page(PAGE, {**CUSTOM, "dtype": "bfloat16"})
    assert at.selectbox(key="p6_impl").options == ["sdpa_xla (xla)"]
    assert "sdpa_cudnn cannot run this here" in texts(at, "caption")


def test_causal_page_large_shape_waits_for_a_click():
    at = open_page(PAGE, {"batch": "8", "q_len": "4096", "kv_len": "4096", "heads": "32", "kv_heads": "8",
                          "head_dim": "128", "dtype": "bfloat16"})
    assert not frames(at, "max |full − causal|")  # capped to T = 512 but still too big to run on load
    assert "T512" in texts(at, "caption")
    button(at, "btn_p6_fvl").click().run()
    assert not at.exception
    fvl = frame_with(at, "max |full − causal|")
    assert fvl["position"].iloc[-1] == 511


@pytest.mark.gpu
def test_causal_page_runs_the_masks_through_cudnn_on_gpu():
    at = open_page(PAGE, {**CUSTOM, "dtype": "bfloat16", "head_dim": "64"})
    assert "sdpa_cudnn (cudnn)" in at.selectbox(key="p6_impl").options
    at.selectbox(key="p6_impl").set_value("sdpa_cudnn").run()
    assert not at.exception
    refused = [e.value for e in at.error if "implementation=\"cudnn\"" in e.value]
    assert refused or float(metric(at, "max |fused − weights·V|")) < TOLERANCES["bfloat16"]["atol"] * 5


def test_the_heatmaps_say_they_are_a_smaller_computation_not_a_crop_of_the_learners_shape():
    # the maps' softmax runs over 64 keys; "the first 64 × 64 positions of your shape" read as a crop of 512 keys
    at = open_page(PAGE, {"q_len": "128", "kv_len": "128"})
    said = texts(at, "caption")
    assert "Each row's softmax is over these 64 keys, not your 128" in said
    assert "positions of your shape" not in said


def test_the_page_asks_for_both_its_device_answers_before_waiting_for_either(monkeypatch):
    """In a class each request waits for its turn on the device: the first-vs-last table and the masked check are
    asked for together (common.ask_ahead), so the page waits once, not twice."""
    import time

    from attnlab import service

    spans, real = [], service.send

    def slow(request):  # each of the two answers takes a second to come back
        fn, t0 = request.fn.split(":")[-1], time.perf_counter()
        if fn in ("first_vs_last", "run"):
            time.sleep(1.0)
        reply = real(request)
        spans.append((fn, t0, time.perf_counter()))
        return reply

    monkeypatch.setattr(service, "send", slow)
    open_page(PAGE, {"batch": "1", "q_len": "44", "kv_len": "44", "heads": "3", "kv_heads": "3"})  # asked by no other test
    fvl = min((s for s in spans if s[0] == "first_vs_last"), key=lambda s: s[1])
    masked = min((s for s in spans if s[0] == "run"), key=lambda s: s[1])
    assert masked[1] < fvl[2] and fvl[1] < masked[2], spans
