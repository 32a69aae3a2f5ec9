"""Each module under attnlab/ and pages/ is one concept a reader can hold: at most MAX_LINES lines (issue 43); the
run layer's middle states its rules in a line each, the histories in docs/design-notes.md."""

import ast
import io
import tokenize
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



MIDDLE = ("attnlab/admission.py", "attnlab/measure/compiled.py", "attnlab/backends/base.py")
MAX_DOC_SHARE = 0.15


def _doc_lines(src: str) -> tuple[int, int]:
    """(docstring and whole-line comment lines, non-blank lines) of a module's source."""
    lines = src.splitlines()
    doc: set[int] = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                doc.update(range(first.lineno, first.end_lineno + 1))
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
        if t.type == tokenize.COMMENT and lines[t.start[0] - 1].lstrip().startswith("#"):
            doc.add(t.start[0])
    return len(doc), sum(1 for line in lines if line.strip())


def test_the_counting_sees_docstrings_and_whole_line_comments_not_code():
    src = '''"""A module."""\n\n# a rule\nx = 1  # inline\n\n\ndef f():\n    """Two\n    lines."""\n    return x\n'''
    assert _doc_lines(src) == (4, 7)


def test_the_middle_states_rules_not_histories():
    doc = total = 0
    for rel in MIDDLE:
        d, n = _doc_lines((ROOT / rel).read_text(encoding="utf-8"))
        doc, total = doc + d, total + n
    assert doc / total <= MAX_DOC_SHARE, (
        f"{doc} of the {total} non-blank lines of {', '.join(MIDDLE)} are docstrings or comments ({doc / total:.1%}, at "
        f"most {MAX_DOC_SHARE:.0%}): state the rule and one line of why; the measured history goes to docs/design-notes.md")
