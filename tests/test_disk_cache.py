"""The persistent compilation cache's bound, kept by the device worker (attnlab/measure/disk_cache.py)."""

import os
import subprocess
import sys

from attnlab import settings
from attnlab.measure import disk_cache


def _entry(folder, name: str, size: int, age_s: float):
    f = folder / f"{name}{disk_cache.SUFFIX}"
    f.write_bytes(b"x" * size)
    t = 1_700_000_000 - age_s
    os.utime(f, (t, t))
    return f


def test_the_least_recently_used_entries_go_until_the_folder_is_under_its_bound(tmp_path):
    old, middle, new = (_entry(tmp_path, n, 1000, age) for n, age in (("old", 300), ("middle", 200), ("new", 100)))
    other = tmp_path / "not-an-entry"
    other.write_bytes(b"x" * 5000)
    assert disk_cache.bound(tmp_path, limit_bytes=2500) == 1000
    assert not old.exists() and middle.exists() and new.exists() and other.exists()
    assert disk_cache.bound(tmp_path, limit_bytes=1000) == 1000
    assert not middle.exists() and new.exists()


def test_a_read_entry_counts_as_recently_used(tmp_path):
    read, written = _entry(tmp_path, "read", 1000, 300), _entry(tmp_path, "written", 1000, 200)
    os.utime(read, (1_700_000_000, read.stat().st_mtime))  # read last, written long ago
    assert disk_cache.bound(tmp_path, limit_bytes=1500) == 1000
    assert read.exists() and not written.exists()


def test_no_folder_or_no_bound_removes_nothing(tmp_path):
    f = _entry(tmp_path, "a", 1000, 10)
    assert disk_cache.bound(tmp_path, limit_bytes=0) == 0
    with settings.override(compile_cache_gib=0):
        assert disk_cache.bound(tmp_path) == 0
    assert f.exists()


def test_the_setting_reads_gib_and_says_what_it_cannot_read():
    s = settings.Settings.from_env({"ATTNLAB_COMPILE_CACHE_GIB": "0.5"})
    assert s.compile_cache_gib == 0.5 and not s.problems
    s = settings.Settings.from_env({"ATTNLAB_COMPILE_CACHE_GIB": "lots"})
    assert s.compile_cache_gib == 8.0 and "ATTNLAB_COMPILE_CACHE_GIB" in s.problems[0]


def test_a_worker_bounds_the_folder_it_compiles_into(tmp_path):
    # a device worker started with a folder over its bound trims it at its start, as a pod's restarted worker does
    _entry(tmp_path, "stale", 4096, 10_000)
    code = ("import time; from attnlab.service.worker import DeviceWorker; DeviceWorker('w'); time.sleep(1); "
            "import pathlib, sys; sys.exit(0 if not list(pathlib.Path(sys.argv[1]).glob('stale*')) else 1)")
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(tmp_path), "ATTNLAB_COMPILE_CACHE_GIB": str(1000 / 2**30),
           "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
