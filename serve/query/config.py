"""The query path's settings (``query:`` in the config file), apart from the pipeline that
reads them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from serve.query.condense import Condense
from serve.query.judging import RerankConfig
from serve.query.retrieval import Fusion, SearchMode


class QueryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: SearchMode = "hybrid"
    # Chosen on the Wikipedia evaluation sets (benchmarks/results/retrieval.md, "Retrieval
    # quality"): weighted fusion at 0.4 had the best MRR@10 averaged over English and French;
    # RRF lost to lexical-only in both.
    fusion: Fusion = "weighted"
    dense_weight: float = Field(0.4, ge=0.0, le=1.0)
    candidates: int = Field(20, gt=0, description="Candidates taken from each retriever.")
    top_k: int = Field(5, gt=0, description="Most sources given to the generator.")
    min_dense_score: float = Field(
        0.35, description="Similarity gate (where no judge gate applies): cosine similarity."
    )
    min_bm25_score: float | None = Field(
        None, description="Similarity gate (where no judge gate applies): lexical match."
    )
    history_share: float = Field(0.25, ge=0.0, le=1.0)
    condense: Condense = Field("recent", description="Retrieval query for follow-up turns.")
    condense_turns: int = Field(2, ge=0, description="Earlier user turns used by condense.")
    rerank: RerankConfig = RerankConfig()
    withhold_instructions: bool = Field(
        True, description="Keep instruction-like passages of sources out of the prompt."
    )
    remind_rules: bool = Field(
        False,
        description="Restate the rules after the question (the 0.5B model then abstains "
        'far more often: benchmarks/results/redteam.md, "Documents are data").',
    )
    answer_format: Literal["prose", "quoted"] = Field(
        "prose",
        description="prose: the model writes an answer citing [n]; quoted: it answers in JSON "
        "with its source and a quote of it (vLLM structured output), checked before the "
        "answer is shown as grounded (serve/query/quotes.py).",
    )
    min_answer_support: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Quoted answers: ask the generator again whether the cited source states "
        'the answer, and say "not found" under this P(yes); the answer is shown once '
        "checked. None: no check. The threshold is the generator's own "
        "(benchmarks/results/answer-check.md).",
    )

    grounded_only: bool = Field(
        False,
        description='Quoted answers: say "not found" rather than show an answer whose quote '
        "is not in its source, or (source in the question's language) whose words are mostly "
        "not the source's; the answer is shown once read whole (serve/query/quotes.py).",
    )

    @model_validator(mode="after")
    def _check_needs_quotes(self) -> QueryConfig:
        for name in ("min_answer_support", "grounded_only"):
            if getattr(self, name) not in (None, False) and self.answer_format != "quoted":
                raise ValueError(
                    f"{name} reads quoted answers: set answer_format: quoted, or remove {name}"
                )
        return self
