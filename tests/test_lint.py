"""CI runs the linter and the type checker through these tests (issue 43)."""

import subprocess
import sys
import tempfile
from pathlib import Path

from tests import background

ROOT = Path(__file__).resolve().parents[1]


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    """`tool` from the virtualenv this Python runs in, at the repository's root."""
    exe = Path(sys.executable).with_name(tool)
    return subprocess.run([str(exe), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_in_the_code_and_tests():
    out = _run("ruff", "check", "attnlab", "pages", "app.py", "serve.py", "scripts", "tests")
    assert out.returncode == 0, out.stdout + out.stderr


def mypy_argv() -> list[str]:
    """pyproject.toml's [tool.mypy] (files and settings); its cache in a fresh folder, never the checkout."""
    return [str(Path(sys.executable).with_name("mypy")), "--cache-dir", tempfile.mkdtemp(prefix="attnlab-mypy-")]


def test_mypy_finds_no_type_error_in_attnlab():
    # started beside the first tests by conftest.py (tests/background.py) when this test is selected
    status, out = background.result("mypy", mypy_argv(), str(ROOT))
    assert status == 0, out
