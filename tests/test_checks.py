"""The float64 reference: exact on a slice, bounded in bytes, and able to fail."""

import numpy as np

from attnlab.backends import get
from attnlab.math import checks
from attnlab.measure import runs
from attnlab.shapes import AttentionShape

SMALL = AttentionShape(batch=2, q_len=32, kv_len=48, heads=4, kv_heads=2, head_dim=16, causal=True)


def test_whole_shape_when_it_fits():
    s = checks.choose_slice(AttentionShape())
    assert (s.batch, s.kv_heads, s.heads_per_group, len(s.rows)) == (4, 8, 1, 128)


def test_slice_stays_under_the_byte_budget_whatever_the_shape():
    for shape in (AttentionShape(batch=4, q_len=4096, kv_len=4096, heads=8, kv_heads=2),
                  AttentionShape(batch=2, q_len=1, kv_len=2048, heads=512, kv_heads=1, head_dim=512),
                  AttentionShape(batch=1, q_len=262_144, kv_len=262_144, heads=64, kv_heads=8, head_dim=128)):
        for budget in (2**20, 2**24, 2**28):
            s = checks.choose_slice(shape, budget)
            assert s.host_bytes(shape) <= budget or len(s.rows) == 1, (shape.describe(), budget)
            assert 0 in s.rows and len(s.rows) >= 1


def test_sliced_reference_still_catches_a_wrong_value_in_the_slice():
    q, k, v = runs.make_inputs(SMALL)
    ref = checks.float64_reference(SMALL, q, k, v, max_bytes=checks.Slice(1, 1, 1, (0,)).host_bytes(SMALL) * 8)
    assert ref.slice.batch == 1 and "checked on 1 of 2 sequences" in ref.note
    out = np.asarray(get("naive").jit(SMALL)(q, k, v), np.float64)
    assert ref.check(out).allclose
    row = ref.slice.rows[-1]
    out[0, row, 0, 0] += 1.0  # inside the slice
    assert not ref.check(out).allclose


def test_the_checks_can_fail():
    q, k, v = runs.make_inputs(SMALL)
    ref = checks.float64_reference(SMALL, q, k, v)
    wrong = get("naive").jit(SMALL.replace(causal=False))(q, k, v)  # the mask forgotten
    assert not ref.check(wrong).allclose
    nan = np.full(SMALL.q_shape(), np.nan, np.float32)
    assert not ref.check(nan).allclose


def test_rows_that_see_no_key_are_left_out_and_said_so():
    shape = SMALL.replace(causal=False, kv_lengths=(48, 0))
    q, k, v = runs.make_inputs(shape)
    ref = checks.float64_reference(shape, q, k, v)
    assert "32 query positions see no key at all" in ref.note
    assert ref.check(get("sdpa_xla").jit(shape)(q, k, v)).allclose  # XLA returns mean(V) there: not compared


def test_the_reference_slice_is_the_same_copied_whole_or_gathered_on_the_device(monkeypatch):
    # Small arrays are copied whole and sliced on the host; others are sliced on their device first.
    shape = AttentionShape(batch=3, q_len=40, kv_len=40, heads=4, kv_heads=2, head_dim=16)
    q, _, _ = runs.make_inputs(shape)
    rows, heads = np.array([0, 7, 39]), np.array([1, 3])
    host = checks._to_host(q, 2, rows, heads)
    monkeypatch.setattr(checks, "HOST_COPY_MAX_BYTES", 0)
    device = checks._to_host(q, 2, rows, heads)
    assert host.dtype == device.dtype == np.float64 and host.shape == (2, 3, 2, 16)
    np.testing.assert_array_equal(host, device)
