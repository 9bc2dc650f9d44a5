"""Text validation shared by every loader: Unicode NFC, no control or invisible characters."""

from __future__ import annotations

import re
import unicodedata

# Format (Cf) characters that render as nothing: zero-width spaces and joiners, bidi controls,
# soft hyphen, word joiner, BOM. They hide text from readers and split tokens, so they go.
_INVISIBLE = re.compile(
    "[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]"
)
# C0/C1 controls except tab and newline; carriage returns are normalised before this runs.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Unicode line and paragraph separators, vertical tab and form feed act as newlines.
_NEWLINES = re.compile("\r\n?|[\u2028\u2029\x0b\x0c\x85]")
_TRAILING_SPACE = re.compile(r"[ \t]+\n")
_BLANK_RUNS = re.compile(r"\n{3,}")


def clean_text(raw: str, *, keep_indent: bool = False) -> str:
    """Return ``raw`` as validated text: NFC, newlines normalised, controls and invisibles removed.

    ``keep_indent`` keeps the leading spaces of the first line (code blocks).
    """
    text = unicodedata.normalize("NFC", raw)
    text = _NEWLINES.sub("\n", text)
    text = _INVISIBLE.sub("", text)
    text = _CONTROL.sub("", text)
    text = text.replace("\u00a0", " ")
    text = _TRAILING_SPACE.sub("\n", text)
    text = _BLANK_RUNS.sub("\n\n", text)
    return text.strip("\n").rstrip() if keep_indent else text.strip()


def collapse_whitespace(raw: str) -> str:
    """Clean ``raw`` and fold all whitespace runs to single spaces (headings, HTML inline text)."""
    return " ".join(clean_text(raw).split())


# A line break inside a sentence: after a character that does not end one, before a line that
# goes on with a lower-case letter, a digit, a bracket or a quote (hard-wrapped text, PDF lines).
_LINE_BREAK = re.compile(r"(?<=[^\s.!?:;])\n(?=[ \t]*(\S))")


def continues_sentence(line: str) -> bool:
    """``line`` (after a break) goes on with a sentence rather than starting one."""
    first = line.lstrip()[:1]
    return bool(first) and (first.islower() or first.isdigit() or first in "([\"'«")


def unwrap_soft_breaks(text: str) -> str:
    """Line breaks inside a sentence as spaces; the same length, so offsets are unchanged."""
    return _LINE_BREAK.sub(lambda m: " " if continues_sentence(m.group(1)) else "\n", text)
