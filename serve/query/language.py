"""The language of a question, so that an abstention can answer in it (py3langid)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

SUPPORTED = ("en", "fr", "ru", "de", "es", "it", "nl", "pt")
DEFAULT = "en"
MIN_CONFIDENCE = 0.5  # short keyword queries ("E-310") are guesses: fall back to English


@functools.cache
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(list(SUPPORTED))
    return identifier


def detect_language(text: str) -> str:
    """ISO 639-1 code of ``text`` among SUPPORTED, or DEFAULT when unsure."""
    if not text.strip():
        return DEFAULT
    language, confidence = _identifier().classify(text)
    return language if confidence >= MIN_CONFIDENCE else DEFAULT


def either(words: Iterable[str]) -> str:
    """A regex alternation of ``words`` (literal, longest first, any whitespace inside), for
    the per-language word tables of serve/query/amounts.py, compound.py and quotes.py."""
    ordered = sorted(set(words), key=lambda word: (-len(word), word))
    return "|".join(re.escape(word).replace(r"\ ", r"\s+") for word in ordered)
