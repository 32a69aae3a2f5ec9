"""Your turn (attnlab/yourturn/): every reference solution passes, every usual mistake is named, and the
hostile corpus is refused or stopped by its limit with a sentence, with nothing outside the sandbox run."""

from __future__ import annotations

import ast
import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from attnlab.yourturn import allowlist, exercises, grade, progress, sandbox, share
from tests.yourturn_cases import MISTAKES

ROOT = Path(__file__).resolve().parents[1]
PWNED = Path(f"/tmp/attnlab-pwned-{uuid.uuid4().hex[:8]}")


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_the_labs_own_solution_passes_every_case(name):
    v = grade.check(name, exercises.get(name).solution)
    assert v.passed, (v.status, v.message, v.cases)
    assert len(v.cases) >= 2 and not v.mistakes


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_the_skeleton_is_refused_or_wrong_never_right(name):
    v = grade.check(name, exercises.get(name).skeleton)
    assert not v.passed and v.message or v.hints


@pytest.mark.parametrize(("exercise", "mistake"), list(MISTAKES))
def test_a_usual_mistake_is_named_with_a_hint(exercise, mistake):
    v = grade.check(exercise, MISTAKES[(exercise, mistake)])
    assert v.status == "wrong" and mistake in v.mistakes, (v.status, v.mistakes, v.message)
    hint = next(m.sentence for m in exercises.get(exercise).mistakes if m.name == mistake)
    assert hint in v.hints
    solution = exercises.get(exercise).solution
    assert all(line.strip() not in hint for line in solution.splitlines() if len(line.strip()) > 25)  # no solution


def test_the_issues_list_of_mistakes_is_covered():
    named = {m for _, m in MISTAKES}
    for wanted in ("no scale", "scale 1/d", "softmax over queries", "output (B, N, T, H)", "off by one",
                   "bottom-right aligned", "filled with 0", "K/V heads mapped wrongly", "no max subtracted"):
        assert wanted in named


def test_cases_include_t_not_s_gqa_and_a_fully_masked_row():
    whats = " ".join(c.what for e in exercises.EXERCISES.values() for c in e.cases)
    assert "T ≠ S" in whats and "GQA" in whats and "MQA" in whats and "see no key" in whats


def test_a_copy_of_k_and_v_is_seen_in_the_scratch_memory():
    copy = '''def attention(q, k, v):
    G = q.shape[2] // k.shape[2]
    kk = jnp.repeat(k, G, axis=2)
    vv = jnp.repeat(v, G, axis=2)
    s = jnp.einsum("btnh,bsnh->bnts", q, kk) / jnp.sqrt(q.shape[-1])
    return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(s, axis=-1), vv)
'''
    v = grade.check("gqa", copy)
    assert v.mistakes == ("K/V copied",) and all(c.passed for c in v.cases)  # right numbers, a named mistake
    assert v.scratch_bytes is not None and v.lab_scratch_bytes is not None
    assert v.scratch_bytes >= v.lab_scratch_bytes


def test_the_online_softmax_step_runs_inside_the_tiled_loop_and_says_where_it_first_went_wrong():
    v = grade.check("online_softmax", MISTAKES[("online_softmax", "o not rescaled")])
    assert not v.passed and any("first wrong at query block" in c.note for c in v.cases)


# ------------------------------------------------------------------------------------------------
# the hostile corpus: each refused by the allowlist with a sentence, or stopped by a limit
# ------------------------------------------------------------------------------------------------
def _fn(body: str, name: str = "attention", params: str = "q, k, v") -> str:
    return f"def {name}({params}):\n" + "\n".join("    " + line for line in body.splitlines()) + "\n"


LISTENER_PORT: list[int] = []


def _port() -> int:
    return LISTENER_PORT[0] if LISTENER_PORT else 1


HOSTILE = {
    "import at the top": "import os\n" + _fn("return q"),
    "import inside": _fn("import os\nreturn q"),
    "from import": _fn("from os import system\nreturn q"),
    "__import__": _fn(f"__import__('os').system('touch {PWNED}')\nreturn q"),
    "dunder class": _fn("return q.__class__"),
    "subclasses escape": _fn("return ().__class__.__bases__[0].__subclasses__()"),
    "getattr": _fn("return getattr(q, 'shape')"),
    "eval": _fn("return eval('q')"),
    "exec": _fn("exec('x = 1')\nreturn q"),
    "open a file": _fn(f"open('{PWNED}', 'w').write('x')\nreturn q"),
    "globals": _fn("return globals()"),
    "f-string": _fn("x = f'{q}'\nreturn q"),
    "str.format escape": _fn("x = '{0.__class__}'.format(q)\nreturn q"),
    "lambda": _fn("f = lambda x: x\nreturn f(q)"),
    "comprehension": _fn("x = [i for i in range(3)]\nreturn q"),
    "while loop": _fn("while True:\n    q = q\nreturn q"),
    "huge range": _fn("for i in range(10**9):\n    q = q + 1\nreturn q"),
    "range over 64": _fn("for i in range(1000):\n    q = q + 1\nreturn q"),
    "range of a name": _fn("n = 5\nfor i in range(n):\n    q = q + 1\nreturn q"),
    "three nested loops": _fn("for a in range(2):\n    for b in range(2):\n        for c in range(2):\n"
                              "            q = q + 1\nreturn q"),
    "debug callback": _fn("jax.debug.callback(print, q)\nreturn q"),
    "pure_callback": _fn("return jax.pure_callback(lambda x: x, q, q)"),
    "io_callback": _fn("return jax.experimental.io_callback(print, None, q)"),
    "jnp.save": _fn(f"jnp.save('{PWNED}', q)\nreturn q"),
    "jnp.load": _fn("return jnp.load('/etc/passwd')"),
    "numpy instead of jnp": _fn("return np.zeros(3)"),
    "unicode look-alike name": "def аttention(q, k, v):\n    return q\n",  # the first letter is Cyrillic
    "unicode look-alike call": _fn("return jnp.ехp(q)"),
    "very long input": _fn("q = q + 1\n" * 2000 + "return q"),
    "deep nesting": _fn("return " + "(" * 300 + "q" + ")" * 300),
    "a class": "class A:\n    pass\n" + _fn("return q"),
    "try/except": _fn("try:\n    x = 1\nexcept Exception:\n    x = 2\nreturn q"),
    "with": _fn(f"with open('{PWNED}', 'w') as f:\n    f.write('x')\nreturn q"),
    "global": _fn("global x\nx = 1\nreturn q"),
    "del": _fn("del q\nreturn k"),
    "yield": _fn("yield q"),
    "async": "async def attention(q, k, v):\n    return q\n",
    "decorator": "@jax.jit\n" + _fn("return q"),
    "star args": "def attention(*args):\n    return args[0]\n",
    "breakpoint": _fn("breakpoint()\nreturn q"),
    "in-place update": _fn("return q.at[0].set(1.0)"),
    "power tower": _fn("x = 10 ** 100000\nreturn q"),
    "power of a power": _fn("x = (2 ** 8) ** 8\nreturn q"),
    "a socket": _fn("s = socket.socket()\nreturn q"),
    "os.system": _fn("os.system('true')\nreturn q"),
    "builtins": _fn("return __builtins__"),
    "namespace dunder": _fn("return jnp.__dict__"),
    "vars": _fn("return vars()"),
    "walrus": _fn("if (x := 1):\n    q = q\nreturn q"),
    "print": _fn("print(q)\nreturn q"),
    "tolist": _fn("return q.tolist()"),
    "jax.random": _fn("return jax.random.normal(jax.random.key(0), q.shape)"),
    "module loader": _fn("return math.__loader__"),
    "NUL": _fn("return q\x00"),
    "long string": _fn(f"x = '{'a' * 100}'\nreturn q"),
    "type()": _fn("return type(q)"),
    "bound method escape": _fn("return range.__self__"),
    "no function of that name": "def helper(q):\n    return q\n",
    "top-level statement": "x = 1\n" + _fn("return q"),
    "a connection": _fn("c = socket.create_connection(('127.0.0.1', 1))\nreturn q"),
    "bool's methods": _fn("return bool.mro()"),
    "bool's dunders": _fn("return bool.__subclasses__()"),
    "an array method not listed": _fn("return q.any().item()"),
    "dot_product_attention from scratch": _fn("return jax.nn.dot_product_attention(q, k, v)"),
}
# allowed by the allowlist, stopped by the layers around it
LIMITED = {
    "recursion": (_fn("return attention(q, k, v)"), "stopped", "calls itself"),
    "huge allocation": (_fn("return jnp.zeros((1048576, 1048576)) + q.sum()"), "refused",
                        "far more than this exercise needs"),
}


@pytest.fixture(scope="module")
def listener():
    """A local port that records any connection (an attack that opens a socket would reach it)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.settimeout(0.2)
    LISTENER_PORT[:] = [s.getsockname()[1]]
    got, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                got.append(s.accept())
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield got
    stop.set()
    t.join(2)
    s.close()


def test_the_hostile_corpus_has_at_least_forty_cases():
    assert len(HOSTILE) + len(LIMITED) >= 40


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_code_is_refused_with_a_sentence_and_nothing_runs(case, listener):
    source = HOSTILE[case].replace("('127.0.0.1', 1)", f"('127.0.0.1', {_port()})")
    v = grade.check("attention", source)
    assert v.status == "refused", (case, v.status, v.message)
    assert v.message and len(v.message) > 15 and "Traceback" not in v.message
    assert not PWNED.exists() and not listener


@pytest.mark.parametrize("case", list(LIMITED))
def test_code_the_allowlist_admits_is_stopped_by_its_limits(case):
    source, status, words = LIMITED[case]
    v = grade.check("attention", source)
    assert v.status == status and words in v.message, (case, v.status, v.message)


def test_a_sandbox_that_waited_for_a_cpu_says_the_server_was_busy_not_that_the_code_loops(monkeypatch):
    # both wall limits pass while the process has used little CPU (here: still importing JAX): the load is the
    # server's, so the learner is told to press again, not that their code does not end
    monkeypatch.setattr(sandbox, "WALL_S", 0.3)
    monkeypatch.setattr(sandbox, "BUSY_WALL_S", 0.6)
    v = grade.check("attention", exercises.ATTENTION.solution)
    assert v.status == "stopped" and "too busy" in v.message and "press Check again" in v.message, v.message
    assert "within 1 s" in v.message and "loop" not in v.message  # BUSY_WALL_S, the limit it met


def test_a_sandbox_still_waiting_for_a_cpu_at_the_wall_limit_is_given_its_turn_not_stopped(monkeypatch):
    # a solution needs 2-3 s of CPU: at 0.3 s it has had far less than CPU_S / 2, so the lab waits on (killed, it
    # would start again from nothing), up to BUSY_WALL_S
    monkeypatch.setattr(sandbox, "WALL_S", 0.3)
    v = grade.check("attention", exercises.ATTENTION.solution)
    assert v.status == "passed", v.message


@pytest.mark.alone  # a CPU limit reached in time: on cores another test keeps busy, the wall limit comes first
def test_a_python_number_that_grows_without_end_is_stopped_by_the_cpu_limit():
    v = grade.check("attention", _fn("n = 10\nfor i in range(64):\n    n = n * n\nreturn q"))
    assert v.status == "stopped" and ("CPU" in v.message or "memory" in v.message), v.message
    assert "too busy" not in v.message, v.message  # that sentence names CPU too: the server's load, not the limit


def test_the_sandbox_limits_forbid_new_files_and_sockets():
    """The layer under the allowlist: once the limits are set, the process can open, create and write nothing."""
    code = f"""
import os, socket, sys
from attnlab.yourturn.sandbox import _limit
_limit()
results = []
for attempt in (lambda: open('{PWNED}', 'w'), lambda: socket.socket(), lambda: os.open('/etc/hostname', os.O_RDONLY)):
    try:
        attempt()
        results.append('opened')
    except OSError:
        results.append('refused')
print(results)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "['refused', 'refused', 'refused']", out.stdout + out.stderr
    assert not PWNED.exists()


# ------------------------------------------------------------------------------------------------
# links and counts
# ------------------------------------------------------------------------------------------------
def test_a_link_carries_the_code_exactly_and_a_damaged_one_is_refused():
    code = exercises.get("decode").solution
    assert share.decode(share.encode(code)) == (code, None)
    for bad in ("not base64!", "A" * 20, "", "x" * 20_000):
        got, why = share.decode(bad)
        assert got is None and why
    bomb = share.encode("a" * 1_000_000)  # a small link that decompresses to a megabyte
    assert share.decode(bomb)[0] is None


def test_the_allowlist_reads_a_link_without_running_it():
    assert allowlist.refusal(share.decode(share.encode(HOSTILE["open a file"]))[0], "attention")


def test_progress_counts_attempts_passes_and_mistakes_only():
    progress.reset()
    progress.record("attention", False, ("no scale",))
    progress.record("attention", True)
    progress.record("attention", False, (), refused=True)
    snap = progress.snapshot()["attention"]
    assert snap == {"attempts": 3, "passes": 1, "refused": 1, "learners": 0, "mistakes": {"no scale": 1}}
    progress.reset()


def test_a_check_traces_the_learners_code_at_full_float32_precision_and_a_timing_at_jaxs_default():
    """On a GPU, float32 products run on TF32 tensor cores by default: their rounding alone failed the lab's own
    solution at the large-logits case on the H200. A check measures the learner's math, so it traces with the
    "highest" matmul precision; a timing keeps JAX's default, as the lab's backends are timed."""
    import jax

    ex = exercises.get("attention")
    specs = [((1, 8, 2, 16), "float32")] * 3
    modules = {p: jax.export.deserialize(sandbox.export(ex.solution, "attention", [(specs, {})], "cuda", precision=p)[0])
               .mlir_module() for p in (None, "highest")}
    assert "HIGHEST" in modules["highest"] and "HIGHEST" not in modules[None]
    seen = []
    real = sandbox.export
    try:
        sandbox.export = lambda *a, **kw: seen.append(kw.get("precision")) or real(*a, **kw)
        assert grade.check("attention", ex.solution).passed
    finally:
        sandbox.export = real
    assert seen == ["highest"]


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_the_solution_still_passes_with_the_skeletons_docstring_kept(name):
    """A learner fills in the skeleton's body and keeps its docstring, which runs past the 64 letters text may have."""
    ex = exercises.get(name)
    doc = next((n for n in ast.walk(ast.parse(ex.skeleton)) if isinstance(n, ast.FunctionDef)), None)
    docstring = ast.get_docstring(doc) if doc else None
    if not docstring:
        pytest.skip("this skeleton has no docstring")
    head, _, body = ex.solution.partition("\n")
    kept = f'{head}\n    """{docstring}"""\n{body}'
    assert allowlist.refusal(kept, ex.entry) is None
    assert grade.check(name, kept).passed


def test_an_untouched_skeleton_is_told_to_replace_the_dots():
    assert "replace the `...`" in (allowlist.refusal("def attention(q, k, v):\n    ...\n", "attention") or "")


def test_pace_admits_limit_presses_in_any_window_and_then_says_how_long_to_wait():
    from attnlab.yourturn import pace

    presses: list[float] = []
    assert [pace.admit(presses, t, 3) for t in (0.0, 1.0, 2.0)] == [None] * 3
    why = pace.admit(presses, 30.0, 3)
    assert why and "Wait 30 s" in why and len(presses) == 3  # refused presses are not counted
    assert pace.admit(presses, 60.5, 3) is None  # the first press left the window
    assert all(pace.admit([], float(t), 0) is None for t in range(5))  # 0: no limit


def test_presses_share_one_window_per_learner_and_let_go_of_idle_ones():
    from attnlab.yourturn import pace

    presses = pace.Presses(keep=2)
    assert [presses.admit("a", t, 2) for t in (0.0, 1.0)] == [None, None]  # two tabs of browser a, or one
    assert presses.admit("a", 2.0, 2) and presses.admit("b", 2.0, 2) is None  # a is at its limit, b is not
    presses.admit("c", 100.0, 2)  # a third learner, past keep=2: windows that emptied go
    assert set(presses._by) == {"c"}


def test_the_check_limit_is_a_setting():
    from attnlab.settings import Settings

    assert Settings.from_env({}).checks_per_minute == 10
    assert Settings.from_env({"ATTNLAB_CHECKS_PER_MINUTE": "0"}).checks_per_minute == 0
    bad = Settings.from_env({"ATTNLAB_CHECKS_PER_MINUTE": "lots"})
    assert bad.checks_per_minute == 10 and any("ATTNLAB_CHECKS_PER_MINUTE" in p for p in bad.problems)
