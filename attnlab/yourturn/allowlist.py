"""What a learner's code may be: a few functions of array arithmetic, and nothing else (deny by default).

    problem = refusal(source, "attention")      # None, or a sentence saying what is not allowed

The source is parsed by Python's own parser (`ast`) and every node is checked (node_rules.py) against the
lists (allowed_names.py):
function definitions with plain parameters, assignments, `return`, `if`, arithmetic, `&` and `|` (masks),
comparisons,
subscripts and slices, `for i in range(n)` with a small constant n, calls to the listed `jnp`, `jax.nn`,
`jax.lax` and `math` functions, the listed array attributes and methods, and calls to the learner's
own functions. No import, no name or attribute starting with `_`, no builtins beyond `range`, `len`,
`min`, `max`, `abs`, `int`, `float`, `bool`, no callbacks into Python, no I/O, only ASCII names.

What this guarantees, and what it does not: it refuses every construct not listed, so a learner's text
cannot name `open`, `__import__`, `getattr`, a dunder attribute, `jax.debug.callback` or `jnp.save`, and
so cannot reach Python objects the lists do not name. It does not bound what listed arithmetic costs: a
huge array, or a huge Python number, is listed arithmetic. That is the job of the layers around it
(attnlab/yourturn/sandbox.py): the code is traced in a disposable process with limits on time, memory
and files, only its compiled program reaches the device worker, and that program's memory is admitted
like any run's. Why not RestrictedPython (the well-kept library for this): it makes a large subset of
Python safe by rewriting it with guard hooks; a learner here needs a tiny numeric subset, and a list of
what is allowed is shorter to read, and to check, than the guards of everything else.
"""

from __future__ import annotations

import ast

from attnlab.yourturn.allowed_names import (  # noqa: F401  (the lists, read here by sandbox.py and share.py)
    ALIASES,
    ARRAY_ATTRS,
    BUILTINS,
    FORBIDDEN,
    INSTEAD,
    MAX_CONSTANT,
    MAX_DEPTH,
    MAX_DOCSTRING,
    MAX_LOOP_NESTING,
    MAX_NODES,
    MAX_POW,
    MAX_RANGE,
    MAX_SOURCE_CHARS,
    MAX_STRING,
    NAMESPACES,
    ONLY_IN,
)
from attnlab.yourturn.node_rules import Checker, Refused, dotted  # noqa: F401


def refusal(source: str, entry: str) -> str | None:
    """None when `source` may run as the exercise's function `entry`; else why not, in a sentence (never raises:
    a share link's code reaches this before anything else)."""
    if not isinstance(source, str) or not source.strip():
        return "write the function first (the box is empty)"
    if len(source) > MAX_SOURCE_CHARS:
        return f"the code is {len(source):,} characters: at most {MAX_SOURCE_CHARS:,} here"
    if "\x00" in source:
        return "the code contains a NUL character"
    try:
        tree = ast.parse(source, mode="exec")
    except SyntaxError as e:
        return f"line {e.lineno}: Python cannot read this ({e.msg})"
    except (RecursionError, MemoryError, ValueError):
        return "the code nests too deeply for Python to read"
    try:
        Checker(entry).visit(tree)
    except Refused as e:
        return str(e)
    except RecursionError:
        return "the code nests too deeply"
    except Exception as e:  # a check of the lists above that raised: still a sentence, never a traceback
        return f"the lab cannot read this code ({type(e).__name__}: {str(e)[:120]})"
    if entry not in {s.name for s in tree.body if isinstance(s, ast.FunctionDef)}:
        return f"define a function named {entry}(...) (the lab calls it by that name)"
    return None
