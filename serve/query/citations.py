"""Citations are checked, not trusted (DESIGN.md decision 8).

The model cites sources as [n] (or [n, m]). A number that was not one of the prompt's sources is
removed from the answer and counted; the answer lists each source actually cited, with the
sentences that cite it and a cheap support score: the share of a sentence's words that appear in
the cited chunk (a lexical proxy for faithfulness, not a proof of it).

Small models often restate a source faithfully but forget the [n]. A sentence without a valid
citation is attributed to the source that supports it best when that support is strong (at least
INFERRED_MIN_SUPPORT of at least INFERRED_MIN_WORDS words); such citations are marked
``inferred`` and the answer text is left as the model wrote it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from index.text import unwrap_soft_breaks
from serve.query.gate import is_not_found
from serve.query.prompt import Source

_CITATION = re.compile(r"\s?\[(\d+(?:\s*,\s*\d+)*)\]")
_SENTENCE_END = re.compile(r"(?<=[.!?…。])\s+|\n+")
# A piece that is only an enumerator ("1.", "b.", "iv."): the start of the sentence after it.
_ENUMERATOR = re.compile(r"(?:\d{1,3}|[a-zA-Z]|[ivxlcIVXLC]{1,5})\.")
_LEADING_CITATIONS = re.compile(r"^(?:\[\d+(?:\s*,\s*\d+)*\]\s*)+")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class Statement:
    """One sentence of the answer, the sources it cites, and how well they support it."""

    text: str  # without its citation markers
    numbers: tuple[int, ...]
    support: float  # share of the sentence's words found in its cited chunks; 0.0 without any
    inferred: bool = False  # the citation was attributed by support, not written by the model
    span: tuple[int, int] = (0, 0)  # where the sentence (markers included) is in the answer


@dataclass(frozen=True, slots=True)
class Citation:
    source: Source
    sentences: tuple[str, ...]  # the answer's sentences that cite this source
    support: float  # mean support of those sentences by this source's chunk alone
    inferred: bool = False  # no sentence cites it explicitly; attributed by support
    quote: str | None = None  # quoted answers (serve/query/quotes.py): the model's quote
    verified: bool | None = None  # the quote was found in the chunk; None without a quote


@dataclass(frozen=True, slots=True)
class CheckedAnswer:
    text: str
    cited: tuple[Citation, ...]  # in order of first citation
    statements: tuple[Statement, ...]
    invalid_removed: int
    written: int = 0  # citation numbers the model wrote, valid or not
    abstained: bool = False  # the model found no answer in the sources


SUPPORTED = 0.5  # a statement is "supported" when half its words are in its cited chunks
INFERRED_MIN_SUPPORT = 0.6
INFERRED_MIN_WORDS = 3


def supported_share(statements: Sequence[Statement]) -> float:
    """Faithfulness proxy: share of the answer's statements (those with any content word) that
    are supported by the chunks the model itself cited for them. An uncited statement is
    unsupported, and so is one whose citation was only inferred: inference picks the chunk by
    this same overlap, so counting it would make the proxy unable to fail. 1.0 for an answer
    without statements."""
    counted = [s for s in statements if content_words(s.text)]
    supported = sum(s.support >= SUPPORTED and not s.inferred for s in counted)
    return supported / len(counted) if counted else 1.0


def content_words(text: str) -> set[str]:
    """Content-bearing words: numbers, and words of three or more letters, case-folded."""
    return {w for w in _WORD.findall(text.casefold()) if len(w) > 2 or w.isdigit()}


def support(sentence: str, evidence: str) -> float:
    words = content_words(sentence)
    return len(words & content_words(evidence)) / len(words) if words else 0.0


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence in ``text``, with citation markers that open a piece
    moved back to the sentence before ("Leave is 27 days. [1] Sick..." cites [1] for the first
    sentence). A line wrapped inside a sentence does not end it, and a list item's number
    ("1. Put the coffee...") belongs to its sentence."""
    spans: list[tuple[int, int]] = []
    start = 0
    opened: int | None = None  # where a sentence began that an enumerator opened
    breaks = [(m.start(), m.end()) for m in _SENTENCE_END.finditer(unwrap_soft_breaks(text))]
    for end, after in [*breaks, (len(text), len(text))]:
        piece = text[start:end]
        a = start + len(piece) - len(piece.lstrip())
        b = start + len(piece.rstrip())
        leading = _LEADING_CITATIONS.match(text[a:b])
        if leading and spans:
            spans[-1] = (spans[-1][0], a + len(leading.group(0).rstrip()))
            a += leading.end()
        if opened is not None:
            a, opened = opened, None
        if _ENUMERATOR.fullmatch(text[a:b]) and "\n" not in text[b:after]:
            opened = a
        elif a < b:
            spans.append((a, b))
        start = after
    if opened is not None:
        spans.append((opened, len(text.rstrip())))
    return spans


def split_sentences(text: str) -> list[str]:
    return [text[a:b] for a, b in sentence_spans(text)]


class CitationFilter:
    """Checks citations in streamed text: a possible citation ("[1", " [12,") is held back
    until it closes, so invalid numbers never reach the client and the streamed text equals
    the final checked answer."""

    _PARTIAL = re.compile(r"\s?\[[\d\s,]*$|\s$")

    def __init__(self, sources: Sequence[Source]) -> None:
        self.by_number = {source.number: source for source in sources}
        self.written = 0
        self.invalid_removed = 0
        self._buffer = ""

    def _keep_valid(self, match: re.Match[str]) -> str:
        numbers = [int(n) for n in re.findall(r"\d+", match.group(1))]
        valid = [n for n in numbers if n in self.by_number]
        self.written += len(numbers)
        self.invalid_removed += len(numbers) - len(valid)
        if not valid:
            return ""
        space = " " if match.group(0).startswith((" ", "\t", "\n")) else ""
        return space + "[" + ", ".join(str(n) for n in valid) + "]"

    def feed(self, delta: str) -> str:
        self._buffer += delta
        held = self._PARTIAL.search(self._buffer)
        cut = held.start() if held else len(self._buffer)
        ready, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return _CITATION.sub(self._keep_valid, ready)

    def flush(self) -> str:
        rest, self._buffer = self._buffer, ""
        return _CITATION.sub(self._keep_valid, rest)


def _statement(text: str, span: tuple[int, int], by_number: dict[int, Source]) -> Statement:
    sentence = text[span[0] : span[1]]
    numbers = tuple(dict.fromkeys(int(n) for m in _CITATION.findall(sentence)
                                  for n in re.findall(r"\d+", m)))  # fmt: skip
    plain = _CITATION.sub("", sentence).strip()
    if numbers:
        evidence = " ".join(by_number[n].hit.text for n in numbers)
        return Statement(plain, numbers, support(plain, evidence), span=span)
    if len(content_words(plain)) >= INFERRED_MIN_WORDS and by_number:
        best, score = max(
            ((n, support(plain, source.hit.text)) for n, source in by_number.items()),
            key=lambda pair: pair[1],
        )
        if score >= INFERRED_MIN_SUPPORT:
            return Statement(plain, (best,), score, inferred=True, span=span)
    return Statement(plain, (), 0.0, span=span)


def check_citations(text: str, sources: Sequence[Source]) -> CheckedAnswer:
    citations = CitationFilter(sources)
    by_number = citations.by_number
    checked = citations.feed(text) + citations.flush()
    statements = tuple(_statement(checked, span, by_number) for span in sentence_spans(checked))
    citing: dict[int, list[Statement]] = {}
    for statement in statements:
        for number in statement.numbers:
            citing.setdefault(number, []).append(statement)
    cited = tuple(
        Citation(
            by_number[number],
            tuple(s.text for s in citers),
            sum(support(s.text, by_number[number].hit.text) for s in citers) / len(citers),
            inferred=all(s.inferred for s in citers),
        )
        for number, citers in citing.items()
    )
    return CheckedAnswer(checked, cited, statements, citations.invalid_removed, citations.written)


class ProseAnswerReader:
    """Reads a prose answer as it streams (invalid citations held back and removed, see
    CitationFilter) and checks it at the end."""

    def __init__(self, sources: Sequence[Source]) -> None:
        self.sources = sources
        self._filter = CitationFilter(sources)
        self._raw: list[str] = []

    def feed(self, delta: str) -> str:
        self._raw.append(delta)
        return self._filter.feed(delta)

    def flush(self, finish_reason: str | None = None) -> str:
        return self._filter.flush()

    def result(self) -> CheckedAnswer:
        checked = check_citations("".join(self._raw).lstrip(), self.sources)
        if not is_not_found(checked.text):
            return checked
        return CheckedAnswer(checked.text, (), (), checked.invalid_removed, checked.written, True)
