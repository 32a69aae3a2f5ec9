"""CI runs the linter and the type checker through these tests (issue 43)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    """`tool` from the virtualenv this Python runs in, at the repository's root."""
    exe = Path(sys.executable).with_name(tool)
    return subprocess.run([str(exe), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_in_the_code_and_tests():
    out = _run("ruff", "check", "attnlab", "pages", "app.py", "serve.py", "scripts", "tests")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_finds_no_type_error_in_attnlab(tmp_path):
    # the files and settings are pyproject.toml's [tool.mypy]; its cache goes to tmp_path, never the checkout
    out = _run("mypy", "--cache-dir", str(tmp_path / "mypy_cache"))
    assert out.returncode == 0, out.stdout + out.stderr
