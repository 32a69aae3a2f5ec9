"""attnlab.studies.weights for page 6: which cells a heatmap greys, and first-vs-last under other masks."""

import numpy as np

from attnlab.shapes import AttentionShape
from attnlab.studies import weights

SHAPE = AttentionShape(batch=2, q_len=6, kv_len=8, heads=2, kv_heads=1, head_dim=4)


def test_allowed_matrix_is_all_true_without_masks():
    assert weights.allowed_matrix(SHAPE).all() and weights.allowed_matrix(SHAPE).shape == (6, 8)


def test_allowed_matrix_combines_causal_window_and_this_sequences_padding():
    shape = SHAPE.replace(causal=True, window=(1, 0), kv_lengths=(8, 2))
    i, j = np.indices((6, 8))
    np.testing.assert_array_equal(weights.allowed_matrix(shape, 0), (j <= i) & (j >= i - 1))
    np.testing.assert_array_equal(weights.allowed_matrix(shape, 1), (j <= i) & (j >= i - 1) & (j < 2))


def test_allowed_matrix_marks_exactly_the_zero_weights_of_the_heatmap():
    shape = SHAPE.replace(causal=True, kv_lengths=(5,))
    w = weights.heatmap_weights(shape)
    for b in range(shape.batch):
        allowed = weights.allowed_matrix(shape, b)
        assert (w[b][:, ~allowed] == 0).all() and (w[b][:, allowed] > 0).all()


def test_first_vs_last_compares_causal_with_no_mask_even_when_the_shape_has_a_window():
    plain = AttentionShape(batch=1, q_len=16, kv_len=16, heads=2, kv_heads=2, head_dim=8)
    windowed = weights.first_vs_last(plain.replace(window=(2, 0), kv_lengths=(9,)))
    plain_table = weights.first_vs_last(plain)
    assert (windowed["keys seen (full)"] == 16).all()
    np.testing.assert_array_equal(windowed.to_numpy(), plain_table.to_numpy())
