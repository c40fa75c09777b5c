"""Escaping for the one-line notes quiesce writes into prompts.

What it keeps true: a field (an id, a reason, an actor) put into a note by
:func:`escape_field` is one line with no unescaped bracket, so no text a user
or a model wrote can end a note early or start a forged one. The escaping is
reversible and O(len(text)).
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\\\[\]\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SIMPLE = {"\\": "\\\\", "[": "\\[", "]": "\\]", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(m: re.Match[str]) -> str:
    c = m.group()
    simple = _SIMPLE.get(c)
    if simple is not None:
        return simple
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def escape_field(text: str) -> str:
    """A reason, actor or id as it appears inside a note: one line, no brackets."""
    return _CONTROL.sub(_escape_char, text)
