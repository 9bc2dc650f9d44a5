"""Questions that ask two things: "Quel est le numéro du contrat et sa durée ?", "Who invented
PCR, and in what year?".

Each thing may be stated in a different passage (a contract's number under "Article 1", its
term under "Article 3"). Two parts of the pipeline read such a question by its parts:

- the relevance judge scores a passage against the whole question and against its first part,
  and keeps the better score, so that a passage answering only the first part is not gated
  out because the question also asks something else (serve/query/rerank.py ``rerank``; the
  second part alone, "sa durée ?", is too short for the judge, and the whole question already
  holds it);
- where the first part's best passage is not the whole question's (``answered_apart``), a
  quoted answer quotes a sentence for each part, from the same or another source
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
from collections.abc import Sequence
from dataclasses import dataclass

from index.types import SearchHit
from serve.query.language import detect_language, either


@dataclass(frozen=True, slots=True)
class Split:
    """How one language joins two questions: the conjunction, and what may open the second;
    and the note a quoted prompt adds after such a question, in its language (an English note
    after a French question made the model answer in English)."""

    conjunction: str
    question_words: tuple[str, ...]
    possessives: tuple[str, ...]
    note: str


# fmt: off
SPLITS = {
    "en": Split(
        "and",
        ("what", "which", "who", "whom", "whose", "when", "where", "why", "how",
         "in what", "in which", "at what", "on what", "from what", "for what", "by whom",
         "since when", "until when"),
        ("its", "his", "her", "their"),
        'This question asks for two things: "quote" is the sentence that states the first, and '
        '"also" gives the number of the source and the sentence that states the second (the '
        "same sentence again if it states both).",
    ),
    "fr": Split(
        "et",
        ("qui", "que", "qu'", "quel", "quelle", "quels", "quelles", "quand", "où", "comment",
         "combien", "pourquoi", "en quel", "en quelle", "dans quel", "dans quelle", "à quel",
         "à quelle", "de quel", "de quelle", "depuis quand", "depuis combien", "par qui",
         "pour qui", "avec qui", "jusqu'à quand"),
        ("sa", "son", "ses", "leur", "leurs"),
        'Cette question demande deux choses : "quote" est la phrase qui énonce la première, et '
        '"also" donne le numéro de la source et la phrase qui énonce la seconde (la même phrase '
        "si elle énonce les deux).",
    ),
}
# fmt: on
# The first part must name something beyond its question word: "Who invented PCR" (2 words
# after "who"), not "En quelle année" (1).
MIN_SUBJECT_WORDS = 2


# The conjunction before a second question ("qu'" ends on an apostrophe: no word boundary
# after it), and the question word that opens a first part.
_SECOND = {
    language: re.compile(
        rf",?\s+{s.conjunction}\s+(?=(?:{either((*s.question_words, *s.possessives))})"
        r"(?:\b|(?<=')))",
        re.IGNORECASE,
    )
    for language, s in SPLITS.items()
}
_LEADING = {
    language: re.compile(rf"^\W*(?:(?:{either(s.question_words)})\b)?", re.IGNORECASE)
    for language, s in SPLITS.items()
}


def question_parts(question: str, language: str | None = None) -> tuple[str, ...]:
    """The two questions a compound question asks (the first ending in a question mark, the
    second as written), or () when it asks one thing. ``language``: the question's, else
    detected."""
    language = language or detect_language(question)
    pattern = _SECOND.get(language)
    if pattern is None:
        return ()
    for match in pattern.finditer(question):  # "When and where ..., and who ...": the second
        first = question[: match.start()].strip().rstrip(",;: ")
        second = question[match.end() :].strip()
        subject = _LEADING[language].sub("", first)
        if len(subject.split()) >= MIN_SUBJECT_WORDS and second.rstrip(" ?"):
            return (first + (" ?" if language == "fr" else "?"), second)
    return ()


def two_part_note(question: str) -> str:
    """What a quoted prompt says after ``question`` when it asks two things (its language's
    ``Split.note``), else ""."""
    language = detect_language(question)
    return SPLITS[language].note if question_parts(question, language) else ""


def answered_apart(hits: Sequence[SearchHit]) -> bool:
    """The judge found the first part of a compound question best answered by another passage
    than the whole question (``SearchHit.part_scores``): the answer needs a sentence of each.
    Where one passage is best for both ("Who invented the Rubik's Cube, and when?", one
    article), one quote serves, and the reply keeps its one-quote form."""
    scored = [hit for hit in hits if len(hit.part_scores) == 2]
    if len(scored) < 2:
        return False
    whole = max(scored, key=lambda hit: hit.part_scores[0])
    first = max(scored, key=lambda hit: hit.part_scores[1])
    return whole.chunk_id != first.chunk_id
