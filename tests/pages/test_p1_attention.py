"""Page 1 · How attention works: the formula, its four stages on a tiny live example, and what
1/sqrt(d) is for (AppTest, CPU backend)."""

import numpy as np

from tests.apptest_util import chart_data, frame_with, frames, heatmaps, open_page

PAGE = "pages/p1_attention.py"


def weights_chart(at):
    return heatmaps(at)[0]



def test_attention_page_shows_the_formula_and_four_stages():
    at = open_page(PAGE)
    assert "softmax" in at.latex[0].value and r"\sqrt{d}" in at.latex[0].value
    stages = [df for df in frames(at) if df.shape == (6, 6)]
    scores, scaled = stages[0], stages[1]
    np.testing.assert_allclose(scaled.to_numpy(), scores.to_numpy() / 2, rtol=1e-5)  # d = 4: divided by √4
    weights = weights_chart(at)
    assert len(weights) == 36
    np.testing.assert_allclose(weights.groupby("query")["weight"].sum(), 1.0, rtol=1e-5)
    assert not weights["masked"].any()  # no mask: no grey cell


def test_attention_page_scale_effect_saturates_without_the_scale():
    at = open_page(PAGE)
    effect = frame_with(at, "scaling")
    unscaled = effect[effect.scaling == "none"].sort_values("head_dim")
    scaled = effect[effect.scaling == "1/sqrt(d)"].sort_values("head_dim")
    assert unscaled["max_weight"].is_monotonic_increasing and unscaled["max_weight"].iloc[-1] > 0.8
    assert unscaled["entropy"].is_monotonic_decreasing
    assert (scaled["max_weight"] < 0.2).all()
    spread = frame_with(at, "spread of q·k")
    np.testing.assert_allclose(spread["spread of q·k"], spread["√d"], rtol=0.25)
    assert len(chart_data(at)) >= 3  # weights heatmap, max weight, entropy


def test_attention_page_scale_toggle_leaves_scores_unscaled():
    at = open_page(PAGE)
    at.toggle(key="p1_scaled").set_value(False).run()
    assert not at.exception
    scores, scaled = [df for df in frames(at) if df.shape == (6, 6)][:2]
    np.testing.assert_allclose(scaled.to_numpy(), scores.to_numpy())


def test_attention_page_causal_toggle_greys_exactly_the_keys_after_the_query():
    at = open_page(PAGE)
    at.toggle(key="p1_causal").set_value(True).run()
    assert not at.exception
    weights = weights_chart(at)
    upper = weights["key"] > weights["query"]
    assert (weights.loc[upper, "weight"].fillna(0) == 0).all()
    assert weights["masked"].eq(upper).all()  # grey means masked, and only masked
    np.testing.assert_allclose(weights.groupby("query")["weight"].sum(), 1.0, rtol=1e-5)
    assert any("masked" in c.value for c in at.caption)


def test_attention_page_larger_head_dim_shows_only_the_first_columns_of_the_inputs():
    at = open_page(PAGE)
    at.select_slider(key="p1_head_dim").set_value(64).run()
    assert not at.exception
    out = [df for df in frames(at) if df.shape == (6, 8)]
    assert out, "the output table shows the first 8 of 64 columns"
    scores, scaled = [df for df in frames(at) if df.shape == (6, 6)][:2]
    np.testing.assert_allclose(scaled.to_numpy(), scores.to_numpy() / 8, rtol=1e-5)  # d = 64: divided by √64
