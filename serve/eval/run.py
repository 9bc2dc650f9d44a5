"""`grounded eval`: run a question set through the query path and measure it.

Each line of the questions file is a JSON object (see EvalQuestion). Retrieval metrics use the
ranking without the evidence gate (the retriever's quality); answers go through the whole path
as users get it (gate, prompt, generator, checked citations).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from index.errors import InvalidRequestError
from serve.eval.metrics import (
    answer_matches,
    first_occurrences,
    mean,
    ndcg_at,
    percentile,
    recall_at,
    reciprocal_rank,
)
from serve.query.pipeline import Answer, QueryOptions, QueryPipeline

CUTOFFS = (1, 5, 10)


class EvalQuestion(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    question: str = Field(min_length=1)
    id: str | None = None
    relevant_files: list[str] = []
    relevant_doc_ids: list[str] = []
    answer_contains: list[str] = []
    answerable: bool = True
    split: Literal["dev", "test"] | None = None  # tuned on dev, reported on test

    @model_validator(mode="after")
    def _consistent(self) -> EvalQuestion:
        if not self.answerable and (self.relevant_files or self.relevant_doc_ids):
            raise ValueError("an unanswerable question cannot have relevant documents")
        return self

    @property
    def relevant(self) -> set[str]:
        return set(self.relevant_files) | set(self.relevant_doc_ids)


def load_questions(path: Path) -> list[EvalQuestion]:
    """Every line validated; the first bad one is refused with its line number and reason."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"cannot read questions file {path}: {exc}") from exc
    questions = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            question = EvalQuestion.model_validate(json.loads(line))
        except (json.JSONDecodeError, ValidationError) as exc:
            reason = str(exc).splitlines()
            detail = (
                reason[-1]
                if isinstance(exc, json.JSONDecodeError)
                else "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}" for e in exc.errors()
                )
            )
            raise InvalidRequestError(
                f"{path}:{number}: not a valid question ({detail}); each line is a JSON object "
                'such as {"question": "...", "relevant_files": ["a.pdf"]}'
            ) from exc
        questions.append(question.model_copy(update={"id": question.id or f"q{number}"}))
    if not questions:
        raise InvalidRequestError(f"{path} holds no questions")
    return questions


@dataclass
class QuestionResult:
    id: str
    question: str
    answerable: bool
    retrieval: dict[str, float] = field(default_factory=dict)
    ranked: list[str] = field(default_factory=list)  # documents, best first (top 10)
    answer: str | None = None
    abstained: bool | None = None
    citations: int = 0  # sources the answer cites (after checking; inferred ones included)
    model_citations: int = 0  # [n] the model wrote, before invalid ones were removed
    model_citations_invalid: int = 0  # of those, [n] for sources it was not given
    inferred_citations: int = 0
    quotes: int = 0  # quoted answers: citations that carry a quote
    quotes_verified: int = 0  # of those, found in the cited chunk
    quote: str | None = None  # quoted answers: the sentence the model quoted
    answer_support: float | None = None  # the answer check's P(yes), where it ran
    top_judge: float | None = None  # the relevance judge's best score in the prompt (in-process)
    supported_share: float | None = None
    matched: bool | None = None
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AnswerView:
    """What the metrics need from an answer, in-process (Answer) or over HTTP (the API's
    ``grounded`` extension field)."""

    text: str
    abstained: bool
    citations: list[tuple[int, str, bool, bool | None]]  # (number, chunk id, inferred, verified)
    sources: set[tuple[int, str]]  # (number, chunk id) of every source in the prompt
    written: int  # [n] the model wrote
    invalid_removed: int
    supported_share: float
    timings: dict[str, float]
    quote: str | None = None  # quoted answers: the sentence the model quoted
    answer_support: float | None = None  # the answer check's P(yes), where it ran
    top_judge: float | None = None  # the judge's best score among the prompt's sources

    @classmethod
    def of(cls, answer: Answer) -> AnswerView:
        judged = [s.hit.rerank_score for s in answer.sources if s.hit.rerank_score is not None]
        return cls(
            answer.text,
            answer.abstained,
            [
                (c.source.number, c.source.hit.chunk_id, c.inferred, c.verified)
                for c in answer.cited
            ],
            {(s.number, s.hit.chunk_id) for s in answer.sources},
            answer.citations_written,
            answer.invalid_citations_removed,
            answer.supported_share,
            answer.timings,
            next((c.quote for c in answer.cited if c.quote), None),
            answer.answer_support,
            max(judged, default=None),
        )

    @classmethod
    def from_api(cls, completion: dict[str, Any]) -> AnswerView:
        extension = completion["grounded"]
        return cls(
            completion["choices"][0]["message"]["content"],
            extension["abstained"],
            [
                (c["number"], c["chunk_id"], c["inferred"], c.get("verified"))
                for c in extension["citations"]
            ],
            {(s["number"], s["chunk_id"]) for s in extension["sources"]},
            extension["citations_written"],
            extension["invalid_citations_removed"],
            extension["supported_share"],
            extension["timings"],
            next((c["quote"] for c in extension["citations"] if c.get("quote")), None),
            extension.get("answer_support"),
        )


class Backend(Protocol):
    async def rank(self, question: str, k: int) -> list[tuple[str, str]]:
        """(file name, document id) of the top-k chunks, best first, without the gate."""
        ...

    async def ask(self, question: str) -> AnswerView: ...


class LocalBackend:
    """In-process: the query pipeline over a data directory."""

    def __init__(
        self, pipeline: QueryPipeline, tenant: str, options: QueryOptions | None = None
    ) -> None:
        """``options``: how every question is asked (its search filter: as an identity)."""
        self.pipeline, self.tenant = pipeline, tenant
        self.options = options or QueryOptions()

    async def rank(self, question: str, k: int) -> list[tuple[str, str]]:
        options = dataclasses.replace(self.options, top_k=k, gate=False)
        hits = await self.pipeline.retrieve(self.tenant, question, options)
        return [(h.file_name, h.doc_id) for h in hits]

    async def ask(self, question: str) -> AnswerView:
        answer = await self.pipeline.answer(self.tenant, question, options=self.options)
        return AnswerView.of(answer)


class ApiBackend:
    """A running appliance, through its OpenAI-compatible API (the key selects the tenant)."""

    def __init__(self, base_url: str, api_key: str, tenant: str) -> None:
        import openai

        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=2,
                                         timeout=900)  # fmt: skip
        self.tenant = tenant

    async def rank(self, question: str, k: int) -> list[tuple[str, str]]:
        page = await self.client.vector_stores.search(
            self.tenant, query=question, max_num_results=k
        )
        return [(hit.filename, hit.file_id) for hit in page.data]

    async def ask(self, question: str) -> AnswerView:
        completion = await self.client.chat.completions.create(
            model="grounded", messages=[{"role": "user", "content": question}]
        )
        return AnswerView.from_api(completion.model_dump())


class Evaluator:
    def __init__(
        self,
        backend: Backend | QueryPipeline,
        tenant: str,
        answers: bool = True,
        options: QueryOptions | None = None,
    ):
        if isinstance(backend, QueryPipeline):
            backend = LocalBackend(backend, tenant, options)
        self.backend, self.answers = backend, answers

    async def evaluate(self, question: EvalQuestion) -> QuestionResult:
        result = QuestionResult(question.id or "", question.question, question.answerable)
        if question.relevant:
            by_file = bool(question.relevant_files)
            hits = await self.backend.rank(question.question, max(CUTOFFS))
            ranked = first_occurrences(name if by_file else doc for name, doc in hits)
            relevant = question.relevant
            result.ranked = ranked
            result.retrieval = {f"recall@{k}": recall_at(ranked, relevant, k) for k in CUTOFFS}
            result.retrieval["mrr@10"] = reciprocal_rank(ranked, relevant, 10)
            result.retrieval["ndcg@10"] = ndcg_at(ranked, relevant, 10)
        if not self.answers:
            return result
        answer = await self.backend.ask(question.question)
        result.answer = answer.text
        result.abstained = answer.abstained
        result.citations = len(answer.citations)
        result.model_citations = answer.written
        result.model_citations_invalid = answer.invalid_removed
        result.inferred_citations = sum(c[2] for c in answer.citations)
        result.quotes = sum(c[3] is not None for c in answer.citations)
        result.quotes_verified = sum(c[3] is True for c in answer.citations)
        result.quote = answer.quote
        result.answer_support = answer.answer_support
        result.top_judge = answer.top_judge
        result.supported_share = None if answer.abstained else answer.supported_share
        if question.answer_contains and not answer.abstained:
            result.matched = answer_matches(answer.text, question.answer_contains)
        elif question.answer_contains:
            result.matched = False
        result.timings = answer.timings
        return result


def summarize(results: Sequence[QuestionResult]) -> dict[str, float | int | None]:
    """Totals over a run; a figure is None when no question could measure it."""
    ranked = [r for r in results if r.retrieval]
    summary: dict[str, float | int | None] = {
        "questions": len(results),
        "with_relevance": len(ranked),
    }
    for metric in [*(f"recall@{k}" for k in CUTOFFS), "mrr@10", "ndcg@10"]:
        summary[metric] = mean(r.retrieval[metric] for r in ranked)
    answered = [r for r in results if r.abstained is not None]
    if not answered:
        return summary
    unanswerable = [r for r in answered if not r.answerable]
    answerable = [r for r in answered if r.answerable]
    citations = sum(r.citations for r in answered)
    written = sum(r.model_citations for r in answered)
    invalid = sum(r.model_citations_invalid for r in answered)
    summary |= {
        "answered": len(answered),
        "abstention_accuracy": mean(float(r.abstained) for r in unanswerable),
        "false_abstention_rate": mean(float(r.abstained) for r in answerable),
        "decision_accuracy": mean(float(r.abstained != r.answerable) for r in answered),
        # The model's own [n], before invalid numbers were removed from the answer.
        "citation_validity": (written - invalid) / written if written else None,
        "model_citations": written,
        "citations": citations,
        "inferred_citation_share": sum(r.inferred_citations for r in answered) / citations
        if citations
        else None,
        # Quoted answers (query.answer_format: quoted): quotes found in the cited chunk.
        "quote_verified_share": sum(r.quotes_verified for r in answered) / quotes
        if (quotes := sum(r.quotes for r in answered))
        else None,
        "faithfulness_proxy": mean(
            r.supported_share for r in answered if r.supported_share is not None
        ),
        "answer_match": mean(float(r.matched) for r in answered if r.matched is not None),
    }
    stages = sorted({stage for r in answered for stage in r.timings})
    for stage in stages:
        values = [r.timings[stage] for r in answered if stage in r.timings]
        summary[f"{stage}_s_p50"] = percentile(values, 0.5)
        summary[f"{stage}_s_p95"] = percentile(values, 0.95)
    return summary


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_report(
    title: str, summary: dict, results: Sequence[QuestionResult], command: str = ""
) -> str:
    lines = [f"# {title}", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += ["| metric | value |", "|---|---|"]
    lines += [f"| {name} | {_cell(value)} |" for name, value in summary.items()]
    lines += ["", "## Per question", ""]
    lines += ["| id | question | recall@5 | mrr@10 | abstained | matched | support | answer |"]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            "| "
            + " | ".join(
                _cell(v)
                for v in (
                    r.id,
                    r.question[:80],
                    r.retrieval.get("recall@5"),
                    r.retrieval.get("mrr@10"),
                    r.abstained,
                    r.matched,
                    r.supported_share,
                    (r.answer or "")[:120],
                )
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def results_json(summary: dict, results: Sequence[QuestionResult]) -> dict:
    return {"summary": summary, "questions": [asdict(r) for r in results]}
