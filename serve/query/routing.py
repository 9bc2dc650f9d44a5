"""Which generator answers (issue 39): with several (``generator.models``), the name
``grounded`` routes each question to the small model unless what the pipeline already knows
before generating says it is hard, and a cascade asks the large model when the small one's
answer fails its check.

The router reads signals the pipeline has once the judge has ranked the passages
(``RouteSignals``): the judge's best score and its lead over the second, how many passages
passed the gate, whether the question compares or aggregates (``COMPARES``, one cue table per
language), its length, and whether it follows earlier turns. Each signal has its threshold in
``RouteConfig``; an unset one never sends a question to the large model. The example's
settings (docs/configuration.md, "Several models") were chosen on the human-written sets
recorded so far and read on a set written and answered after (benchmarks/routing.py;
benchmarks/results/routing.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from index.types import SearchHit
from serve.query.language import detect_language, either

MODEL_ID = "grounded"  # the API's name for the answering model: routes when there are several


class RouteConfig(BaseModel):
    """How ``grounded`` chooses between ``generator.models``: the small model answers unless a
    signal below says the question is hard; with ``cascade``, an answer of the small model that
    fails its check (or is not grounded) is asked of the large model before "not found"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    small: str | None = Field(None, description="Default: the first of generator.models.")
    large: str | None = Field(None, description="Default: the last of generator.models.")
    cascade: bool = True
    large_checks: bool = Field(
        False,
        description="The large model checks the small model's answers (the answer check, at "
        "the large model's threshold): a stronger judge of the cheap answer, for one prompt "
        "and one token.",
    )
    min_top_score: float | None = Field(
        None, description="The large model answers when the judge's best score is below this."
    )
    min_margin: float | None = Field(
        None,
        description="... or when the best score leads the second best by less than this "
        "(passages compete).",
    )
    max_passages: int | None = Field(
        None, ge=1, description="... or when more passages than this pass the judge's gate."
    )
    compares: bool = Field(
        True, description="... or when the question compares or aggregates (COMPARES' cues)."
    )
    max_words: int | None = Field(
        None, ge=1, description="... or when the question is longer than this many words."
    )
    follow_ups: bool = Field(False, description="... or when the conversation has earlier turns.")
    min_check: float | None = Field(
        None, ge=0.0, le=1.0,
        description="With cascade: the large model is also asked when the check of the small "
        "model's answer gives P(yes) below this: an answer that passed the check that "
        "withholds (min_answer_support) but not by much. Needs the small model's answers "
        "checked (best by the large model: large_checks).",
    )  # fmt: skip
    quote_figures: bool = Field(
        False,
        description="With cascade: the large model is also asked when the small model's "
        "quoted answer states figures (amounts, dates, counts) and its quote states others, "
        "none of them the same: the answer is not its quote's (a neighbouring fact, or a value "
        "an instruction inside a source asked for).",
    )
    not_found_min_score: float | None = Field(
        None,
        description='With cascade: the small model\'s own "not found" is asked of the large '
        "model only when the judge's best score is at least this. Under it no passage looks "
        "like the answer, and the large model mostly agrees (None: always asked).",
    )
    min_confidence: float | None = Field(
        None, le=0.0,
        description="With cascade: the large model is also asked when the small model's "
        "quoted answer's tokens have a mean log-probability below this (it is unsure); that "
        "answer is held until read whole, as a checked one is.",
    )  # fmt: skip


# fmt: off
# Cues of a question that compares, counts across or gathers several facts: one tuple per
# language, whole words (any case); a question in another language is read with all of them.
COMPARES = {
    "en": ("compare", "compared", "comparison", "difference", "differences", "differ", "versus",
           "vs", "both", "either", "neither", "between", "than", "in total", "altogether",
           "all the", "list", "which of", "how many times", "sum", "combined", "respectively",
           "whereas", "same as", "as much as"),
    "fr": ("comparer", "comparé", "comparée", "comparaison", "différence", "différences",
           "diffère", "versus", "les deux", "l'un ou l'autre", "ni l'un", "entre", "que le",
           "que la", "que les", "plus que", "moins que", "au total", "en tout", "tous les",
           "toutes les", "liste", "lequel", "laquelle", "lesquels", "combien de fois", "somme",
           "respectivement", "alors que", "autant que"),
}
# fmt: on
_COMPARES = {
    language: re.compile(rf"(?<!\w)(?:{either(cues)})(?!\w)", re.IGNORECASE)
    for language, cues in COMPARES.items()
}


def compares(question: str, language: str | None = None) -> bool:
    """Whether ``question`` compares or aggregates (its language's cues; all where it has
    none)."""
    language = language or detect_language(question)
    patterns = [_COMPARES[language]] if language in _COMPARES else _COMPARES.values()
    return any(pattern.search(question) for pattern in patterns)


def top_score(scores: Iterable[float | None]) -> float | None:
    """The judge's best score of the passages that passed the gate (None: none judged)."""
    return max((s for s in scores if s is not None), default=None)


@dataclass(frozen=True, slots=True)
class RouteSignals:
    """What the pipeline knows of a question before generating."""

    top_score: float | None  # the judge's best score (None: not judged)
    margin: float | None  # best minus second best (None: fewer than two judged)
    passages: int  # passages that passed the gate
    compares: bool
    words: int
    turns: int  # earlier turns of the conversation

    @classmethod
    def of(cls, question: str, scores: Sequence[float | None], turns: int = 0) -> RouteSignals:
        """From the question and the judge's scores of the passages that passed the gate."""
        judged = sorted((s for s in scores if s is not None), reverse=True)
        return cls(
            top_score=judged[0] if judged else None,
            margin=judged[0] - judged[1] if len(judged) > 1 else None,
            passages=len(scores),
            compares=compares(question),
            words=len(question.split()),
            turns=turns,
        )

    @classmethod
    def of_hits(cls, question: str, hits: Sequence[SearchHit], turns: int = 0) -> RouteSignals:
        return cls.of(question, [hit.rerank_score for hit in hits], turns)


def hard_because(signals: RouteSignals, route: RouteConfig) -> str | None:
    """Why the large model should answer (a short reason, as shown in ``grounded.route``), or
    None: the small one."""
    top, margin = signals.top_score, signals.margin
    if route.min_top_score is not None and top is not None and top < route.min_top_score:
        return "low_score"
    if route.min_margin is not None and margin is not None and margin < route.min_margin:
        return "close_scores"
    if route.max_passages is not None and signals.passages > route.max_passages:
        return "many_passages"
    if route.compares and signals.compares:
        return "compares"
    if route.max_words is not None and signals.words > route.max_words:
        return "long_question"
    if route.follow_ups and signals.turns:
        return "follow_up"
    return None


def below(value: float | None, threshold: float | None) -> bool:
    """``value`` is known and under a set ``threshold``."""
    return value is not None and threshold is not None and value < threshold


@dataclass(frozen=True, slots=True)
class FirstAnswer:
    """The small model's answer, as the cascade reads it."""

    not_found: bool  # "not found": its own, or withheld by its check
    support: float | None  # its check's P(yes) (None: nothing was checked)
    confidence: float | None  # the model's own (route.min_confidence; None: not measured)
    figures_disagree: bool  # its figures are not its quote's


def cascades(answer: FirstAnswer, top: float | None, route: RouteConfig) -> bool | None:
    """The cascade's rule (route.cascade on), one home for the pipeline and the routing
    benchmark: True, the large model is asked: the answer is "not found" or withheld, passed
    its check by less than route.min_check, the model was unsure of it (route.min_confidence),
    or its figures are not its quote's (route.quote_figures). None: a "not found" with
    nothing checked over passages the judge scores (best: ``top``) below
    route.not_found_min_score stands. False: the answer stands."""
    if answer.not_found and answer.support is None and below(top, route.not_found_min_score):
        return None
    return (
        answer.not_found
        or below(answer.support, route.min_check)
        or below(answer.confidence, route.min_confidence)
        or (route.quote_figures and answer.figures_disagree)
    )


# A routed small model's own "not found" kept without a cascade (route.not_found_min_score):
# the reason a small route carries, so that metrics count what the setting held back.
NOT_FOUND_KEPT = "not_found_low_score"


@dataclass(frozen=True, slots=True)
class Route:
    """Which model answered a question, and how it was chosen: ``asked`` (the request named
    it), ``routed`` (the router chose; ``reason`` why the large one, or NOT_FOUND_KEPT on the
    small one's "not found" kept without a cascade), ``cascaded`` (the small model's answer
    failed its check, and ``first`` was asked before), or ``gate`` (nothing passed the gate:
    "not found" without asking a model)."""

    model: str
    decision: str = "asked"
    reason: str | None = None
    first: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"model": self.model, "decision": self.decision, "reason": self.reason,
                "first": self.first}  # fmt: skip
