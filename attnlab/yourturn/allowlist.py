"""What a learner's code may be: a few functions of array arithmetic, and nothing else (deny by default).

    problem = refusal(source, "attention")      # None, or a sentence saying what is not allowed

The source is parsed by Python's own parser (`ast`) and every node is checked against the lists below:
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

MAX_SOURCE_CHARS = 6000
MAX_NODES = 2000
MAX_DEPTH = 40  # nesting of nodes
MAX_RANGE = 64  # for i in range(n): n at most this (a constant)
MAX_LOOP_NESTING = 2
MAX_CONSTANT = 1 << 20  # ints and floats larger than this in the source are refused
MAX_STRING = 64  # einsum subscripts and dtype names
MAX_DOCSTRING = 4000  # a docstring (a lone text line) is never evaluated into anything: the skeletons' run longer
MAX_POW = 8  # x ** c with |c| at most this, c a constant

# what each namespace the code may use exposes (also the only attributes its runtime object has)
NAMESPACES: dict[str, frozenset[str]] = {
    "jnp": frozenset("""einsum matmul dot exp exp2 log log1p sqrt square abs maximum minimum max min sum mean
        where tril triu ones zeros ones_like zeros_like full full_like arange broadcast_to expand_dims squeeze
        swapaxes transpose reshape concatenate stack repeat tile logical_and logical_or logical_not isfinite
        isinf isnan inf nan newaxis finfo float32 bfloat16 float16 int32 bool_ tanh clip einsum_path take
        take_along_axis tensordot less less_equal greater greater_equal equal not_equal asarray any all bool
        int8 argmax argmin cumsum""".split()),
    "jax.nn": frozenset("softmax log_softmax logsumexp relu one_hot dot_product_attention".split()),
    "jax.lax": frozenset("dot_general exp max min rsqrt select broadcast_in_dim stop_gradient".split()),
    "math": frozenset("sqrt log exp inf pi isqrt".split()),
}
ALIASES = {"lax": "jax.lax", "nn": "jax.nn", "jax.numpy": "jnp", "np": None}  # np: refused with a hint
ARRAY_ATTRS = frozenset("""shape ndim dtype size T astype reshape swapaxes transpose max min sum mean squeeze
    real any all argmax argmin""".split())
BUILTINS = frozenset("range len min max abs int float bool".split())
# what a few exercises take that the others do not: the name, the entries (functions) it is accepted in, and why not
# elsewhere (the from-scratch exercises ask for the attention itself)
ONLY_IN = {"dot_product_attention": (("decode",), "this exercise asks you to write the attention itself (the lab's "
                                     "rule here): use jnp.einsum and jax.nn.softmax; jax.nn.dot_product_attention is "
                                     "accepted in the decode exercise (page 8), and page 4 times it beside yours")}
# Python a learner reaches for that does not trace: what to use instead
INSTEAD = {"sum": "jnp.sum(x) or x.sum()", "any": "jnp.any(x) or x.any()", "all": "jnp.all(x) or x.all()",
           "round": "jnp.round is not needed here: compare with <, >", "print": "return what you want to see",
           "list": "a [a, b] list or jnp.stack", "tuple": "a (a, b) tuple", "zip": "arrays and jnp functions",
           "enumerate": "for i in range(n)", "pow": "x ** c", "divmod": "// and %", "sorted": "jnp functions"}
BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult, ast.BitAnd, ast.BitOr)
UNARY = (ast.UAdd, ast.USub, ast.Not, ast.Invert)
COMPARE = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
BOOL = (ast.And, ast.Or)


class Refused(ValueError):
    """The code uses something the lab does not run, said in a sentence (with the line)."""


def _where(node: ast.AST) -> str:
    return f"line {node.lineno}: " if hasattr(node, "lineno") else ""


def dotted(node: ast.AST) -> str | None:
    """`jax.nn.softmax` -> "jax.nn.softmax"; None for anything but names joined by dots."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _namespace_of(name: str) -> tuple[str, str] | None:
    """("jax.nn", "softmax") for "jax.nn.softmax" / "nn.softmax"; None when it names no namespace."""
    head, _, leaf = name.rpartition(".")
    head = ALIASES.get(head, head)
    return (head, leaf) if head in NAMESPACES else None


class _Checker(ast.NodeVisitor):
    def __init__(self, entry: str = ""):
        self.entry = entry
        self.nodes = 0
        self.loop_depth = 0
        self.depth = 0
        self.functions: set[str] = set()

    def refuse(self, node: ast.AST, why: str):
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

    def visit_arguments(self, node):
        self.generic_visit(node)

    def visit_arg(self, node):
        self._name(node, node.arg)

    def visit_Return(self, node):
        self.generic_visit(node)

    def visit_Pass(self, node):
        self.generic_visit(node)

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

    def visit_If(self, node):
        self.generic_visit(node)

    def visit_For(self, node):
        if not isinstance(node.target, ast.Name):
            self.refuse(node, "a loop variable must be one plain name")
        call = node.iter
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range"):
            self.refuse(node, f"loops run over range(n) only, with n a number of at most {MAX_RANGE}")
        if call.keywords or not 1 <= len(call.args) <= 3 or not all(_small_int(a) for a in call.args):
            self.refuse(node, f"range() takes whole numbers written out, the count at most {MAX_RANGE} "
                              "(a loop over the sequence would unroll into a huge program: use arrays)")
        if len(call.args) == 3 and _int(call.args[2]) == 0:
            self.refuse(node, "range()'s step must not be 0 (the loop would never end)")
        if len(range(*[_int(a) for a in call.args])) > MAX_RANGE:
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
        value = _number(exponent)
        if value is None or abs(value) > MAX_POW:
            self.refuse(node, f"x ** c takes a number c written out, at most {MAX_POW} (e.g. d ** -0.5)")

    def visit_UnaryOp(self, node):
        if not isinstance(node.op, UNARY):
            self.refuse(node, "that operator is not used here")
        self.generic_visit(node)

    def visit_BoolOp(self, node):
        self.generic_visit(node)

    def visit_Compare(self, node):
        if not all(isinstance(op, COMPARE) for op in node.ops):
            self.refuse(node, "compare with ==, !=, <, <=, > or >= (is and in are not used here)")
        self.generic_visit(node)

    def visit_IfExp(self, node):
        self.generic_visit(node)

    def visit_Tuple(self, node):
        self.generic_visit(node)

    def visit_List(self, node):
        if len(node.elts) > 16:
            self.refuse(node, "lists here are short (at most 16 items)")
        self.generic_visit(node)

    def visit_Slice(self, node):
        self.generic_visit(node)

    def visit_Subscript(self, node):
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
                found = _namespace_of(name)
                if name in ("jax.nn", "jax.lax", "jax.numpy"):
                    return  # the head of a longer name, checked there
                if found is None or found[1] not in NAMESPACES[found[0]]:
                    self.refuse(node, f"the lab's rule: {name} is not among the functions its exercises run "
                                      f"({_offer(name)})")
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

    def visit_keyword(self, node):
        self.generic_visit(node)

    # operators, contexts: the leaves of the tree
    def _leaf(self, node):
        self.generic_visit(node)

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


FORBIDDEN = frozenset("""eval exec compile open input print getattr setattr delattr hasattr globals locals vars
    dir type object super breakpoint help memoryview bytearray bytes id hash iter next callable classmethod
    staticmethod property isinstance issubclass format repr chr ord exit quit license credits copyright
    debug callback pure_callback io_callback save savez load fromfile tofile os sys subprocess socket
    builtins importlib""".split())


def _describe(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:
        text = type(node).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _offer(name: str) -> str:
    found = _namespace_of(name)
    if found is None:
        return "jnp, jax.nn, jax.lax and math offer what an exercise needs"
    return f"{found[0]} offers here: {', '.join(sorted(NAMESPACES[found[0]]))}"


def _number(node) -> float | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _number(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    return None


def _int(node) -> int:
    v = _number(node)
    return int(v)


def _small_int(node) -> bool:
    v = _number(node)
    return isinstance(v, int) and abs(v) <= MAX_RANGE


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
        _Checker(entry).visit(tree)
    except Refused as e:
        return str(e)
    except RecursionError:
        return "the code nests too deeply"
    except Exception as e:  # a check of the lists above that raised: still a sentence, never a traceback
        return f"the lab cannot read this code ({type(e).__name__}: {str(e)[:120]})"
    if entry not in {s.name for s in tree.body if isinstance(s, ast.FunctionDef)}:
        return f"define a function named {entry}(...) (the lab calls it by that name)"
    return None
