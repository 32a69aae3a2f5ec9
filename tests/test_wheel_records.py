"""scripts/wheel_records.py: a wheel's RECORD read by HTTP ranges, and an installed package's files against it.

Offline: a wheel made here, served by a local server that answers ranges as PyPI's file host does, and "installed"
by unpacking it into a folder on sys.path (what an installer does with a wheel's files)."""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import importlib
import random
import sys
import threading
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
wheel_records = importlib.import_module("wheel_records")

FILES = {"tinypkg/__init__.py": b"X = 1\n", "tinypkg/data.bin": random.Random(0).randbytes(400_000),  # stored, not compressed away
         "tinypkg-1.0.data/scripts/tiny": b"#!python\nprint(1)\n",
         "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n"}


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(path: Path) -> str:
    record = "".join(f"{n},{_hash(d)},{len(d)}\n" for n, d in FILES.items()) + "tinypkg-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in FILES.items():
            z.writestr(n, d)
        z.writestr("tinypkg-1.0.dist-info/RECORD", record)
    return record


class Ranges(http.server.SimpleHTTPRequestHandler):
    """A file server that honours `Range: bytes=a-b` (http.server's own does not)."""

    def do_GET(self):
        data = (Path(self.directory) / self.path.lstrip("/")).read_bytes()
        a, b = self.headers["Range"].removeprefix("bytes=").split("-")
        part = data[int(a):int(b) + 1]
        self.send_response(206)
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        self.wfile.write(part)
        self.server.ranges += 1

    def log_message(self, *args):
        pass


@pytest.fixture
def served(tmp_path):
    record = make_wheel(tmp_path / "tinypkg-1.0-py3-none-any.whl")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Ranges, directory=str(tmp_path)))
    server.ranges = 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, f"http://127.0.0.1:{server.server_port}/tinypkg-1.0-py3-none-any.whl", record
    server.shutdown()


def test_a_wheels_record_is_read_by_ranges_without_fetching_the_wheel(served):
    server, url, record = served
    wheel = wheel_records.RangeFile(url)
    assert wheel_records.record_of(wheel) == record
    assert wheel.size > 5 * wheel.BLOCK and server.ranges <= 3  # the directory at the end and RECORD: not the whole file


def test_installed_files_are_compared_with_the_record_and_a_changed_or_missing_one_is_named(served, tmp_path,
                                                                                              monkeypatch):
    _, url, record = served
    site = tmp_path / "site"
    with zipfile.ZipFile(tmp_path / "tinypkg-1.0-py3-none-any.whl") as z:
        z.extractall(site)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    entry = {"version": "1.0", "record": record}
    row = wheel_records.verify_one("tinypkg", entry)
    assert (row["installed"], row["files"], row["equal"], row["differ"], row["missing"], row["moved"]) == \
        ("1.0", 3, 3, [], [], 1)  # the script under .data/scripts is the installer's to place: not compared
    (site / "tinypkg" / "data.bin").write_bytes(b"changed")
    (site / "tinypkg" / "__init__.py").unlink()
    row = wheel_records.verify_one("tinypkg", entry)
    assert row["differ"] == ["tinypkg/data.bin"] and row["missing"] == ["tinypkg/__init__.py"]
    assert "0 of 1 locked wheels installed here file for file" in wheel_records.table([row])
    assert wheel_records.verify_one("no-such-package", entry)["installed"] is None


@pytest.mark.parametrize("name, fits", [
    ("numpy-2.5.2-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", True),
    ("jax-0.11.2-py3-none-any.whl", True),
    ("numpy-2.5.2-cp313-cp313-manylinux_2_27_x86_64.whl", False),
    ("numpy-2.5.2-cp312-cp312-manylinux_2_27_aarch64.whl", False),
    ("numpy-2.5.2-cp312-cp312-macosx_14_0_arm64.whl", False),
    ("duckdb-2.0.1-cp312-abi3-manylinux_2_27_x86_64.whl", True),
    ("transformer_engine_jax-2.20.2.tar.gz", False)])
def test_only_a_wheel_the_images_python_installs_is_taken(name, fits):
    assert wheel_records.fits(name) is fits
