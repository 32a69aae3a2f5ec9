"""The weights lessons of pages 1 and 6 (attnlab.studies.weights), on the shared math."""

import numpy as np
import pytest

from attnlab.measure import runs
from attnlab.shapes import AttentionShape
from attnlab.studies import weights

TINY = AttentionShape(batch=1, q_len=6, kv_len=6, heads=1, kv_heads=1, head_dim=4)
SMALL = AttentionShape(batch=2, q_len=16, kv_len=24, heads=4, kv_heads=2, head_dim=8)


def test_four_stages_rows_sum_to_one_with_and_without_scaling():
    scaled = weights.four_stages(TINY)
    raw = weights.four_stages(TINY, scaled=False)
    np.testing.assert_allclose(scaled["weights"].sum(-1), 1, rtol=1e-5)
    np.testing.assert_allclose(raw["weights"].sum(-1), 1, rtol=1e-5)
    np.testing.assert_allclose(raw["scaled"], raw["scores"])  # no scale: stage 2 is stage 1
    np.testing.assert_allclose(scaled["scaled"], scaled["scores"] / 2, rtol=1e-6)  # sqrt(4) = 2
    np.testing.assert_allclose(raw["out"], raw["weights"] @ raw["v"], rtol=1e-5, atol=1e-6)


def test_four_stages_masked_logits_are_minus_infinity():
    st = weights.four_stages(TINY.replace(causal=True))
    assert np.isneginf(st["scaled"][0, 1:]).all() and (st["weights"][0, 1:] == 0).all()


def test_score_spread_grows_as_sqrt_head_dim_unscaled_and_stays_near_one_scaled():
    df = weights.score_spread(head_dims=(4, 64), seq_len=32)
    assert (abs(df["std_unscaled"] / df["sqrt_head_dim"] - 1) < 0.25).all()
    assert (abs(df["std_scaled"] - 1) < 0.25).all()


def test_without_scaling_the_softmax_saturates_as_head_dim_grows():
    df = weights.scale_effect(head_dims=(8, 512), seq_len=32).set_index(["head_dim", "scaling"])
    assert df.loc[(512, "none"), "max_weight"] > df.loc[(512, "1/sqrt(d)"), "max_weight"]
    assert df.loc[(512, "none"), "entropy"] < df.loc[(8, "none"), "entropy"]


def test_view_shape_caps_batch_and_lengths_only():
    big = AttentionShape(batch=8, q_len=1024, kv_len=512, heads=8, kv_heads=2, head_dim=32, causal=True,
                         window=(16, 0), kv_lengths=(500,))
    v = weights.view_shape(big)
    assert (v.batch, v.q_len, v.kv_len) == (2, 64, 64)
    assert (v.heads, v.kv_heads, v.head_dim, v.causal, v.window, v.kv_lengths) == (8, 2, 32, True, (16, 0), (64,))
    assert weights.view_shape(SMALL) == SMALL


def test_heatmap_weights_follow_the_shapes_masks():
    w = weights.heatmap_weights(SMALL.replace(batch=1, kv_lengths=(5,)))
    assert w.shape == (1, 4, 16, 24) and (w[..., 5:] == 0).all()
    np.testing.assert_allclose(w.sum(-1), 1, rtol=1e-5)


def test_long_frame_turns_masked_entries_into_nan():
    m = np.array([[0.0, -np.inf], [1.0, 2.0]])
    df = weights.long_frame(m, "logit")
    assert list(df.columns) == ["query", "key", "logit"] and len(df) == 4
    assert np.isnan(df.loc[(df["query"] == 0) & (df["key"] == 1), "logit"]).all()


def test_first_vs_last_handles_a_single_query_position():
    one = AttentionShape(batch=1, q_len=1, kv_len=1, heads=1, kv_heads=1, head_dim=1)
    table = weights.first_vs_last(one)
    assert list(table["position"]) == [0] and table["max |full − causal|"].iloc[0] == 0.0


def test_first_vs_last_changes_the_first_position_most():
    t = weights.first_vs_last(SMALL.replace(kv_len=16)).set_index("position")["max |full − causal|"]
    assert t.iloc[0] > 0 and t.iloc[-1] < 1e-6


def test_nothing_compiles_while_a_run_holds_the_device(monkeypatch):
    """A compile inside a turn keeps the device from every run queued behind it (seconds on a GPU):
    the heatmaps, the four stages, the first-vs-last table and a checked run compile before they ask."""
    import contextlib

    import jax.monitoring

    from attnlab.admission import DEVICE
    from attnlab.measure import runs

    inside, compiled_inside = [False], []
    real_use = DEVICE.use

    @contextlib.contextmanager
    def watched(*a, **kw):
        with real_use(*a, **kw) as waited:
            inside[0] = True
            try:
                yield waited
            finally:
                inside[0] = False

    def listen(event, secs, **kw):
        if event.endswith("backend_compile_duration") and inside[0]:
            compiled_inside.append(event)

    monkeypatch.setattr(DEVICE, "use", watched)
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        shape = AttentionShape(batch=1, q_len=11, kv_len=13, heads=2, kv_heads=1, head_dim=8, causal=True)  # new here
        weights.heatmap_weights(shape)
        weights.four_stages(shape.replace(q_len=9))
        weights.first_vs_last(shape.replace(q_len=7))
        assert runs.run(shape.replace(q_len=5), ["naive", "sdpa_xla"])[0].ok
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiled_inside == []


def test_a_heatmap_is_exact_on_the_devices_inputs_and_asks_nothing_of_the_device(monkeypatch):
    """Page 6 draws heatmaps in its own process: float64 NumPy on the very Q and K a run on the device gets."""
    from attnlab.admission import DEVICE

    shape = SMALL.replace(batch=1, causal=True, dtype="bfloat16")
    monkeypatch.setattr(DEVICE, "use", lambda *a, **k: pytest.fail("a heatmap asked for the device"))
    w = weights.heatmap_weights(shape)
    q, k, _ = (np.asarray(x, np.float64) for x in runs.host_inputs(shape))
    s = np.einsum("btnh,bsnh->bnts", q, k.repeat(shape.heads // shape.kv_heads, axis=2)) / np.sqrt(shape.head_dim)
    s = np.where(np.tril(np.ones((shape.q_len, shape.kv_len), bool)), s, -np.inf)
    exact = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(w, exact / exact.sum(-1, keepdims=True), rtol=1e-6, atol=1e-7)
    monkeypatch.undo()
    on_device = [np.asarray(x, np.float64) for x in runs.make_inputs(shape)]
    np.testing.assert_array_equal(on_device[0], q)


def test_first_vs_last_is_computed_without_window_or_padding_and_at_capped_lengths():
    small = AttentionShape(batch=3, q_len=40, kv_len=40, window=(4, 0))
    assert weights.first_vs_last_shape(small) == small.replace(window=None)
    long = AttentionShape(batch=4, q_len=2048, kv_len=1024)
    capped = weights.first_vs_last_shape(long)
    assert (capped.batch, capped.q_len, capped.kv_len) == (2, weights.FIRST_VS_LAST_CAP, weights.FIRST_VS_LAST_CAP)
