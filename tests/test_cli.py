import json

import pandas as pd
import pytest

from attnlab.cli import main


def test_info_lists_every_implementation_with_reasons(capsys):
    assert main(["info", "--kv-heads", "2"]) == 0
    out = capsys.readouterr().out
    for name in ("naive", "sdpa_auto", "sdpa_xla", "sdpa_cudnn", "te_dpa", "cudnn_fp8"):
        assert name in out
    assert "K2" in out


def test_compare_prints_errors_against_the_reference_and_passes(capsys):
    rc = main(["compare", "--batch", "1", "--q-len", "24", "--kv-len", "40", "--heads", "4", "--kv-heads", "1",
               "--head-dim", "16", "--causal", "--impl", "naive", "sdpa_xla", "sdpa_cudnn"])
    out = capsys.readouterr().out
    assert rc == 0 and "max_abs_error" in out and "True" in out and "naive" in out


def test_compare_checks_a_slice_when_the_float64_reference_would_be_too_big(capsys, monkeypatch):
    from attnlab.math import checks

    monkeypatch.setattr(checks, "REFERENCE_MAX_BYTES", 2**20)
    rc = main(["compare", "--batch", "2", "--q-len", "64", "--kv-len", "64", "--heads", "4", "--kv-heads", "2",
               "--head-dim", "16", "--impl", "naive", "sdpa_xla"])
    out = capsys.readouterr().out
    assert rc == 0 and "float64 reference: checked on 1 of 2 sequences" in out


def test_sweep_writes_csv_and_json(tmp_path, capsys):
    csv, js = tmp_path / "s.csv", tmp_path / "s.json"
    rc = main(["sweep", "--over", "q_len", "--values", "16", "32", "--batch", "1", "--heads", "2", "--kv-heads", "2",
               "--head-dim", "16", "--impl", "naive", "sdpa_cudnn", "--csv", str(csv), "--json", str(js)])
    assert rc == 0
    df = pd.read_csv(csv)
    assert list(df["q_len"]) == [16, 16, 32, 32] and set(df["implementation"]) == {"naive", "sdpa_cudnn"}
    assert len(json.loads(js.read_text())) == 4
    assert "wall_ms" in capsys.readouterr().out


def test_bad_arguments_are_refused_with_a_message(capsys):
    with pytest.raises(SystemExit, match="heads \\(8\\) must be a multiple of kv_heads \\(3\\)"):
        main(["compare", "--kv-heads", "3"])
    with pytest.raises(SystemExit):
        main(["sweep", "--over", "q_len", "--values", "16", "--impl", "flash9"])
    assert "unknown implementation 'flash9'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="not a whole number"):
        main(["sweep", "--over", "batch", "--values", "two"])


def test_bench_quick_runs_the_suite_subset(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["bench", "--quick", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert {"environment", "ceilings", "tables"} <= set(r)
    assert {"default", "seq_sweep", "batch_sweep", "te_sweep"} <= set(r["tables"])
    assert "ceilings: bf16 matmul" in capsys.readouterr().out


def test_compare_of_a_backend_that_cannot_run_here_says_why_without_a_traceback(capsys):
    rc = main(["compare", "--impl", "sdpa_cudnn", "--dtype", "bfloat16"])
    out = capsys.readouterr().out
    assert "Traceback" not in out and "sdpa_cudnn" in out
    assert rc in (0, 1)


def test_masks_from_the_command_line(capsys):
    rc = main(["compare", "--batch", "2", "--q-len", "32", "--kv-len", "32", "--heads", "2", "--kv-heads", "1",
               "--head-dim", "8", "--window", "4", "0", "--kv-lengths", "30", "12", "--impl", "naive", "sdpa_xla"])
    assert rc == 0 and "True" in capsys.readouterr().out


def test_an_unwritable_output_path_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit, match="does not exist"):
        main(["sweep", "--over", "q_len", "--values", "16", "--csv", str(tmp_path / "no" / "x.csv")])
    with pytest.raises(SystemExit, match="does not exist"):
        main(["bench", "--quick", "--out", str(tmp_path / "no" / "r.json")])


def test_sweep_values_that_are_all_invalid_exit_non_zero(capsys):
    with pytest.raises(SystemExit, match="invalid sweep values"):
        main(["sweep", "--over", "kv_heads", "--values", "3", "5"])
    with pytest.raises(SystemExit, match="invalid sweep values"):
        main(["sweep", "--over", "q_len", "--values", "0"])


def test_warm_compiles_the_codelab_shape_for_every_backend_that_runs(capsys):
    assert main(["warm"]) == 0
    out = capsys.readouterr().out
    assert "naive: ok" in out and "warm: the codelab's shape (every backend that runs here)" in out
    assert "N32 K8 H128" in out  # a model preset (Llama 3 8B) was warmed too


def test_decode_quick_writes_the_study_that_page_8_reads(tmp_path, capsys):
    out = tmp_path / "d.json"
    assert main(["decode", "--quick", "--kv-lens", "128", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    rows = r["tables"]["decode"]
    assert {"environment", "ceilings"} <= set(r) and r["ceilings"]["copy_tb_s"] > 0
    assert {row["variant"] for row in rows} == {"MHA", "GQA", "MQA"} and {row["kv_len"] for row in rows} == {128}
    assert "kv_read_gb_per_s" in capsys.readouterr().out


@pytest.mark.parametrize(("command", "out", "said"), [
    ("ladder", "/proc/version", "cannot write /proc/version"),  # passed a permission check as root before
    ("decode", "/tmp", "it is a directory"),
    ("bench", "/tmp", "it is a directory"),
])
def test_an_output_path_is_opened_before_any_work_and_a_directory_is_refused(command, out, said, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--out", out])
    assert said in str(e.value)


def test_the_suites_fidelity_and_gathered_rows_are_tables():
    from attnlab.measure import runs
    from attnlab.shapes import AttentionShape
    from attnlab.studies import suite

    tiny = AttentionShape(batch=1, q_len=32, kv_len=32, heads=2, kv_heads=2, head_dim=16, dtype="bfloat16")
    fid = suite.fidelity([tiny], name="sdpa_xla")
    assert isinstance(fid, pd.DataFrame) and len(fid) == 1 and fid["harness_over_bare"].iloc[0] > 0
    assert {"harness_wall_ms", "bare_pipelined_ms", "harness_tflops", "bare_tflops"} <= set(fid.columns)
    lines = []
    rows = [r.row() for r in runs.run(tiny, ["sdpa_xla"], accuracy=False, timed=True, budget_s=0.02)]
    table = suite._collect(rows, lines.append, suite.Ceilings(matmul_bf16_tflops=1e-3, copy_tb_s=1.0))
    assert isinstance(table, pd.DataFrame) and len(lines) == 1 and set(runs.COLUMNS) <= set(table.columns)
    best = table["device_tflops"].fillna(table["tflops"]).iloc[0]
    assert table["pct_of_measured_matmul"].iloc[0] == pytest.approx(100 * best / 1e-3)
