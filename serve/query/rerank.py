"""Reranking: rescore the gated candidates with a model that reads question and passage together.

Two backends behind one protocol: a cross-encoder from any local sentence-transformers model
folder (no cross-encoder ships in a registry package, DESIGN.md), and the generator itself, which
scores a passage by the probability it gives "yes" when asked whether the passage answers the
question (one prefill and one sampled token per passage, batched by vLLM).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from index.errors import ConfigError
from index.types import SearchHit
from serve.generator import Generator
from serve.query.prompt import PromptBuilder

RerankBackend = Literal["none", "cross-encoder", "generator"]


class RerankConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: RerankBackend = Field("none", description="Off unless a model is configured.")
    model: str | None = Field(None, description="cross-encoder: a local model folder.")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    batch_size: int = Field(16, gt=0)
    candidates: int = Field(20, gt=0, description="Gated candidates given to the reranker.")
    top_n: int | None = Field(None, gt=0, description="Results kept (default: query.top_k).")


class Reranker(Protocol):
    async def scores(self, query: str, passages: Sequence[str], cache_salt: str) -> list[float]:
        """Relevance of each passage to the query, higher is better."""
        ...


async def rerank(
    reranker: Reranker, query: str, hits: Sequence[SearchHit], top_n: int, cache_salt: str
) -> list[SearchHit]:
    """The hits reordered by the reranker (stable for ties), at most ``top_n``, each carrying
    its ``rerank_score``."""
    if not hits:
        return []
    scores = await reranker.scores(query, [hit.text for hit in hits], cache_salt)
    order = sorted(range(len(hits)), key=lambda i: -scores[i])
    return [replace(hits[i], rerank_score=float(scores[i])) for i in order[:top_n]]


class CrossEncoderReranker:
    """sentence-transformers CrossEncoder on a local folder; CUDA (fp16) when present."""

    def __init__(self, model: str, device: str = "auto", batch_size: int = 16) -> None:
        if not (Path(model) / "config.json").is_file():
            raise ConfigError(
                f"query.rerank.model {model!r} is not a local cross-encoder model folder "
                "(no config.json)",
                param="query.rerank.model",
            )
        self.model_path, self.device, self.batch_size = model, device, batch_size
        self._model = None

    def start(self) -> CrossEncoderReranker:
        if self._model is None:
            import torch
            from sentence_transformers import CrossEncoder

            device = self.device
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            self._model = CrossEncoder(self.model_path, device=device)
            if device == "cuda":
                self._model.model.half()
        return self

    def _predict(self, query: str, passages: Sequence[str]) -> list[float]:
        self.start()
        pairs = [(query, passage) for passage in passages]
        scores = self._model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False)
        return [float(s) for s in scores]

    async def scores(
        self, query: str, passages: Sequence[str], cache_salt: str = ""
    ) -> list[float]:
        return await asyncio.to_thread(self._predict, query, passages)


JUDGE_SYSTEM = "You judge search results. Reply with one word: yes or no."
JUDGE_USER = (
    "Question: {question}\n\nPassage:\n<passage>\n{passage}\n</passage>\n\n"
    "Does the passage contain information that answers the question? Reply yes or no."
)
_YES = ("yes", "Yes", " yes", " Yes", "YES")
_NO = ("no", "No", " no", " No", "NO")


class GeneratorReranker:
    """Relevance = P(yes) / (P(yes) + P(no)) for the generator's first answer token."""

    def __init__(self, generator: Generator) -> None:
        self.generator = generator
        self._choices: tuple[frozenset[int], frozenset[int]] | None = None

    def _single_tokens(self, words: Sequence[str]) -> frozenset[int]:
        ids = (self.generator.encode(word) for word in words)
        return frozenset(i[0] for i in ids if len(i) == 1)

    def choices(self) -> tuple[frozenset[int], frozenset[int]]:
        if self._choices is None:
            yes, no = self._single_tokens(_YES), self._single_tokens(_NO)
            if not yes or not no:
                raise ConfigError(
                    "the generator's tokenizer has no single token for yes/no; "
                    "use the cross-encoder reranker with this model",
                    param="query.rerank.backend",
                )
            self._choices = yes, no
        return self._choices

    async def _score(self, question: str, passage: str, cache_salt: str) -> float:
        yes, no = self.choices()
        escape = PromptBuilder(self.generator.special_tokens).escape
        token_ids = self.generator.render([
            {"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": JUDGE_USER.format(question=escape(question),
                                                          passage=escape(passage))},
        ])  # fmt: skip
        logprobs = await self.generator.next_token_logprobs(
            token_ids, allowed_token_ids=sorted(yes | no), cache_salt=cache_salt
        )
        p_yes = sum(math.exp(lp) for token, lp in logprobs.items() if token in yes)
        p_no = sum(math.exp(lp) for token, lp in logprobs.items() if token in no)
        return p_yes / (p_yes + p_no) if p_yes + p_no > 0 else 0.0

    async def scores(self, query: str, passages: Sequence[str], cache_salt: str) -> list[float]:
        return list(await asyncio.gather(*(self._score(query, p, cache_salt) for p in passages)))


def build_reranker(config: RerankConfig, generator: Generator) -> Reranker | None:
    if config.backend == "none":
        return None
    if config.backend == "generator":
        return GeneratorReranker(generator)
    if not config.model:
        raise ConfigError(
            "query.rerank.backend is 'cross-encoder' but query.rerank.model is not set: "
            "give the path of a local cross-encoder model folder",
            param="query.rerank.model",
        )
    return CrossEncoderReranker(config.model, config.device, config.batch_size)
