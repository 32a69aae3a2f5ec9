from attnlab import device


def test_peaks_are_looked_up_by_product_name():
    assert device.peak_for("NVIDIA H200").model == "H200 SXM"
    assert device.peak_for("NVIDIA H100 80GB HBM3").model == "H100 SXM"
    assert device.peak_for("NVIDIA H100 PCIe").model == "H100 PCIe"
    assert device.peak_for("NVIDIA A100-SXM4-80GB").model.startswith("A100")
    assert device.peak_for("NVIDIA L4").model == "L4"
    assert device.peak_for("NVIDIA B200").model == "B200"
    assert device.peak_for("cpu") is None and device.peak_for("NVIDIA L40S") is None
    for _, p in device.PEAKS:
        assert p.bf16_tflops > p.tf32_tflops > p.fp32_tflops > 0 and p.memory_tb_s > 0 and p.source


def _gpu(cc, kind="Some Future GPU"):
    return device.DeviceInfo("gpu", "cuda 12080", kind, 1, cc, None, None, "", "", "9.1.0", None, None)


def test_gates_are_by_compute_capability_not_by_name():
    # a GPU whose name the lab has never heard of still gets the gates its capability allows
    assert _gpu((9, 0)).at_least(device.FP8_ATTENTION_MIN_CC)
    assert _gpu((8, 9)).at_least(device.FP8_MATMUL_MIN_CC) and not _gpu((8, 9)).at_least(device.FP8_ATTENTION_MIN_CC)
    assert not _gpu((7, 5), kind="NVIDIA H200").at_least(device.FUSED_ATTENTION_MIN_CC)
    cpu = device.DeviceInfo("cpu", "cpu", "cpu", 1, None, None, None, "", "", None, None, None)
    assert not cpu.at_least((1, 0)) and not cpu.is_cuda


def test_info_describes_this_machine():
    info = device.info()
    rows = dict(info.as_rows())
    assert rows["backend"] == info.backend and "jax / jaxlib" in rows and "datasheet peak" in rows
