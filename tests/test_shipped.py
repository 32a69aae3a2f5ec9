from attnlab import shipped


def test_h200_measurements_ship_with_their_environment():
    r = shipped.load("h200")
    assert r is not None
    e = r["environment"]
    assert e["device"] == "NVIDIA H200" and e["compute_capability"] == "9.0"
    for key in ("jax", "jaxlib", "cudnn", "driver", "date"):
        assert e.get(key), key
    label = shipped.label()
    assert "NVIDIA H200" in label and e["date"] in label


def test_h200_measurements_have_every_table_the_pages_show():
    for table in ("default", "seq_sweep", "batch_sweep", "te_sweep", "long_context"):
        df = shipped.frame(table)
        assert not df.empty, table
        assert {"implementation", "status"} <= set(df.columns)
    assert not shipped.frame("fidelity").empty and not shipped.frame("fp8_attention").empty


def test_an_unknown_gpu_is_an_explained_absence():
    assert shipped.load("no-such-gpu") is None
    assert "no reference results" in shipped.label("no-such-gpu")
    assert shipped.frame("default", "no-such-gpu").empty


def test_kernel_names_read_in_words_like_live_rows():
    df = shipped.frame("default")
    cudnn = df[(df.implementation == "sdpa_cudnn") & (df.status == "ok")]
    assert cudnn["kernels"].str.contains("cuDNN flash attention, forward").any()


def test_percent_of_peak_follows_one_rule_an_fp8_kernel_against_the_fp8_peak():
    # the shipped suite measured cudnn_fp8 (bfloat16 inputs, FP8 inside) against the bf16 peak; the ladder against FP8
    fp8_peak = shipped.load()["environment"]["peak"]["fp8_tflops"]
    df = shipped.frame("default")
    row = df[(df["implementation"] == "cudnn_fp8") & (df["status"] == "ok")].iloc[0]
    assert row["pct_of_peak"] == 100 * row["device_tflops"] / fp8_peak
    bf16 = df[(df["implementation"] == "sdpa_cudnn") & (df["status"] == "ok")].iloc[0]
    assert bf16["pct_of_peak"] == 100 * bf16["device_tflops"] / shipped.load()["environment"]["peak"]["bf16_tflops"]


def test_every_shipped_refusal_reads_one_budget_rule_with_the_gpus_memory():
    # the files named "cap of 52.43 GiB", "52.05", "51.68" and "budget of 83.68 GiB" for one H200, and refused
    # naive and XLA at T = 16,384 with 129 against 193 GiB (an older estimate) though their scratch is the same
    from attnlab.studies import ladder

    rows = shipped.frame("long_context").to_dict("records") + ladder.load_shipped().ladder
    refused = [r for r in rows if r["status"] == "over the memory budget"]
    assert len(refused) >= 20
    rules = {r["reason"].split(", over ")[1] for r in refused}
    assert rules == {"the lab's budget on the H200 of that run, 83.88 GiB: 80 % of the 104.85 GiB JAX's allocator may use of "
                     "the H200's 141 GB"}
    at = {(r["implementation"], r["pass"]): r["reason"].split(" of GPU")[0] for r in refused
          if r["shape"] == "B4 T16384 S16384 N16 K16 H128 bfloat16"}
    assert at[("naive", "forward")] == at[("sdpa_xla", "forward")] == "needs about 196.00 GiB"


def test_the_shipped_suite_files_load_typed_with_their_units():
    from attnlab.device import Peak
    from attnlab.studies import fp8_study
    from attnlab.studies.suite import Ceilings, Environment, SuiteRun

    h200 = SuiteRun.load("h200")
    assert isinstance(h200.environment, Environment) and h200.environment.device == "NVIDIA H200"
    assert isinstance(h200.environment.peak, Peak) and h200.environment.peak.bf16_tflops == 989.5
    assert isinstance(h200.ceilings, Ceilings) and h200.ceilings.matmul_n == 8192
    assert 700 < h200.ceilings.matmul_bf16_tflops < 900 and 3 < h200.ceilings.copy_tb_s < 4
    assert {"default", "long_context"} <= set(h200.tables) and h200.fidelity and h200.fp8_attention
    a = h200.te_autocast
    assert isinstance(a, fp8_study.AutocastStudy) and a.ok and a.same_kernels and a.bf16_ms > 0
    assert a.to_json() == shipped.load("h200")["te_autocast"]  # reads back as written
    decode = SuiteRun.load("h200_decode")
    assert decode.tables["decode"] and decode.te_autocast is None and decode.fidelity is None
    assert SuiteRun.load("no-such-gpu") is None


def test_a_file_of_another_kind_is_refused_with_a_reason():
    import pytest

    from attnlab.studies.suite import SuiteRun

    with pytest.raises(ValueError, match="not a benchmark suite file"):
        SuiteRun.from_json(shipped.load("ring_h200x2"))
    with pytest.raises(ValueError, match="not a benchmark suite file"):
        SuiteRun.from_json({"tables": {}})
