"""Each module under attnlab/ is one concept a reader can hold: at most MAX_LINES lines (issue 43)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 300
# Temporary: other engineers are changing these right now (the device worker's admission, the Ray home, the
# timing harness); each leaves this list when its change lands and it is split. Do not add to it.
EXEMPT = {"attnlab/admission.py", "attnlab/service/ray_workers.py", "attnlab/measure/timing.py"}


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_every_module_under_attnlab_is_at_most_300_lines():
    modules = sorted((ROOT / "attnlab").rglob("*.py"))
    assert modules, "no modules found under attnlab/"
    too_long = [f"{p.relative_to(ROOT).as_posix()} has {n} lines (at most {MAX_LINES})"
                for p in modules if p.relative_to(ROOT).as_posix() not in EXEMPT and (n := _lines(p)) > MAX_LINES]
    assert not too_long, "split these into modules of one concept each: " + "; ".join(too_long)


def test_the_exempt_modules_still_exist():
    # an exemption outlives its module only by mistake: a renamed or removed module leaves the list
    missing = sorted(m for m in EXEMPT if not (ROOT / m).exists())
    assert not missing, f"remove from EXEMPT (no such module): {missing}"
