"""The relevance judge's contract and settings, and yes/no probing.

A judge (a Reranker) scores how well each passage answers a question, higher is better: a
cross-encoder, or the generator asked "does this passage answer it? yes or no" and read as
P(yes) (serve/query/rerankers.py). The same yes/no probing checks answers after the fact
(serve/query/check.py, AnswerCheck). RerankConfig holds the judge's settings and gate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from index.errors import ConfigError
from serve.query.generation import Generator

RerankBackend = Literal["none", "cross-encoder", "generator"]


class RerankConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: RerankBackend = Field("none", description="Off unless a model is configured.")
    model: str | None = Field(
        None,
        description="cross-encoder: a fetched judge's name (ms-marco-minilm-l12) or a local "
        "model folder (ONNX with tokenizer.json, or sentence-transformers).",
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"
    batch_size: int | None = Field(
        None,
        gt=0,
        description="Pairs per model call. None: 1 for an ONNX judge (the shipped one is INT8 "
        "with dynamic quantization, which scales a call's activations together, so a batched "
        "pair's score depends on its neighbours), 16 for sentence-transformers.",
    )
    max_tokens: int = Field(
        256, ge=32, le=512, description="ONNX judge: longest (question, passage) pair it reads."
    )
    window: Literal["start", "query"] = Field(
        "start",
        description="ONNX judge, for a pair longer than max_tokens: read the passage's start, "
        "or the window where the question's words are densest.",
    )
    candidates: int = Field(
        20,
        gt=0,
        description="Fused candidates the reranker reads (those passing the similarity gate "
        "where no judge gate applies).",
    )
    top_n: int | None = Field(None, gt=0, description="Results kept (default: query.top_k).")
    min_score: float | dict[str, float] | None = Field(
        None,
        description="Judge gate: candidates scored below it are dropped, and with none left "
        "the answer is 'not found' without calling the generator. One threshold, or one per "
        "question language ({en: 3.9, fr: 2.6}; a language not listed is not gated). None: no "
        "judge gate.",
    )
    languages: list[str] | None = Field(
        None,
        description="Rerank (and gate) only questions in these languages (ISO 639-1): the "
        "judge is English-trained. Others keep the fused order and the similarity gate. "
        "None: every language.",
    )


def judge_threshold(config: RerankConfig, language: str) -> float | None:
    """The judge gate's threshold for a question in ``language``, or None (not gated)."""
    if isinstance(config.min_score, dict):
        return config.min_score.get(language)
    return config.min_score


class Reranker(Protocol):
    async def scores(self, query: str, passages: Sequence[str], cache_salt: str) -> list[float]:
        """Relevance of each passage to the query, higher is better."""
        ...


_YES = ("yes", "Yes", " yes", " Yes", "YES")
_NO = ("no", "No", " no", " No", "NO")


def single_tokens(generator: Generator, words: Sequence[str]) -> frozenset[int]:
    """The token ids of those ``words`` that the generator's tokenizer spells as one token."""
    ids = (generator.encode(word) for word in words)
    return frozenset(i[0] for i in ids if len(i) == 1)


def yes_no_tokens(generator: Generator) -> tuple[frozenset[int], frozenset[int]]:
    """The generator's single-token spellings of yes and of no."""
    yes, no = single_tokens(generator, _YES), single_tokens(generator, _NO)
    if not yes or not no:
        raise ConfigError(
            "the generator's tokenizer has no single token for yes/no; use the "
            "cross-encoder reranker and no answer check (query.min_answer_support) with it",
            param="query.rerank.backend",
        )
    return yes, no


async def yes_probability(
    generator: Generator,
    token_ids: list[int],
    choices: tuple[frozenset[int], frozenset[int]],
    cache_salt: str,
) -> float:
    """P(yes) / (P(yes) + P(no)) for the generator's first token after ``token_ids``."""
    yes, no = choices
    logprobs = await generator.next_token_logprobs(
        token_ids, allowed_token_ids=sorted(yes | no), cache_salt=cache_salt
    )
    p_yes = sum(math.exp(lp) for token, lp in logprobs.items() if token in yes)
    p_no = sum(math.exp(lp) for token, lp in logprobs.items() if token in no)
    return p_yes / (p_yes + p_no) if p_yes + p_no > 0 else 0.0
