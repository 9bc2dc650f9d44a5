"""The instruction screen's judged layer (index/screening.py, ``index.screen.judge``): the
query path's relevance judge asks of each sentence of a document being ingested whether it
is an instruction to an AI assistant."""

from __future__ import annotations

from collections.abc import Sequence

from index.config import ScreenConfig
from index.errors import ConfigError
from index.screening import JUDGE_QUESTION, InstructionJudge
from serve.query.judging import RerankConfig
from serve.query.rerankers import CrossEncoderReranker, OnnxCrossEncoderReranker, cross_encoder


def instruction_scorer(rerank: RerankConfig) -> CrossEncoderReranker | OnnxCrossEncoderReranker:
    """The judge the instruction screen asks, started: the query path's model on the CPU, each
    sentence scored alone (the ONNX judge's INT8 scores depend on the batch a pair is in, so a
    sentence's flag would depend on its neighbours: benchmarks/results/judge.md, "One gate per
    question", and benchmarks/results/redteam.md, "Instruction screen: a judged layer")."""
    if rerank.backend != "cross-encoder" or not rerank.model:
        raise ConfigError(
            "index.screen.judge uses the relevance judge, but query.rerank.backend is "
            f"{rerank.backend!r}: set query.rerank.backend: cross-encoder with its model, or "
            "index.screen.judge: false",
            param="index.screen.judge",
        )
    return cross_encoder(rerank.model, "cpu", max_tokens=128).start()


def instruction_judge(screen: ScreenConfig, rerank: RerankConfig) -> InstructionJudge | None:
    """The instruction screen's judged layer (``index.screen.judge``): the query path's judge
    asked, for each sentence, JUDGE_QUESTION; a score from ``screen.min_score`` flags it. On
    the CPU (a handful of short sentences per document). None when the screen has no judge."""
    if not screen.judge:
        return None
    scorer = instruction_scorer(rerank)

    def judged(sentences: Sequence[str]) -> list[bool]:
        return [score >= screen.min_score for score in scorer._predict(JUDGE_QUESTION, sentences)]

    return judged
