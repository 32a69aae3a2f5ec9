"""attnlab.studies.ladder: the ladder, the mask sweep, Nsight Compute's DRAM bytes and the roofline (CPU)."""

import json

import pandas as pd
import pytest

from attnlab.measure import runs
from attnlab.shapes import AttentionShape
from attnlab.studies import flash_traffic, ladder, suite
from attnlab.studies.suite import Ceilings

TINY = AttentionShape(batch=1, q_len=32, kv_len=32, heads=2, kv_heads=2, head_dim=16, dtype="bfloat16")
NAMES = ["sdpa_xla", "flash_jax", "sdpa_cudnn"]


def test_ladder_rows_have_the_run_layers_columns_and_say_why_a_rung_cannot_run():
    table = ladder.ladder([TINY], NAMES, budget_s=0.05)
    assert isinstance(table, pd.DataFrame) and list(table.columns) == runs.COLUMNS + ["rung"]
    rows = runs.records(table)
    forward = [r for r in rows if r["pass"] == "forward"]
    assert [r["implementation"] for r in forward] == NAMES and [r["rung"] for r in forward] == [0, 1, 2]
    ok = {r["implementation"]: r for r in forward if r["status"] == runs.OK}
    assert {"sdpa_xla", "flash_jax"} <= ok.keys()
    assert all(ok[n]["allclose"] and ok[n]["tflops"] > 0 for n in ("sdpa_xla", "flash_jax"))
    back = [r for r in rows if r["pass"] == "forward+backward"]
    assert {r["implementation"] for r in back} == set(NAMES)  # all three are in BACKWARD
    cudnn = next(r for r in forward if r["implementation"] == "sdpa_cudnn")
    if cudnn["status"] != runs.OK:
        assert cudnn["reason"]


def test_mask_sweep_labels_each_mask_and_its_visible_fraction():
    table = ladder.mask_sweep(TINY.replace(q_len=64, kv_len=64), (16, 8), ["sdpa_xla"], padding=16, budget_s=0.05)
    assert isinstance(table, pd.DataFrame) and list(table.columns) == runs.COLUMNS + ["mask", "visible_fraction"]
    rows = runs.records(table)
    assert [r["mask"] for r in rows] == ["no mask", "causal", "causal + window 16", "causal + window 8",
                                         "padding: 16 of 64 keys real"]
    assert all(set(runs.COLUMNS) <= r.keys() and r["status"] == runs.OK for r in rows)
    fractions = [r["visible_fraction"] for r in rows]
    assert fractions[0] == 1.0 and fractions[1] == pytest.approx(65 / 128) and fractions[-1] == 0.25
    assert fractions[1] > fractions[2] > fractions[3]
    assert rows[3]["window"] == "8,0" and rows[-1]["kv_lengths"] == "16"


def test_ncu_absent_gives_no_bytes_and_a_reason():
    counters = ladder.ncu_dram_bytes(TINY, "sdpa_cudnn", ncu="/nonexistent/ncu")
    assert not counters.measured and counters.read_bytes is None and "not installed" in counters.reason


def test_ncu_failure_is_a_reason_not_an_exception(tmp_path):
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\necho '==ERROR== ERR_NVGPUCTRPERM - no permission' >&2\nexit 1\n")
    fake.chmod(0o755)
    counters = ladder.ncu_dram_bytes(TINY, "sdpa_cudnn", ncu=str(fake), timeout_s=10)
    assert not counters.measured and "ERR_NVGPUCTRPERM" in counters.reason


def test_parse_ncu_csv_in_any_byte_unit():
    text = ('==PROF== Connected\n"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
            '"0","cudnn_fmha_kernel","dram__bytes_read.sum","Mbyte","1,234.5"\n'
            '"0","cudnn_fmha_kernel","dram__bytes_write.sum","byte","2048"\n')
    assert ladder.parse_ncu(text) == ladder.NcuCount(kernel="cudnn_fmha_kernel", read_bytes=1_234_500_000,
                                                     write_bytes=2048)
    assert ladder.parse_ncu("no csv here") is None


def test_roofline_math():
    ceilings = Ceilings(matmul_bf16_tflops=700.0, copy_tb_s=4.0)
    shape = ladder.ANCHOR
    row = {"implementation": "sdpa_cudnn", "label": "cuDNN", "status": "ok", "pass": "forward", "tflops": 600.0,
           "device_tflops": None, "gflop": shape.flops() / 1e9, **shape.columns()}
    naive_row = {**row, "implementation": "sdpa_xla", "tflops": 100.0}
    skipped = {**row, "status": "cannot run here"}
    points = ladder.roofline([row, naive_row, skipped], ceilings)
    assert isinstance(points, pd.DataFrame) and list(points.columns) == ladder.ROOFLINE_COLUMNS
    assert ladder.roofline(pd.DataFrame([row, naive_row, skipped]), ceilings).equals(points)  # a table as well
    assert ladder.roofline([], ceilings).empty
    fused, xla = points.to_dict("records")
    dims = (4, 8192, 8192, 16, 16, 128, 2)
    assert fused["model_bytes"] == flash_traffic.traffic_flash(*dims, block_q=128)["total"]
    assert xla["model_bytes"] == flash_traffic.traffic_naive(*dims)["total"]
    assert fused["intensity"] == pytest.approx(shape.flops() / fused["model_bytes"])
    # TB/s × FLOP/byte = TFLOP/s, capped by the matmul ceiling
    for p in (fused, xla):
        assert p["attainable_tflops"] == pytest.approx(min(700.0, 4.0 * p["intensity"]))
        assert p["pct_of_attainable"] == pytest.approx(100 * p["achieved_tflops"] / p["attainable_tflops"])
    assert xla["intensity"] < fused["intensity"] / 2  # the scores' round trips dominate naive traffic
    big_tiles = ladder.roofline([row], ceilings, block_q=1024).iloc[0]
    assert big_tiles["attainable_tflops"] == 700.0  # fewer K/V re-reads: past the ridge, compute-bound
    roof = ladder.roof(ceilings)
    assert isinstance(roof, pd.DataFrame) and list(roof.columns) == ["intensity", "tflops"]
    assert roof["tflops"].max() == 700.0
    assert (roof["intensity"] - 175.0).abs().min() < 1e-9  # the ridge point, 700 / 4


def test_run_all_writes_the_shipped_structure(tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "ceilings", lambda: Ceilings(matmul_bf16_tflops=1.0, copy_tb_s=0.1))
    out = tmp_path / "ladder.json"
    monkeypatch.setattr(ladder, "BACKWARD_FRACTIONS", (1,))
    result = ladder.run_all(str(out), anchor=TINY, budget_s=0.02, ncu_names=("sdpa_cudnn",), log=lambda s: None)
    assert isinstance(result, ladder.LadderRun) and isinstance(result.environment, suite.Environment)
    data = json.loads(out.read_text())
    assert data.keys() == result.to_json().keys() >= {"environment", "ceilings", "ladder", "masks", "flash_t4096",
                                                      "backward_memory", "ncu", "seconds"}
    assert {r["implementation"] for r in data["ladder"]} == set(ladder.LADDER)
    assert "reason" in data["ncu"]["sdpa_cudnn"]
    again = ladder.LadderRun.from_json(data)  # the file reads back as the run that wrote it
    assert again.ceilings == result.ceilings and again.ncu == result.ncu and again.anchor == TINY.describe()
    assert ladder.summary(again)[0].startswith(result.environment.device)
    late = ladder.run_all(None, anchor=TINY, budget_s=0.02, ncu_names=("sdpa_cudnn",), ncu_after_s=0,
                          log=lambda s: None)
    assert late.ncu["sdpa_cudnn"].reason.startswith("skipped")


def test_the_shipped_ladder_loads_typed_with_its_units_and_other_files_are_refused():
    from attnlab import shipped
    from attnlab.device import Peak

    found = ladder.LadderRun.load()
    assert found.environment.device == "NVIDIA H200" and isinstance(found.environment.peak, Peak)
    assert found.environment.peak.fp8_tflops == 1979.0
    assert found.ceilings.matmul_n == 8192 and 800 < found.ceilings.matmul_bf16_tflops < 900
    assert 3 < found.ceilings.copy_tb_s < 4 and found.ceilings.copy_bytes == 2**31
    cudnn = found.ncu["sdpa_cudnn"]
    assert cudnn.measured and cudnn.read_bytes > cudnn.write_bytes > 0 and cudnn.shape == ladder.ANCHOR.describe()
    assert {r["implementation"] for r in found.ladder} == set(ladder.LADDER)
    fwd, back = ladder.rungs(found), ladder.rungs(found, "forward+backward")
    assert isinstance(fwd, pd.DataFrame) and set(fwd["pass"]) == {"forward"} and set(back["pass"]) == {"forward+backward"}
    assert {"best_tflops", "adds", "pct_of_measured_matmul", "pct_of_datasheet", "datasheet_peak"} <= set(fwd.columns)
    assert list(fwd["causal"]) == sorted(fwd["causal"])  # not causal first, each by rung
    with pytest.raises(ValueError, match="not a ladder file"):
        ladder.LadderRun.from_json(shipped.load("h200"))


def test_cli_ladder_subcommand_is_wired(monkeypatch, tmp_path, capsys):
    from attnlab import cli

    fake = ladder.LadderRun(suite.Environment(date="2000-01-01", device="cpu"), "x", seconds=1.0)
    monkeypatch.setattr(ladder, "run_all", lambda out, log: fake)
    assert cli.main(["ladder", "--out", str(tmp_path / "l.json")]) == 0
    assert capsys.readouterr().out.startswith("cpu")
