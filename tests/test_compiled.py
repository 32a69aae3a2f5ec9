"""What the compiler made: kernels in words, scratch bytes, and how they grow."""

import pandas as pd

from attnlab import compiled
from attnlab.compiled import CompiledInfo
from attnlab.shapes import AttentionShape

TINY = AttentionShape(batch=1, q_len=32, kv_len=32, heads=2, kv_heads=2, head_dim=16)


def test_compiled_memory_of_naive_grows_with_the_square_of_the_length():
    small = compiled.describe_compiled(compiled.compile_backend("naive", TINY.replace(q_len=256, kv_len=256))[0])
    large = compiled.describe_compiled(compiled.compile_backend("naive", TINY.replace(q_len=512, kv_len=512))[0])
    assert small.temp_bytes and large.temp_bytes
    assert large.temp_bytes / small.temp_bytes > 3


def test_which_kernel_recognises_cudnn_custom_calls():
    cudnn = CompiledInfo(0, 0, 0, ("__cudnn$fmhaSoftmax",), 1)
    assert "cuDNN" in compiled.which_kernel(cudnn) and "__cudnn$fmhaSoftmax" in compiled.which_kernel(cudnn)
    assert compiled.which_kernel(CompiledInfo(0, 0, 0, (), 3)) == "XLA's own code: 3 fusions"


def test_growth_gives_the_log_log_slope():
    df = pd.DataFrame({"implementation": ["a", "a", "b", "b"], "status": "ok", "q_len": [256, 1024, 256, 1024],
                       "temp_bytes": [1, 16, 10, 40]})
    g = compiled.growth(df).set_index("implementation")
    assert g.loc["a", "slope"] == 2.0 and g.loc["b", "slope"] == 1.0


def test_forward_backward_is_the_gradient_of_the_sum():
    import jax.numpy as jnp

    grads = compiled.forward_backward(lambda q, k, v: q * k * v)(jnp.ones(2), 2 * jnp.ones(2), 3 * jnp.ones(2))
    assert [float(g[0]) for g in grads] == [6.0, 3.0, 2.0]
