"""The shared sidebar: the shape lives in the URL, bad values are messages, Reset always works."""

from streamlit.testing.v1 import AppTest

from tests.apptest_util import APP


def _app(params: dict[str, str]) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def test_a_shape_in_the_url_fills_the_sidebar():
    at = _app({"q_len": "48", "kv_len": "80", "heads": "4", "kv_heads": "2", "dtype": "bfloat16", "causal": "true"})
    assert not at.exception
    ss = at.session_state
    assert (ss["shape_q_len"], ss["shape_kv_len"], ss["shape_heads"], ss["shape_kv_heads"]) == (48, 80, 4, 2)
    assert ss["shape_dtype"] == "bfloat16" and ss["shape_causal"] is True
    assert ss["shape"].describe() == "B4 T48 S80 N4 K2 H64 bfloat16 causal"


def test_changing_a_widget_writes_the_shape_into_the_url():
    at = _app({})
    at.number_input(key="shape_q_len").set_value(256).run()
    assert not at.exception
    assert at.query_params["q_len"] == ["256"] or at.query_params["q_len"] == "256"
    assert at.session_state["shape"].q_len == 256


def test_a_widget_value_that_fails_validation_is_a_message_and_no_shape():
    at = _app({})
    at.number_input(key="shape_kv_heads").set_value(3).run()
    assert not at.exception
    assert any("must be a multiple of kv_heads (3)" in e.value for e in at.error)
    assert at.session_state["shape"] is None


def test_reset_recovers_from_a_hostile_url():
    at = _app({"batch": "__import__('os')", "dtype": "<script>alert(1)</script>"})
    assert not at.exception and len(at.error) == 2 and at.session_state["shape"] is None
    at.button(key="shape_reset").click().run()
    assert not at.exception and not at.error
    assert at.session_state["shape"].describe() == "B4 T128 S128 N8 K8 H64 float32"


def test_a_bad_link_lists_every_bad_value_says_what_it_said_and_what_the_sidebar_shows():
    at = _app({"batch": "-3", "q_len": "abc", "head_dim": "0", "heads": "16", "kv_heads": "4"})
    assert not at.exception and at.session_state["shape"] is None
    errors = [e.value for e in at.error]
    assert len(errors) == 3, errors  # head_dim=0 beside the two that do not parse (it was left out before)
    assert any("head_dim must be a positive whole number (got 0)" in e for e in errors)
    said = " ".join(m.value for m in at.markdown)
    assert "`batch=-3`" in said and "`q_len=abc`" in said and "`head_dim=0`" in said
    ss = at.session_state  # the link's good values stay, the codelab's defaults stand in for the bad ones
    assert (ss["shape_batch"], ss["shape_q_len"], ss["shape_heads"], ss["shape_kv_heads"], ss["shape_head_dim"]) == (
        4, 128, 16, 4, 64)
    assert any("B4 T128 S128 N16 K4 H64 float32" in i.value for i in at.info)
    at.button(key="shape_use_shown").click().run()
    assert not at.exception and not at.error
    assert at.session_state["shape"].describe() == "B4 T128 S128 N16 K4 H64 float32"


def test_head_dim_0_typed_in_the_sidebar_says_why_in_words_not_only_a_red_box():
    """The box used to refuse 0 in the browser (min 1: a red "!" and the old value kept, the page silently at H64):
    now the lab's parser sees it and says why, and nothing is computed at a shape the learner did not ask for."""
    at = _app({})
    box = at.number_input(key="shape_head_dim")
    assert box.proto.has_min is False or box.proto.min <= 0, "the browser would refuse 0 before the lab sees it"
    box.set_value(0).run()
    assert not at.exception
    said = " ".join(e.value for e in at.error)
    assert "head_dim must be a positive whole number (got 0)" in said
    assert at.session_state["shape"] is None


def test_a_number_box_that_comes_back_empty_keeps_the_shape():
    """A page change that interrupts a run can make Streamlit reset a sidebar widget; a learner can clear a box.
    Either way the box comes back empty (never a number nobody typed: a reset to 0 once read as 'batch 0' after a
    shared link, tests/test_browser.py's page-switch race), and the shape keeps its last value."""
    at = _app({"q_len": "48", "kv_len": "48"})
    box = at.number_input(key="shape_batch")
    assert not box.proto.HasField("default"), "a reset box would show a number"
    box.set_value(None).run()
    assert not at.exception and not at.error
    assert at.session_state["shape"].describe() == "B4 T48 S48 N8 K8 H64 float32"
    assert at.number_input(key="shape_batch").value == 4
    at.number_input(key="shape_q_len").set_value(64).run()  # and the next change keeps it too
    assert not at.error and at.session_state["shape"].describe() == "B4 T64 S48 N8 K8 H64 float32"
