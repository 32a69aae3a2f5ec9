"""The shipped GPU results are complete, labelled, and really from a GPU."""

from attnlab import reference


def test_h200_reference_ships_with_its_environment():
    assert "h200" in reference.available()
    r = reference.load("h200")
    env = r["environment"]
    assert env["backend"] == "gpu" and "H200" in env["device"] and env["compute_capability"] == "9.0"
    for key in ("driver", "jax", "jaxlib", "cudnn", "date"):
        assert env[key], key
    label = reference.label("h200")
    assert "NVIDIA H200" in label and env["date"] in label and env["cudnn"] in label


def test_h200_reference_has_every_table_the_pages_show():
    for table in ("default", "seq_sweep", "batch_sweep", "te_sweep", "long_context"):
        df = reference.frame(table)
        assert not df.empty, table
        assert {"implementation", "status", "wall_ms", "device_ms"} <= set(df.columns), table
    assert not reference.frame("fp8_attention").empty and not reference.frame("fidelity").empty
    long = reference.frame("long_context")
    cudnn = long[(long.implementation == "sdpa_cudnn") & (long.status == "ok")]
    assert (cudnn["device_ms"] > 0).all() and cudnn["kernels"].str.contains("sdpa|fmha", case=False).all()


def test_an_unknown_reference_is_an_explained_absence():
    assert reference.load("tpu-v9") is None
    assert reference.frame("default", "tpu-v9").empty
    assert "no reference results" in reference.label("tpu-v9")


def test_reference_kernel_names_read_in_words_like_live_rows():
    df = reference.frame("default")
    xla = df[(df.implementation == "sdpa_xla") & (df.status == "ok")]["kernels"].iloc[0]
    assert "softmax (XLA fusion) (triton_softmax" in xla and "µs" in xla
    cudnn = " ".join(df[df.implementation == "sdpa_cudnn"]["kernels"].dropna())
    assert "cuDNN flash attention, forward (cudnn_generated_fort_native_sdpa" in cudnn
