"""Compiled memory across lengths, and the estimates the admission control relies on."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab import device
from attnlab.backends import get
from attnlab.math import checks
from attnlab.measure import compiled, runs
from attnlab.shapes import AttentionShape
from attnlab.studies import memory


def test_compiled_memory_grows_quadratically_for_naive_attention():
    shape = AttentionShape(batch=1, heads=2, kv_heads=2, head_dim=16)
    df = memory.compiled_memory(shape, ["naive", "sdpa_xla", "sdpa_cudnn"], [128, 256, 512])
    assert list(df.columns)[: len(runs.COLUMNS)] == runs.COLUMNS
    xla = df[(df.implementation == "sdpa_xla") & (df.status == "ok")].set_index("q_len")["temp_bytes"]
    assert list(xla.index) == [128, 256, 512] and 3.0 < xla[512] / xla[256] < 5.0
    if not device.info().is_cuda:
        cudnn = df[df.implementation == "sdpa_cudnn"]
        assert (cudnn.status == runs.UNSUPPORTED).all() and cudnn["reason"].str.contains("CUDA").all()


shapes = st.builds(
    lambda b, t, s, k, g, h, dtype: AttentionShape(batch=b, q_len=t, kv_len=s, heads=k * g, kv_heads=k, head_dim=h,
                                                   dtype=dtype),
    st.integers(1, 3), st.sampled_from([1, 7, 64, 200]), st.sampled_from([1, 33, 256, 512]),
    st.integers(1, 4), st.sampled_from([1, 2, 8, 64]), st.sampled_from([8, 64, 256, 512]),
    st.sampled_from(["float32", "bfloat16"]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes)
def test_what_a_backend_compiles_to_never_exceeds_its_estimate_by_much(shape):
    # compiled memory_analysis (arguments + output + scratch) against the estimate the budget counts
    for name in ("naive", "sdpa_xla"):
        info = compiled.describe_compiled(compiled.compile_backend(name, shape)[0])
        measured = (info.temp_bytes or 0) + (info.argument_bytes or 0) + (info.output_bytes or 0)
        assert measured <= 1.5 * get(name).device_bytes(shape) + 2**20, (name, shape.describe(), measured)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes)
def test_the_float64_reference_holds_no_more_host_memory_than_counted(shape):
    import tracemalloc

    q, k, v = runs.make_inputs(shape)
    budget = 8 * 2**20
    tracemalloc.start()
    ref = checks.float64_reference(shape, q, k, v, max_bytes=budget)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak <= 1.5 * ref.slice.host_bytes(shape) + 2**20, (shape.describe(), peak, ref.slice)
    assert ref.slice.host_bytes(shape) <= budget or len(ref.slice.rows) == 1


@pytest.mark.parametrize("shape", [
    AttentionShape(batch=2, q_len=1, kv_len=2048, heads=512, kv_heads=1, head_dim=512),  # MQA, many heads
    AttentionShape(batch=1, q_len=8, kv_len=65536, heads=64, kv_heads=2, head_dim=256),
])
def test_hostile_but_valid_shapes_are_counted_before_anything_is_allocated(shape):
    dev, host = runs.memory_needed(shape, ["naive", "sdpa_xla"], accuracy=True, backward=False)
    assert dev >= get("naive").device_bytes(shape) and host <= checks.REFERENCE_MAX_BYTES * 1.1
    assert np.isfinite(dev)
