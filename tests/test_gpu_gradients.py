"""Issue 41, item 3, on the GPU: every backend's forward+backward at FlashAttention's own test shapes, its gradients
checked against float64 by FlashAttention's rule (attnlab/math/gradients.py).

FlashAttention's tests use batch 4 and 9 query heads, with 9 (MHA), 3 (GQA) or 1 (MQA) KV heads; the issue found
tokamax_triton and tokamax_mosaic in float16 returning dv = inf at T108 S256 H64 MQA, and tokamax_triton at T1023
S1024 H256 MHA, while their forward passes. Each row here must be ok with its gradients checked, or say "gradients
wrong" naming the gradient, or say why the backend cannot run the shape; `pytest -s` prints every row."""

import pytest

from attnlab.backends import REGISTRY
from attnlab.measure import runs
from attnlab.shapes import AttentionShape

pytestmark = pytest.mark.gpu

CASES = [  # (T, S, head_dim, KV heads, dtype): the two failing cases, and the first with GQA's 3 KV heads
    (108, 256, 64, 1, "float16"),
    (108, 256, 64, 3, "float16"),
    (1023, 1024, 256, 9, "float16"),
]  # few: every backend compiles forward and backward at each, inside gpu_session.sh's one call of at most 600 s


@pytest.mark.parametrize("t, s, h, kv, dtype", CASES)
def test_every_backward_at_flashattentions_shapes_is_checked_or_says_why_not(t, s, h, kv, dtype):
    shape = AttentionShape(batch=4, q_len=t, kv_len=s, heads=9, kv_heads=kv, head_dim=h, dtype=dtype)
    results = runs.run(shape, list(REGISTRY), backward=True)
    assert {r.implementation for r in results} == set(REGISTRY)
    for r in results:
        print(f"{shape.describe()}  {r.implementation:16s} {r.status}: {r.reason[:110]}")
        if r.status == runs.OK:
            assert not r.reason.startswith("gradients not checked"), (r.implementation, r.reason)
        elif r.status == runs.BAD_GRADIENTS:
            assert any(f"{g} error" in r.reason for g in ("dq", "dk", "dv")), (r.implementation, r.reason)
            assert r.row()["status"] == "gradients wrong"
        else:
            assert len(r.reason) > 20, (r.implementation, r.status, r.reason)
