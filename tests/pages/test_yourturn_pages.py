"""The "Your turn" sections on pages 4, 5b, 6 and 8, and the instructor's page, as a learner uses them (AppTest)."""

import pytest

from attnlab import settings
from attnlab.yourturn import exercises, progress, share
from tests.apptest_util import SMALL, button, codes, frames, open_page, texts
from tests.yourturn_cases import MISTAKES

P4, P6, P8, P10 = "pages/p4_naive_vs_fused.py", "pages/p6_causal.py", "pages/p8_mha_gqa_mqa.py", "pages/p5b_fused_kernel.py"


def write_and_check(at, name: str, code: str):
    at.text_area(key=f"yt_{name}_code").set_value(code)
    button(at, f"yt_{name}_check").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.parametrize(("page", "name", "tab"), [(P4, "attention", None), (P4, "gqa", None), (P6, "causal", None),
                                                 (P6, "window", None), (P8, "decode", None),
                                                 (P10, "online_softmax", ("p10_tab", "Step through"))])
def test_each_exercise_starts_from_its_skeleton_and_a_right_answer_passes(page, name, tab):
    at = open_page(page, tab=tab)
    assert at.text_area(key=f"yt_{name}_code").value == exercises.get(name).skeleton
    write_and_check(at, name, exercises.get(name).solution)
    assert any("Right at every case" in s.value for s in at.success), texts(at)[:3000]
    assert frames(at, "right")  # the cases, one row each


def test_a_wrong_answer_gets_the_mistake_named_and_a_hint_never_the_solution():
    at = write_and_check(open_page(P4), "attention", MISTAKES[("attention", "softmax over queries")])
    said = texts(at)
    assert "Not yet" in said and "softmax runs over the queries" in said
    assert exercises.ATTENTION.solution not in "\n".join(codes(at))  # not shown until asked
    at.toggle(key="yt_attention_solution").set_value(True).run()  # one click away after a try
    assert any("jax.nn.softmax(scores.astype(jnp.float32), axis=-1)" in c for c in codes(at))


def test_hostile_code_is_refused_on_the_page_with_a_sentence():
    at = write_and_check(open_page(P4), "attention", "import os\ndef attention(q, k, v):\n    return q\n")
    assert any("does not run this code" in e.value and "function definitions" in e.value for e in at.error)


def test_a_shared_link_opens_the_code_and_runs_it_only_when_checked():
    code = MISTAKES[("decode", "no scale")]
    progress.reset()
    at = open_page(P8, {"ex": "decode", "code": share.encode(code)})
    assert at.text_area(key="yt_decode_code").value == code
    assert "press Check to run it" in texts(at) and progress.snapshot() == {}
    button(at, "yt_decode_check").click().run()
    assert "not divided by √d" in texts(at) and progress.snapshot()["decode"]["attempts"] == 1
    progress.reset()


def test_a_link_whose_code_fails_the_allowlist_says_so_and_never_runs():
    at = open_page(P4, {"ex": "attention", "code": share.encode("def attention(q, k, v):\n    return eval('q')\n")})
    assert "would not run here" in texts(at) and "eval" in texts(at)
    at = open_page(P4, {"ex": "attention", "code": "%%%not-a-link"})
    assert any("not shown" in e.value for e in at.error)
    assert at.text_area(key="yt_attention_code").value == exercises.ATTENTION.skeleton


def test_the_mask_exercise_draws_the_learners_weights_beside_the_labs():
    at = write_and_check(open_page(P6), "causal", MISTAKES[("causal", "filled with 0")])
    titles = [c.proto.spec for c in at.get("vega_lite_chart")]
    assert any("your weights" in t for t in titles) and any("the lab's weights" in t for t in titles)
    assert "Masked scores are set to 0 instead of −∞" in texts(at)


def test_a_passing_function_is_timed_at_the_learners_shape_beside_naive():
    at = write_and_check(open_page(P4, SMALL), "gqa", exercises.GQA.solution)
    button(at, "btn_yt_gqa_time").click().run()
    assert not at.exception
    table = next(f for f in frames(at, "implementation") if "yours" in set(f["implementation"]))
    assert {"yours", "naive"} <= set(table["implementation"])
    # the tab by the name it has on page 7 (was "page 7, Long context")
    assert "page 7's *Long context on an H200* tab" in texts(at, "caption")


def test_the_instructor_page_is_listed_only_with_the_token_and_shows_counts():
    with pytest.raises(ValueError, match="Could not find a navigation page"):  # no token set: no such page
        open_page("pages/p12_instructor.py", {"instructor": ""})
    with settings.override(instructor_token="s3cret"):
        progress.reset()
        progress.record("attention", False, ("no scale",))
        at = open_page("pages/p12_instructor.py", {"instructor": "s3cret"})
        said = " ".join(f.to_string() for f in frames(at))
        assert "attention from scratch" in said and "no scale (1)" in said
        assert "4 · Naive vs fused" in said and "5b · Inside the fused kernel" in said and ".py" not in said  # titles
        assert "waiting to compile" in said and "compiling" in said  # the GPU queue: runs and tuned compiles apart
        assert "instructor" not in at.query_params  # not left in the address bar
        with pytest.raises(ValueError, match="Could not find a navigation page"):  # no such page for a guess
            open_page("pages/p12_instructor.py", {"instructor": "guess"})
    progress.reset()


def test_a_link_whose_code_has_range_step_zero_is_refused_with_a_sentence_and_the_exercise_still_drawn():
    code = "def attention(q, k, v):\n    for i in range(0, 8, 0):\n        q = q + 1\n    return q\n"
    at = open_page(P4, {"ex": "attention", "code": share.encode(code)})  # a traceback with the server's paths before
    assert not at.exception, [e.value for e in at.exception]
    assert "would not run here" in texts(at) and "step must not be 0" in texts(at)
    assert at.text_area(key="yt_attention_code").value == code and at.text_area(key="yt_gqa_code")


def test_checking_the_same_code_again_counts_once_in_the_class():
    progress.reset()
    at = open_page(P4)
    for _ in range(3):
        write_and_check(at, "attention", MISTAKES[("attention", "no scale")])
    assert progress.snapshot()["attention"]["attempts"] == 1 and progress.snapshot()["attention"]["learners"] == 1
    write_and_check(at, "attention", MISTAKES[("attention", "scale 1/d")])
    assert progress.snapshot()["attention"]["attempts"] == 2
    progress.reset()


def _update_box(at):
    return next(e for e in at.expander if "update of one tile (Algorithm 1" in e.label)


def test_the_labs_own_update_stays_collapsed_above_its_exercise_until_a_first_check():
    at = open_page(P10, tab=("p10_tab", "Step through"))
    box = _update_box(at)
    assert not box.proto.expanded and "opens after your first Check" in box.label
    write_and_check(at, "online_softmax", MISTAKES[("online_softmax", "o not rescaled")])
    box = _update_box(at)
    assert box.proto.expanded and "opens after" not in box.label


def test_a_gqa_answer_that_copies_k_and_v_is_not_right_and_says_why_on_the_page():
    copy = '''def attention(q, k, v):
    G = q.shape[2] // k.shape[2]
    s = jnp.einsum("btnh,bsnh->bnts", q, jnp.repeat(k, G, axis=2)) / jnp.sqrt(q.shape[-1])
    return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(s, axis=-1), jnp.repeat(v, G, axis=2))
'''
    at = write_and_check(open_page(P4), "gqa", copy)
    assert not any("Right at every case" in s.value for s in at.success)
    said = texts(at)
    assert "not the way the task asks" in said and exercises.KV_COPIED.sentence in said


def test_check_is_limited_per_session_with_a_sentence_and_the_other_sessions_go_on():
    progress.reset()
    wrong = [MISTAKES[("attention", m)] for m in ("no scale", "scale 1/d", "softmax over queries")]
    with settings.override(checks_per_minute=2):
        at = open_page(P4)
        for code in wrong:  # three different answers: each would be a new request to the worker
            write_and_check(at, "attention", code)
        said = texts(at)
        assert "pressed Check 2 times in the last 60 s" in said and "Wait" in said, said[:2000]
        assert progress.snapshot()["attention"]["attempts"] == 2  # the third was never sent
        other = write_and_check(open_page(P4), "attention", exercises.ATTENTION.solution)  # another session
        assert any("Right at every case" in s.value for s in other.success)
    progress.reset()


def test_a_second_check_clears_the_first_verdict_before_its_work_starts(monkeypatch):
    """While the device checks a new answer, the previous verdict ("Not yet … wrong K/V heads") is not left on the
    screen as if it were this answer's (issue 42: it stayed readable for 2.6 s beside the spinner)."""
    from pages import common
    from tests.apptest_util import Screen
    from tests.yourturn_cases import MISTAKES

    at = open_page(P4)
    screen = Screen(monkeypatch)
    write_and_check(at, "gqa", MISTAKES[("gqa", "K/V heads mapped wrongly")])
    screen.settle()
    assert "Not yet" in screen.text() and "wrong K/V heads" in screen.text()
    during, real = [], common._on_device
    monkeypatch.setattr(common, "_on_device", lambda fn, args, kwargs: (
        during.append(screen.text()) if fn.endswith("grade:check") else None) or real(fn, args, kwargs))
    write_and_check(at, "gqa", exercises.GQA.solution)
    assert during and all("Not yet" not in seen and "wrong K/V heads" not in seen for seen in during), during
    assert any("Right at every case" in s.value for s in at.success)


def test_the_instructor_page_lists_the_class_shapes_as_links_and_names_a_bad_one():
    with settings.override(instructor_token="s3cret", class_shapes=("?", "heads=8&kv_heads=2&causal=true", "kvheads=2")):
        at = open_page("pages/p12_instructor.py", {"instructor": "s3cret"})
        links = [m.value for m in at.markdown if "](" in m.value and "`" in m.value]
        assert links == ["[B4 T128 S128 N8 K8 H64 float32](/): `/`",
                         "[B4 T128 S128 N8 K2 H64 float32 causal](?kv_heads=2&causal=true): `?kv_heads=2&causal=true`"], links
        assert "kvheads: not a setting of the shape" in " ".join(w.value for w in at.warning)
    with settings.override(instructor_token="s3cret"):
        at = open_page("pages/p12_instructor.py", {"instructor": "s3cret"})
        assert "None named. Set ATTNLAB_CLASS_SHAPES" in " ".join(c.value for c in at.caption)
