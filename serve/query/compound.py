"""Questions that ask two things: "Quel est le numéro du contrat et sa durée ?", "Who invented
PCR, and in what year?".

Each thing may be stated in a different passage (a contract's number under "Article 1", its
term under "Article 3"). Two parts of the pipeline read such a question by its parts:

- the relevance judge scores a passage against the whole question and against each part, and
  keeps the best score, so that a passage answering only one part is not gated out because
  the question also asks something else (serve/query/rerank.py ``rerank``);
- a quoted answer may quote a second sentence, from another source, for the other part
  (serve/query/quotes.py ``also``).

A question is split at a coordinating conjunction that starts a second question: "and"/"et"
followed by a question word ("and when", "et en quelle année") or a possessive ("et sa durée",
"and its capital"), after a first part that says more than a question word ("En quelle année
et dans quelle ville ...", "When and where ..." ask about one subject and are not split). The
words per language are in ``SPLITS``, a table a test enumerates; a language without an entry is
never split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from serve.query.language import detect_language


@dataclass(frozen=True, slots=True)
class Split:
    """How one language joins two questions: the conjunction, and what may open the second."""

    conjunction: str
    question_words: tuple[str, ...]
    possessives: tuple[str, ...]


# fmt: off
SPLITS = {
    "en": Split(
        "and",
        ("what", "which", "who", "whom", "whose", "when", "where", "why", "how",
         "in what", "in which", "at what", "on what", "from what", "for what", "by whom",
         "since when", "until when"),
        ("its", "his", "her", "their"),
    ),
    "fr": Split(
        "et",
        ("qui", "que", "qu'", "quel", "quelle", "quels", "quelles", "quand", "où", "comment",
         "combien", "pourquoi", "en quel", "en quelle", "dans quel", "dans quelle", "à quel",
         "à quelle", "de quel", "de quelle", "depuis quand", "depuis combien", "par qui",
         "pour qui", "avec qui", "jusqu'à quand"),
        ("sa", "son", "ses", "leur", "leurs"),
    ),
}
# fmt: on
# The first part must name something beyond its question word: "Who invented PCR" (2 words
# after "who"), not "En quelle année" (1).
MIN_SUBJECT_WORDS = 2
# Attached to the question in a quoted prompt when it has two parts (serve/query/quotes.py).
ALSO_NOTE = (
    'This question asks for two things: "quote" is the sentence that states the first, and '
    '"also" gives the number of the source and the sentence that states the second (the same '
    "sentence again if it states both)."
)


def _pattern(split: Split) -> re.Pattern[str]:
    openers = sorted((*split.question_words, *split.possessives), key=len, reverse=True)
    alternatives = "|".join(re.escape(word).replace(r"\ ", r"\s+") for word in openers)
    # "qu'" ends on an apostrophe: no word boundary after it.
    return re.compile(
        rf",?\s+{split.conjunction}\s+(?=(?:{alternatives})(?:\b|(?<=')))", re.IGNORECASE
    )


_PATTERNS = {language: _pattern(split) for language, split in SPLITS.items()}
_LEADING = {
    language: re.compile(
        r"^\W*(?:(?:"
        + "|".join(
            re.escape(w).replace(r"\ ", r"\s+")
            for w in sorted(split.question_words, key=len, reverse=True)
        )
        + r")\b)?",
        re.IGNORECASE,
    )
    for language, split in SPLITS.items()
}


def question_parts(question: str, language: str | None = None) -> tuple[str, ...]:
    """The two questions a compound question asks (the first ending in a question mark, the
    second as written), or () when it asks one thing. ``language``: the question's, else
    detected."""
    language = language or detect_language(question)
    pattern = _PATTERNS.get(language)
    if pattern is None:
        return ()
    for match in pattern.finditer(question):  # "When and where ..., and who ...": the second
        first = question[: match.start()].strip().rstrip(",;: ")
        second = question[match.end() :].strip()
        subject = _LEADING[language].sub("", first)
        if len(subject.split()) >= MIN_SUBJECT_WORDS and second.rstrip(" ?"):
            return (first + (" ?" if language == "fr" else "?"), second)
    return ()
