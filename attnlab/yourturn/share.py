"""A learner's code as a link: compressed into one query parameter, and back, bounded both ways.

    share.encode(code) -> "eJxL..."      share.decode(text) -> (code, None) or (None, why not)

A decoded link is only text: it goes through the allowlist like typed code, and a page never runs it
before the learner (or the instructor) presses Check.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib

from attnlab.yourturn.allowlist import MAX_SOURCE_CHARS

MAX_LINK_CHARS = 12_000
_B64 = re.compile(r"^[A-Za-z0-9_-]*$")


def encode(code: str) -> str:
    return base64.urlsafe_b64encode(zlib.compress(code.encode(), 9)).decode().rstrip("=")


def decode(text: str) -> tuple[str | None, str | None]:
    """(the code, None), or (None, a sentence) when the link's text is not code the lab can read."""
    if not text or len(text) > MAX_LINK_CHARS or not _B64.match(text):
        return None, f"the link's code is not what the lab writes (at most {MAX_LINK_CHARS:,} letters of base64)"
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        d = zlib.decompressobj()
        data = d.decompress(raw, MAX_SOURCE_CHARS * 4 + 1)
        if d.unconsumed_tail or len(data) > MAX_SOURCE_CHARS * 4:
            return None, f"the link's code is longer than the {MAX_SOURCE_CHARS:,} characters the lab reads"
        code = data.decode("utf-8")
    except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError):
        return None, "the link's code is damaged (it does not decompress to text)"
    if len(code) > MAX_SOURCE_CHARS:
        return None, f"the link's code is longer than the {MAX_SOURCE_CHARS:,} characters the lab reads"
    return code, None
