"""attnlab.store: results computed once and shared between server processes (ATTNLAB_RESULTS_DIR)."""

from __future__ import annotations

import os
import subprocess
import sys

from attnlab import store
from attnlab.shapes import AttentionShape


def _counting():
    calls = []

    def square(shape, names=(), scale=1.0):
        calls.append((shape, names))
        return {"t": shape.q_len * scale, "names": names}

    return square, calls


def test_without_a_results_directory_every_call_computes(monkeypatch):
    monkeypatch.delenv("ATTNLAB_RESULTS_DIR", raising=False)
    fn, calls = _counting()
    shared = store.once(fn)
    assert shared(AttentionShape()) == shared(AttentionShape()) and len(calls) == 2


def test_a_result_is_computed_once_per_arguments_and_read_after(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_RESULTS_DIR", str(tmp_path))
    fn, calls = _counting()
    shared = store.once(fn)
    a = shared(AttentionShape(), ("naive",))
    assert shared(AttentionShape(), ("naive",)) == a and len(calls) == 1
    assert shared(AttentionShape(q_len=64), ("naive",))["t"] == 64 and len(calls) == 2  # other arguments
    assert shared(AttentionShape(), ("naive",), scale=2.0)["t"] == 256 and len(calls) == 3
    files = list(store.folder().glob("*.pkl"))
    assert len(files) == 3  # under this code's version: a new release never reads these


def test_a_result_not_worth_keeping_is_returned_not_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_RESULTS_DIR", str(tmp_path))
    fn, calls = _counting()
    shared = store.once(fn, keep=lambda r: r["t"] > 100)
    shared(AttentionShape(q_len=64))
    shared(AttentionShape(q_len=64))
    shared(AttentionShape(q_len=512))
    shared(AttentionShape(q_len=512))
    assert [c[0].q_len for c in calls] == [64, 64, 512]


def test_a_damaged_result_file_is_computed_again_and_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_RESULTS_DIR", str(tmp_path))
    fn, calls = _counting()
    shared = store.once(fn)
    shared(AttentionShape())
    (path,) = store.folder().glob("*.pkl")
    path.write_bytes(path.read_bytes()[:5])
    assert shared(AttentionShape())["t"] == 128 and len(calls) == 2
    assert shared(AttentionShape())["t"] == 128 and len(calls) == 2


_SERVER = """
import sys, time
from attnlab import store
def slow(x):
    with open(sys.argv[1], "a") as f:
        f.write("computed\\n")
    time.sleep(0.5)
    return x * 2
print(store.once(slow)(21), flush=True)
"""


def test_two_server_processes_asking_at_once_compute_it_once(tmp_path):
    log = tmp_path / "calls.txt"
    env = dict(os.environ, ATTNLAB_RESULTS_DIR=str(tmp_path / "results"))
    procs = [subprocess.Popen([sys.executable, "-c", _SERVER, str(log)], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert outs == ["42"] * 3
    assert log.read_text().count("computed") == 1


def test_functions_of_one_name_in_two_page_files_do_not_share_results(tmp_path, monkeypatch):
    """Streamlit runs every page as `__main__`: a page's functions are told apart by their file."""
    monkeypatch.setenv("ATTNLAB_RESULTS_DIR", str(tmp_path))
    found = {}
    for page, value in (("pages/p3_qkv.py", 3), ("pages/p8_mha_gqa_mqa.py", 8)):
        namespace = {"__name__": "__main__"}
        exec(compile(f"def placement(shape):\n    return {value}\n", page, "exec"), namespace)
        found[page] = store.once(namespace["placement"])(AttentionShape())
    assert found == {"pages/p3_qkv.py": 3, "pages/p8_mha_gqa_mqa.py": 8}


def test_results_of_another_gpu_or_jax_are_not_read_as_this_machines(tmp_path, monkeypatch):
    import dataclasses

    from attnlab import device

    monkeypatch.setenv("ATTNLAB_RESULTS_DIR", str(tmp_path))
    here = store.folder()
    real = device.info()
    for change in ({"device_kind": "NVIDIA L4", "compute_capability": (8, 9)}, {"jax_version": "0.0.1"}):
        monkeypatch.setattr(device, "info", lambda c=change: dataclasses.replace(real, **c))
        store.environment.cache_clear()
        assert store.folder() != here and store.folder().parent == here.parent
    monkeypatch.setattr(device, "info", lambda: dataclasses.replace(real, memory_free_bytes=1))  # changes by the second
    store.environment.cache_clear()
    assert store.folder() == here
    store.environment.cache_clear()
