"""Each module under attnlab/ and pages/ is one concept a reader can hold: at most MAX_LINES lines (issue 43)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 300


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_every_module_under_attnlab_and_pages_is_at_most_300_lines():
    modules = sorted([*(ROOT / "attnlab").rglob("*.py"), *(ROOT / "pages").glob("*.py")])
    assert len(modules) > 100, "the modules under attnlab/ and pages/ were not found"
    too_long = [f"{p.relative_to(ROOT).as_posix()} has {n} lines (at most {MAX_LINES})"
                for p in modules if (n := _lines(p)) > MAX_LINES]
    assert not too_long, "split these into modules of one concept each: " + "; ".join(too_long)

