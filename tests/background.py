"""Slow checks that need no test's state, started as the session begins and read by their test at its turn.

mypy over attnlab/ takes about 45 s of one core with a cold cache; CI's machine has two, and most tests keep only
one busy, so a check started once the tests are collected is usually done before its test asks for it. pytest's
own plugins run tests in parallel (xdist) or not at all: this runs one process beside the serial suite.
"""

from __future__ import annotations

import atexit
import subprocess

_STARTED: dict[str, subprocess.Popen] = {}


def start(name: str, argv: list[str], cwd: str) -> None:
    """Start `argv` once under `name`, its output kept for `result(name)`."""
    if name not in _STARTED:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        atexit.register(proc.kill)  # a run whose test was deselected or failed first leaves nothing behind
        _STARTED[name] = proc


def result(name: str, argv: list[str], cwd: str, timeout: float = 600) -> tuple[int, str]:
    """(exit status, output) of `name`, started now if it was not."""
    start(name, argv, cwd)
    out, _ = _STARTED[name].communicate(timeout=timeout)
    return _STARTED[name].returncode, out
