"""The evidence gate: abstain without calling the generator when no candidate is good enough."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from index.types import SearchHit
from serve.query.language import detect_language

NOT_FOUND = {
    "en": "Not found in the sources.",
    "fr": "Introuvable dans les sources.",
    "ru": "В источниках ответа нет.",
    "de": "In den Quellen nicht gefunden.",
    "es": "No se encuentra en las fuentes.",
    "it": "Non trovato nelle fonti.",
    "nl": "Niet gevonden in de bronnen.",
    "pt": "Não encontrado nas fontes.",
}


def not_found_message(question: str) -> str:
    """The abstention, in the question's language where it is known."""
    return NOT_FOUND.get(detect_language(question), NOT_FOUND["en"])


@dataclass(frozen=True, slots=True)
class EvidenceGate:
    """A candidate passes on its cosine similarity, or on a strong lexical match (identifiers
    such as contract numbers have weak embeddings but exact BM25 hits)."""

    min_dense_score: float = 0.35
    min_bm25_score: float | None = None

    def passes(self, hit: SearchHit) -> bool:
        if hit.dense_score is not None and hit.dense_score >= self.min_dense_score:
            return True
        return (
            self.min_bm25_score is not None
            and hit.bm25_score is not None
            and hit.bm25_score >= self.min_bm25_score
        )

    def filter(self, hits: Sequence[SearchHit]) -> list[SearchHit]:
        return [hit for hit in hits if self.passes(hit)]


_MARKS = re.compile(r"\[[\d,\s]*\]|[^\w\s]")


def _plain(text: str) -> str:
    return " ".join(_MARKS.sub(" ", text).casefold().split())


_NOT_FOUND_PLAIN = tuple(_plain(message) for message in NOT_FOUND.values())


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


def is_not_found(answer: str) -> bool:
    """The model abstained: its answer is a "not found" message in any language, with at most
    a few other words ("[1] Not found in the sources." counts), or a single sentence that ends
    with it ("The warranty period is not found in the sources."). A real answer that mentions
    the phrase in passing, or answers in another sentence, does not count."""
    plain = _plain(answer)
    for message in _NOT_FOUND_PLAIN:
        if message in plain:
            if len(plain.replace(message, " ").split()) <= 3:
                return True
            return plain.endswith(message) and len(_SENTENCE_END.split(answer.strip())) == 1
    return False
