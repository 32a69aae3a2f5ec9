"""Every module the code and README name exists: a docstring that says `attnlab.measure.runs` or
`attnlab/studies/ladder.py` points a reader at a real file (a module renamed or removed leaves no stale name)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOTTED = re.compile(r"\battnlab(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"\b((?:attnlab|pages|scripts|tests)/[\w/]+\.py)\b")


def _sources() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "app.py", ROOT / "serve.py"]
    for folder in ("attnlab", "pages", "scripts"):  # not tests/: their made-up paths are test data
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def _is_module(parts: list[str]) -> bool:
    path = ROOT.joinpath(*parts)
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _dotted_name_exists(name: str) -> bool:
    """attnlab.a.b is a module, or attnlab.a.b.c names something of module attnlab.a.b (its text says it)."""
    parts = name.split(".")
    for n in range(len(parts), 1, -1):
        if _is_module(parts[:n]):
            if n == len(parts):
                return True
            path = ROOT.joinpath(*parts[:n])
            source = path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
            return re.search(rf"\b{parts[n]}\b", source.read_text()) is not None
    return False


def test_every_module_named_in_the_code_and_readme_exists():
    stale = []
    for f in _sources():
        text = f.read_text()
        stale += [f"{f.relative_to(ROOT)}: {m}" for m in DOTTED.findall(text) if not _dotted_name_exists(m)]
        stale += [f"{f.relative_to(ROOT)}: {m}" for m in PATH.findall(text) if not (ROOT / m).exists()]
    assert not stale, stale
