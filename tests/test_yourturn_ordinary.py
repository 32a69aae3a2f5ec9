"""Issue 42, section 2: the exercises take a learner's ordinary numeric Python (bool, any/all, comparisons and
reductions), say the lab's rule where they refuse, and name the mistakes the tasks forbid or the learner makes
most (a copy of K/V in GQA, o not rescaled without the guard, a decode step's top-left causal mask)."""

from __future__ import annotations

import pytest

from attnlab.yourturn import allowlist, exercises, grade

# the lab's causal solution, written the way a learner would: a bool mask made with ones/tril, checked with any/all
CAUSAL_WITH_BOOL = '''def causal_weights(q, k):
    T, S = q.shape[1], k.shape[1]
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    mask = jnp.tril(jnp.ones((T, S), dtype=bool))
    sees = mask.any(axis=-1) & jnp.any(mask, axis=-1) & jnp.all(mask.sum(axis=-1) > 0)
    mask = mask & sees[:, None] & (mask.all() | True)
    scores = jnp.where(mask, scores, -jnp.inf)
    return jax.nn.softmax(scores.astype(float), axis=-1)
'''


def test_bool_any_all_and_comparisons_are_accepted_and_right():
    assert allowlist.refusal(CAUSAL_WITH_BOOL, "causal_weights") is None
    v = grade.check("causal", CAUSAL_WITH_BOOL)
    assert v.passed, (v.status, v.message, v.hints)


@pytest.mark.parametrize(("code", "instead"), [
    ("x = sum(q)\nreturn q", "jnp.sum(x) or x.sum()"),
    ("x = any(q)\nreturn q", "jnp.any(x) or x.any()"),
    ("return q.tolist()", "jnp offers the rest"),
    ("return jnp.save(q)", "use array arithmetic"),
    ("return jnp.sinh(q)", "jnp offers here"),
])
def test_a_refusal_says_it_is_the_labs_rule_and_what_to_use_instead(code, instead):
    source = "def attention(q, k, v):\n" + "".join(f"    {line}\n" for line in code.splitlines())
    why = allowlist.refusal(source, "attention")
    assert why and "lab's rule" in why and instead in why, why


def test_a_python_builtin_the_lab_does_not_offer_is_its_rule_not_the_learners_bug():
    v = grade.check("attention", "def attention(q, k, v):\n    x = str\n    return q\n")
    assert v.status == "stopped" and "lab's rule" in v.message and "not defined" not in v.message, v.message


DPA = '''def decode(q, k_cache, v_cache):
    return jax.nn.dot_product_attention(q, k_cache, v_cache)
'''


def test_dot_product_attention_is_accepted_in_decode_its_prompt_says_so_and_from_scratch_says_why_not():
    assert "dot_product_attention" in exercises.DECODE.task
    v = grade.check("decode", DPA)
    assert v.passed, (v.status, v.message, v.hints)
    why = allowlist.refusal(DPA.replace("decode", "attention").replace("k_cache", "k").replace("v_cache", "v"),
                            "attention")
    assert why and "lab's rule" in why and "jnp.einsum" in why


def test_a_decode_step_with_a_top_left_causal_mask_is_named():
    v = grade.check("decode", DPA.replace("k_cache, v_cache)\n", "k_cache, v_cache, is_causal=True)\n"))
    assert v.status == "wrong" and "causal mask from the top left" in v.mistakes, (v.status, v.mistakes, v.message)
    assert exercises.DECODE_CAUSAL.sentence in v.hints


REPEAT = '''def attention(q, k, v):
    G = q.shape[2] // k.shape[2]
    kk = jnp.repeat(k, G, axis=2)
    vv = jnp.repeat(v, G, axis=2)
    s = jnp.einsum("btnh,bsnh->bnts", q, kk) / jnp.sqrt(q.shape[-1])
    return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(s, axis=-1), vv)
'''


@pytest.mark.parametrize("copy", ["jnp.repeat(k, G, axis=2)",
                                  "jnp.broadcast_to(k[:, :, :, None], k.shape[:3] + (G, k.shape[3])).reshape("
                                  "k.shape[0], k.shape[1], -1, k.shape[3])",
                                  "k[:, :, jnp.arange(q.shape[2]) // G]"])
def test_copying_k_and_v_in_gqa_is_a_named_mistake_though_the_numbers_are_right(copy):
    v = grade.check("gqa", REPEAT.replace("jnp.repeat(k, G, axis=2)", copy))
    assert all(c.passed for c in v.cases) and not v.passed, (v.status, v.cases)
    assert v.mistakes == ("K/V copied",) and exercises.KV_COPIED.sentence in v.hints


def test_the_gqa_solution_is_not_taken_for_a_copy():
    assert grade.check("gqa", exercises.GQA.solution).passed


O_NOT_RESCALED_UNGUARDED = '''def update(m, l, o, s, v):
    m_new = jnp.maximum(m, s.max(axis=-1))
    p = jnp.exp(s - m_new[:, None])
    l_new = jnp.exp(m - m_new) * l + p.sum(axis=-1)
    return m_new, l_new, o + p @ v
'''


def test_o_not_rescaled_as_a_learner_writes_it_is_named_and_its_nan_case_explained():
    v = grade.check("online_softmax", O_NOT_RESCALED_UNGUARDED)
    assert v.status == "wrong" and "o not rescaled" in v.mistakes, (v.mistakes, v.hints)
    assert "NaN before the first key" in v.mistakes
    for c in v.cases:
        if c.max_abs_error is None:  # shown as "—" on the page: the note says why
            assert "NaN" in c.note, c
