"""The allowlist's name list: what a learner's code may name (the namespaces' functions, array attributes,
builtins), what it may never name, and the limits on its size. The rules over Python's syntax tree that
apply these lists are in node_rules.py; allowlist.refusal is the one way in. With them, how a dotted name or a number written
out is read."""

from __future__ import annotations

import ast
from types import SimpleNamespace

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

FORBIDDEN = frozenset("""eval exec compile open input print getattr setattr delattr hasattr globals locals vars
    dir type object super breakpoint help memoryview bytearray bytes id hash iter next callable classmethod
    staticmethod property isinstance issubclass format repr chr ord exit quit license credits copyright
    debug callback pure_callback io_callback save savez load fromfile tofile os sys subprocess socket
    builtins importlib""".split())


def dotted(node: ast.AST) -> str | None:
    """`jax.nn.softmax` -> "jax.nn.softmax"; None for anything but names joined by dots."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def namespace_of(name: str) -> tuple[str, str] | None:
    """("jax.nn", "softmax") for "jax.nn.softmax" / "nn.softmax"; None when it names no namespace."""
    head, _, leaf = name.rpartition(".")
    namespace = ALIASES.get(head, head)  # None for a refused alias (np)
    return (namespace, leaf) if namespace is not None and namespace in NAMESPACES else None


def offer(name: str) -> str:
    found = namespace_of(name)
    if found is None:
        return "jnp, jax.nn, jax.lax and math offer what an exercise needs"
    return f"{found[0]} offers here: {', '.join(sorted(NAMESPACES[found[0]]))}"


def number(node) -> float | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = number(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    return None


def int_of(node) -> int:
    v = number(node)
    if v is None:  # callers ask only after small_int said it is one
        raise TypeError(f"not a number: {ast.dump(node)[:80]}")
    return int(v)


def small_int(node) -> bool:
    v = number(node)
    return isinstance(v, int) and abs(v) <= MAX_RANGE


def scope() -> dict:
    """The globals a learner's code runs with: only the listed names of each namespace, and a few builtins
    (range bounded to MAX_RANGE turns)."""
    import math

    import jax
    import jax.numpy as jnp

    def only(module, names):
        return SimpleNamespace(**{n: getattr(module, n) for n in names if hasattr(module, n)})

    nn, lax = only(jax.nn, NAMESPACES["jax.nn"]), only(jax.lax, NAMESPACES["jax.lax"])
    np_ns = only(jnp, NAMESPACES["jnp"])

    def bounded_range(*args):
        r = range(*args)
        if len(r) > MAX_RANGE:
            raise ValueError(f"range() here runs at most {MAX_RANGE} times")
        return r

    builtins = {"range": bounded_range, "len": len, "min": min, "max": max, "abs": abs, "int": int, "float": float,
                "bool": bool}
    return {"__builtins__": builtins, "jnp": np_ns, "jax": SimpleNamespace(nn=nn, lax=lax, numpy=np_ns), "lax": lax,
            "nn": nn, "math": only(math, NAMESPACES["math"])}
