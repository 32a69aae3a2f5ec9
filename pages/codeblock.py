"""Code on a page, highlighted on the server (Pygments) and sent as HTML.

Why not st.code: it draws every block with a 1.5 MB syntax highlighter that each new browser tab
loads and evaluates before the block appears, about 0.3-0.5 s of a page's load on a two-core
machine (scripts/page_speed.py; Chromium's profiler put 470-720 ms of pages 3-9's loads in it).
Pygments does the same colouring once per block on the server, where the text is cached, in
well under a millisecond for the lab's snippets.
"""

from __future__ import annotations

import functools
import html
import re

import streamlit as st
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer, TextLexer

BOX = ("background-color: #f0f2f6; border-radius: 0.5rem; padding: 0.9rem 1rem; margin: 0 0 1rem 0; "
       "font-family: 'Source Code Pro', monospace; font-size: 0.875rem; line-height: 1.6; color: #31333f; "
       "overflow-x: auto; white-space: {space}")
LEXERS = {"python": PythonLexer, "text": TextLexer}


@functools.lru_cache(maxsize=256)
def to_html(source: str, language: str = "python", wrap: bool = False) -> str:
    """`source` as a <pre> whose tokens carry their colours inline (no stylesheet needed)."""
    lexer = LEXERS.get(language, TextLexer)(stripnl=False, ensurenl=False)
    formatter = HtmlFormatter(noclasses=True, nobackground=True, style="friendly", nowrap=True)
    body = highlight(source.rstrip("\n"), lexer, formatter)
    space = "pre-wrap; overflow-wrap: anywhere" if wrap else "pre"
    return f'<pre class="attnlab-code" style="{BOX.format(space=space)}"><code>{body}</code></pre>'


def code(source: str, language: str = "python", *, wrap: bool = False, where=st) -> None:
    """Like `where.code(source, language=...)`: a highlighted block (`wrap`: long lines wrap)."""
    where.html(to_html(source, language, wrap))


def text_of(markup: str) -> str:
    """The plain source back from a block's HTML (for tests and anyone reading the page's elements)."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup))
