"""The query pipeline: retrieve -> gate -> budget -> prompt -> generate -> check citations.

Plain Python (no Ray): the appliance's deployments wrap it, and tests run it directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from index.service import IndexService
from index.types import SearchHit
from serve.generator import Generator
from serve.query.budget import ContextLengthError, plan_budget
from serve.query.citations import check_citations
from serve.query.gate import EvidenceGate, not_found_message
from serve.query.prompt import PromptBuilder, Source, Turn, cache_salt, canonical_order
from serve.query.retrieval import Fusion, SearchFilter, SearchMode, retrieve

MESSAGE_OVERHEAD = 8  # role markers and separators a chat template adds per message
DEFAULT_MAX_TOKENS = 512


class QueryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: SearchMode = "hybrid"
    fusion: Fusion = "rrf"
    dense_weight: float = Field(0.5, ge=0.0, le=1.0)
    candidates: int = Field(20, gt=0, description="Candidates taken from each retriever.")
    top_k: int = Field(5, gt=0, description="Most sources given to the generator.")
    min_dense_score: float = Field(0.35, description="Evidence gate: cosine similarity.")
    min_bm25_score: float | None = Field(None, description="Evidence gate: lexical match.")
    history_share: float = Field(0.25, ge=0.0, le=1.0)


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    cited: tuple[Source, ...]  # verified citations, in order of first use
    sources: tuple[Source, ...]  # every source that was in the prompt
    abstained: bool
    invalid_citations_removed: int = 0
    usage: Usage = Usage()
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class PreparedPrompt:
    token_ids: list[int]
    sources: tuple[Source, ...]
    max_tokens: int
    cache_salt: str


class QueryPipeline:
    def __init__(self, index: IndexService, generator: Generator, config: QueryConfig) -> None:
        self.index = index
        self.generator = generator
        self.config = config
        self.gate = EvidenceGate(config.min_dense_score, config.min_bm25_score)

    def retrieve(
        self, tenant: str, question: str, search_filter: SearchFilter | None = None
    ) -> list[SearchHit]:
        """Candidates that pass the evidence gate, best first, at most ``top_k``."""
        config = self.config
        ranked = retrieve(
            self.index.shard(tenant),
            self.index.embedder,
            question,
            2 * config.candidates,  # everything both sides found, fused
            config.mode,
            fusion=config.fusion,
            dense_weight=config.dense_weight,
            pool=config.candidates,
            search_filter=search_filter,
        )
        return self.gate.filter([hit for hit, _ in ranked])[: config.top_k]

    def prepare(
        self,
        tenant: str,
        question: str,
        history: Sequence[Turn] = (),
        max_tokens: int | None = None,
        search_filter: SearchFilter | None = None,
    ) -> PreparedPrompt | None:
        """The prompt to generate from, or None when no source passes the gate (abstain)."""
        hits = self.retrieve(tenant, question, search_filter)
        if not hits:
            return None
        count, builder = self.generator.count, PromptBuilder(self.generator.special_tokens)
        not_found = not_found_message(question)
        max_tokens = max_tokens or DEFAULT_MAX_TOKENS
        source_tokens = [count(builder.source_block(Source(99, h))) + 2 for h in hits]
        plan = plan_budget(
            window=self.generator.max_model_len,
            max_tokens=max_tokens,
            system_tokens=count(builder.system([], not_found)) + MESSAGE_OVERHEAD,
            question_tokens=count(question) + MESSAGE_OVERHEAD,
            source_tokens=source_tokens,
            history_tokens=[count(t.content) + MESSAGE_OVERHEAD for t in history],
            history_share=self.config.history_share,
        )
        admitted = [hits[i] for i in plan.sources]
        kept = [history[i] for i in plan.history]
        window = self.generator.max_model_len
        while admitted:  # counts above are per part; the rendered template is the final word
            sources = canonical_order(admitted)
            token_ids = self.generator.render(builder.messages(sources, kept, question, not_found))
            if len(token_ids) + max_tokens <= window:
                return PreparedPrompt(token_ids, tuple(sources), max_tokens, cache_salt(tenant))
            admitted.pop()
        needed = plan.prompt_tokens + (0 if plan.sources else min(source_tokens))
        raise ContextLengthError(
            f"this model's maximum context length is {window} tokens, but the question with "
            f"one source and {max_tokens} tokens for the answer needs {needed + max_tokens}; "
            "shorten the question or lower max_tokens"
        )

    async def answer(
        self,
        tenant: str,
        question: str,
        history: Sequence[Turn] = (),
        max_tokens: int | None = None,
        request_id: str = "",
        search_filter: SearchFilter | None = None,
    ) -> Answer:
        prepared = self.prepare(tenant, question, history, max_tokens, search_filter)
        if prepared is None:
            return Answer(not_found_message(question), (), (), abstained=True)
        parts: list[str] = []
        last = None
        async for chunk in self.generator.stream(
            prepared.token_ids,
            max_tokens=prepared.max_tokens,
            cache_salt=prepared.cache_salt,
            request_id=request_id,
        ):
            parts.append(chunk.text)
            last = chunk
        checked = check_citations("".join(parts).strip(), prepared.sources)
        usage = (
            Usage(last.prompt_tokens, last.cached_tokens, last.completion_tokens)
            if last
            else Usage()
        )
        return Answer(
            text=checked.text,
            cited=checked.cited,
            sources=prepared.sources,
            abstained=False,
            invalid_citations_removed=checked.invalid_removed,
            usage=usage,
            finish_reason=last.finish_reason if last else None,
        )
