"""The allowlist's node rules: every node of the learner's syntax tree (`ast`) is checked by a visit_ method,
and a node type with no method is refused (deny by default). The names and limits they apply are in
allowed_names.py."""

from __future__ import annotations

import ast
from typing import NoReturn

from attnlab.yourturn.allowed_names import (
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
    MAX_STRING,
    NAMESPACES,
    ONLY_IN,
    dotted,
    int_of,
    namespace_of,
    number,
    offer,
    small_int,
)

BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult, ast.BitAnd, ast.BitOr)
UNARY = (ast.UAdd, ast.USub, ast.Not, ast.Invert)
COMPARE = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


class Refused(ValueError):
    """The code uses something the lab does not run, said in a sentence (with the line)."""


def _where(node: ast.AST) -> str:
    return f"line {node.lineno}: " if hasattr(node, "lineno") else ""




class Checker(ast.NodeVisitor):
    def __init__(self, entry: str = ""):
        self.entry = entry
        self.nodes = 0
        self.loop_depth = 0
        self.depth = 0
        self.functions: set[str] = set()

    def refuse(self, node: ast.AST, why: str) -> NoReturn:
        raise Refused(f"{_where(node)}{why}")

    def generic_visit(self, node: ast.AST):
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.refuse(node, f"the code is too long (more than {MAX_NODES} pieces); a solution needs far fewer")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.refuse(node, "the code nests too deeply")
        try:
            super().generic_visit(node)
        finally:
            self.depth -= 1

    def visit(self, node: ast.AST):
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            self.refuse(node, f"{type(node).__name__} is not something this exercise runs "
                              f"({_describe(node)}); use array arithmetic, jnp and jax.nn functions")
        return method(node)

    # -- module and statements --------------------------------------------------------------------
    def visit_Module(self, node):
        for stmt in node.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                continue  # a docstring
            if not isinstance(stmt, ast.FunctionDef):
                self.refuse(stmt, "only function definitions may stand at the top (no imports or other statements: "
                                  "jnp, jax.nn, jax.lax and math are already there)")
        self.functions = {s.name for s in node.body if isinstance(s, ast.FunctionDef)}
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        self._name(node, node.name)
        if node.decorator_list:
            self.refuse(node, "decorators are not needed (the lab compiles your function with jax.jit itself)")
        a = node.args
        if a.vararg or a.kwarg or a.posonlyargs or a.kwonlyargs:
            self.refuse(node, "use plain parameters (no *args, **kwargs or keyword-only parameters)")
        for arg in a.args:
            self._name(arg, arg.arg)
            if arg.annotation is not None:
                self.visit(arg.annotation)
        if node.returns is not None:
            self.visit(node.returns)
        for d in a.defaults:
            self.visit(d)
        for stmt in node.body:
            self.visit(stmt)

    def visit_arg(self, node):
        self._name(node, node.arg)

    def visit_Expr(self, node):
        value = getattr(node.value, "value", None) if isinstance(node.value, ast.Constant) else None
        if value is Ellipsis:
            self.refuse(node, "replace the `...` with your code")
        elif not isinstance(value, str):
            self.refuse(node, "a line that computes something must assign it to a name or return it")
        elif len(value) > MAX_DOCSTRING:
            self.refuse(node, f"a docstring here is at most {MAX_DOCSTRING:,} letters")
        # a docstring: a lone text line that nothing reads (the skeletons' own run past MAX_STRING)

    def visit_Assign(self, node):
        for t in node.targets:
            self._target(t)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._target(node.target)
        if not isinstance(node.op, BINOPS):
            self.refuse(node, "that operator is not used here")
        if isinstance(node.op, ast.Pow):
            self._pow(node, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._target(node.target)
        self.generic_visit(node)

    def _target(self, t):
        if isinstance(t, ast.Name):
            self._name(t, t.id)
        elif isinstance(t, ast.Tuple):
            for e in t.elts:
                self._target(e)
        else:
            self.refuse(t, "assign to plain names only (arrays are immutable in JAX: build a new one, "
                           "e.g. with jnp.where)")

    def visit_For(self, node):
        if not isinstance(node.target, ast.Name):
            self.refuse(node, "a loop variable must be one plain name")
        call = node.iter
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range"):
            self.refuse(node, f"loops run over range(n) only, with n a number of at most {MAX_RANGE}")
        if call.keywords or not 1 <= len(call.args) <= 3 or not all(small_int(a) for a in call.args):
            self.refuse(node, f"range() takes whole numbers written out, the count at most {MAX_RANGE} "
                              "(a loop over the sequence would unroll into a huge program: use arrays)")
        if len(call.args) == 3 and int_of(call.args[2]) == 0:
            self.refuse(node, "range()'s step must not be 0 (the loop would never end)")
        if len(range(*[int_of(a) for a in call.args])) > MAX_RANGE:
            self.refuse(node, f"the loop runs more than {MAX_RANGE} times")
        if node.orelse:
            self.refuse(node, "for ... else is not used here")
        self.loop_depth += 1
        if self.loop_depth > MAX_LOOP_NESTING:
            self.refuse(node, f"loops nest at most {MAX_LOOP_NESTING} deep here")
        try:
            self._name(node.target, node.target.id)
            for stmt in node.body:
                self.visit(stmt)
        finally:
            self.loop_depth -= 1

    # -- expressions ------------------------------------------------------------------------------
    def visit_BinOp(self, node):
        if not isinstance(node.op, BINOPS):
            self.refuse(node, "that operator is not used here")
        if isinstance(node.op, ast.Pow):
            if isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Pow):
                self.refuse(node, "powers of powers are not used here")
            self._pow(node, node.right)
        self.generic_visit(node)

    def _pow(self, node, exponent):
        value = number(exponent)
        if value is None or abs(value) > MAX_POW:
            self.refuse(node, f"x ** c takes a number c written out, at most {MAX_POW} (e.g. d ** -0.5)")

    def visit_UnaryOp(self, node):
        if not isinstance(node.op, UNARY):
            self.refuse(node, "that operator is not used here")
        self.generic_visit(node)

    def visit_Compare(self, node):
        if not all(isinstance(op, COMPARE) for op in node.ops):
            self.refuse(node, "compare with ==, !=, <, <=, > or >= (is and in are not used here)")
        self.generic_visit(node)

    def visit_List(self, node):
        if len(node.elts) > 16:
            self.refuse(node, "lists here are short (at most 16 items)")
        self.generic_visit(node)

    def visit_Starred(self, node):
        self.refuse(node, "unpacking with * is not used here")

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, bool) or v is None or v is Ellipsis:
            pass
        elif isinstance(v, (int, float)):
            if abs(v) > MAX_CONSTANT:
                self.refuse(node, f"numbers here are at most {MAX_CONSTANT:,} (use jnp.inf for infinity)")
        elif isinstance(v, str):
            if len(v) > MAX_STRING or not v.isascii():
                self.refuse(node, f"text here is short (einsum subscripts, at most {MAX_STRING} letters, ASCII)")
        else:
            self.refuse(node, f"a {type(v).__name__} constant is not used here")
        self.generic_visit(node)

    def visit_Name(self, node):
        self._name(node, node.id)
        if node.id in ("jax",) and isinstance(node.ctx, ast.Load):
            pass  # only as the head of jax.nn.x / jax.lax.x / jax.numpy.x, checked by visit_Attribute
        self.generic_visit(node)

    def visit_Attribute(self, node):
        self._name(node, node.attr)
        name = dotted(node)
        if name is not None:
            head = name.split(".")[0]
            if head == "np":
                self.refuse(node, "use jnp (jax.numpy), not NumPy: your function is traced by JAX")
            if head in ("jax", "jnp", "lax", "nn", "math"):
                found = namespace_of(name)
                if name in ("jax.nn", "jax.lax", "jax.numpy"):
                    return  # the head of a longer name, checked there
                if found is None or found[1] not in NAMESPACES[found[0]]:
                    self.refuse(node, f"the lab's rule: {name} is not among the functions its exercises run "
                                      f"({offer(name)})")
                if found[1] in ONLY_IN and self.entry not in ONLY_IN[found[1]][0]:
                    self.refuse(node, ONLY_IN[found[1]][1])
                return
        if node.attr not in ARRAY_ATTRS:
            self.refuse(node, f"the lab's rule: .{node.attr} is not among the array attributes its exercises use "
                              f"(allowed: {', '.join(sorted(ARRAY_ATTRS))}; jnp offers the rest as functions)")
        self.generic_visit(node)

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Name):
            if f.id not in BUILTINS and f.id not in self.functions:
                instead = f"; use {INSTEAD[f.id]} instead" if f.id in INSTEAD else ""
                self.refuse(node, f"the lab's rule: {f.id}() is not among what its exercises run{instead} (functions "
                                  f"you may call: the listed jnp / jax.nn / jax.lax / math ones, "
                                  f"{', '.join(sorted(BUILTINS))}, and your own)")
        elif not isinstance(f, ast.Attribute):
            self.refuse(node, "call functions by name (jnp.exp(x), x.sum(axis=-1))")
        for k in node.keywords:
            if k.arg is None:
                self.refuse(node, "unpacking with ** is not used here")
            self._name(node, k.arg)
        self.generic_visit(node)

    # nodes with no rule of their own (their children are checked), and operators and contexts: the leaves
    def _leaf(self, node):
        self.generic_visit(node)

    visit_arguments = visit_Return = visit_Pass = visit_If = visit_keyword = _leaf
    visit_BoolOp = visit_IfExp = visit_Tuple = visit_Slice = visit_Subscript = _leaf
    visit_Load = visit_Store = visit_Del = _leaf
    visit_Add = visit_Sub = visit_Mult = visit_Div = visit_FloorDiv = visit_Mod = visit_Pow = visit_MatMult = _leaf
    visit_BitAnd = visit_BitOr = _leaf
    visit_UAdd = visit_USub = visit_Not = visit_Invert = visit_And = visit_Or = _leaf
    visit_Eq = visit_NotEq = visit_Lt = visit_LtE = visit_Gt = visit_GtE = _leaf

    def _name(self, node, name: str):
        if not name.isascii() or not name.isidentifier():
            self.refuse(node, f"names are plain ASCII letters, digits and _ ({name!r} is not)")
        if name.startswith("_") and name != "_":  # a lone _ is the usual throwaway name
            self.refuse(node, f"names starting with _ are not used here ({name})")
        if name in FORBIDDEN:
            self.refuse(node, f"the lab's rule: {name} is never run here (no I/O, imports, callbacks or looking "
                              "inside Python objects): use array arithmetic and the jnp / jax.nn functions instead")


def _describe(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:
        text = type(node).__name__
    return text if len(text) <= 60 else text[:57] + "..."

