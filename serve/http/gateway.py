"""The service every API route goes through (serve/http/routes/): the caller's key, budgets and
fair admission, the one answering path (chat completions and responses), accounting and
metrics, and the handles of the deployments. Routes translate between OpenAI's shapes and this;
the policy lives here, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import Request

from index.errors import GroundedError, InvalidRequestError
from index.store.collections import VectorStoreCatalog
from serve.accounting.budgets import BudgetTooSmallError, Ledger, request_caps
from serve.accounting.fairness import FairQueue
from serve.config import AppConfig
from serve.http.api import ModelNotFoundError
from serve.identity.audit import AuditEntry, AuditLog
from serve.identity.caller import Caller
from serve.identity.keys import KeyStore
from serve.identity.oidc import Authenticator
from serve.metrics import metrics
from serve.query.admission import Grant, Usage
from serve.query.generation import GeneratorUnavailableError
from serve.query.pipeline import Answer, QueryOptions, QueryPipeline
from serve.query.prompt import Turn
from serve.query.retrieval import SearchFilter
from serve.query.routing import MODEL_ID
from serve.shards.tenant import TenantShards
from serve.state.database import off_loop
from serve.state.response_store import ResponseStore, response_not_found


@dataclasses.dataclass(frozen=True, slots=True)
class Asked:
    """An answer under way: the answer itself (not streaming) or its first text delta, the
    rest of the stream, ``finish`` (metrics and accounting of the answer; returns its cost)
    and ``on_end`` (accounts a stream that ended without an answer)."""

    first: Any
    stream: AsyncIterator[str | Answer]
    finish: Callable[[Answer], Awaitable[dict[str, Any]]]
    on_end: Callable[[Answer | None], Awaitable[None]]


async def _final(stream) -> Answer:
    async for item in stream:
        if isinstance(item, Answer):
            return item
    raise GeneratorUnavailableError("the query pipeline ended without an answer")


class Gateway:
    """``generator``: its tokenizer (counts); ``embed(texts)``: (vectors, tokens) from the
    embedder; ``tenant_shards(tenant)``: that tenant's shard (serve/shards/tenant.py)."""

    def __init__(
        self,
        config: AppConfig,
        keys: Authenticator | KeyStore,
        pipeline: QueryPipeline,
        generator,
        embed: Callable[[list[str]], Awaitable[tuple[np.ndarray, int]]],
        tenant_shards: Callable[[str], TenantShards],
    ) -> None:
        self.config, self.keys, self.pipeline = config, keys, pipeline
        self.generator, self._embed, self.tenant_shards = generator, embed, tenant_shards
        # The answering models by the names requests use, and the model each runs.
        self.models = {name: c.model or "" for name, c in config.generator.configs().items()}
        # The name /v1/models lists the embedder under, and /v1/embeddings accepts.
        self.embedding_model = Path(config.index.embedder.model).name
        self.responses = ResponseStore(config.data_dir, config.state)
        self.audit = AuditLog(config.data_dir, config.audit, state=config.state)
        prices = {name: e.prices for name, e in config.generator.models.items() if e.prices}
        self.ledger = Ledger(config.data_dir, config.budgets, model_prices=prices,
                             state=config.state)  # fmt: skip
        serve = config.serve  # fair admission per generator: each has its own engine
        self.fair = {
            name: FairQueue(serve.generation_slots, serve.queue_per_tenant, serve.prefill_slots)
            for name in self.models
        }

    def caller(self, request: Request, scope: str) -> Caller:
        """Who is asking (the identity the guard checked before the body was read), with
        ``scope``: built once per request (serve/http/routes/__init__.py)."""
        identity = getattr(request.state, "api_key", None)
        if identity is None:
            identity = self.keys.authenticate(request.headers.get("authorization"))
        identity.require(scope)
        return Caller.asking(identity, getattr(request.state, "request_id", ""))

    def scoped(self, caller: Caller, options: QueryOptions) -> QueryOptions:
        """``options`` as the caller: the shards search only what it may read (filtered
        before ranking, not after); every search of the API goes through here."""
        narrowed = dataclasses.replace(
            options.search_filter or SearchFilter(), readable_by=caller.reader
        )
        return dataclasses.replace(options, search_filter=narrowed)

    async def stored_response(
        self, caller: Caller, response_id: str, part: str
    ) -> tuple[Any, list[str]]:
        """(``part`` of a stored response, the documents it quoted): read by its creator (or
        an admin), and only while the caller may still read every document it quoted (a
        group lost since, a list changed, a document deleted: 404, as for any absent id)."""
        value, documents = await off_loop(
            self.responses.read, caller.tenant, caller.owner, response_id, part
        )
        if documents:
            readable = await self.shards_for(caller.tenant).readable(caller.reader, documents)
            if readable != set(documents):
                raise response_not_found(response_id)
            await self.record(caller, f"responses.{part}", None, documents)
        return value, documents

    def shards_for(self, tenant: str) -> TenantShards:
        """``tenant``'s shard: the Shards deployment, routed to the replica holding it."""
        return self.tenant_shards(tenant)

    def model_for(self, requested: str) -> str | None:
        """The model a request names: None for ``grounded`` (routed where there are several),
        else one of ``generator.models``; anything else is 404 model_not_found."""
        if requested == MODEL_ID:
            return None
        if requested in self.models:
            return requested
        names = ", ".join(repr(name) for name in (MODEL_ID, *self.models) if name != MODEL_ID)
        hint = f" (routed), or one of {names}" if names else ""
        if requested == self.embedding_model:
            raise ModelNotFoundError(
                f"{requested!r} is the embedding model (POST /v1/embeddings); answers come "
                f"from {MODEL_ID!r}{hint}"
            )
        raise ModelNotFoundError(
            f"the model {requested!r} does not exist; use {MODEL_ID!r}{hint} (GET /v1/models "
            "lists them)"
        )

    def admission(self, caller: Caller, grants: list[Grant]):
        """Budgets (reserve prompt + max_tokens in the shared ledger), then a fair slot at the
        model's generator: for the answer, and for the generator's work before it (condensing,
        the generator reranker)."""

        @contextlib.asynccontextmanager
        async def admit(tokens: int, model: str):
            lease = await off_loop(
                self.ledger.reserve, caller.tenant, caller.id, caller.limits, tokens
            )
            grant = Grant(model=model)
            try:
                async with self.fair[model].slot(caller.tenant) as turn:
                    grant.run = turn.run
                    grants.append(grant)
                    try:
                        yield grant
                    finally:
                        m = metrics()
                        m.add(m.tenant_preemptions, turn.preemptions, {"tenant": caller.tenant})
            finally:
                used = grant.usage.prompt_tokens + grant.usage.completion_tokens
                await off_loop(self.ledger.settle, lease, used)

        return admit

    def caps(self, caller: Caller, asked: int | None) -> tuple[int, int | None]:
        """max_tokens and the prompt cap of a request that ``asked`` for that many answer
        tokens (or left it to the default), from the tenant's and caller's budgets."""
        prompt_cap, completion_cap = request_caps(
            self.config.budgets.for_tenant(caller.tenant), caller.limits
        )
        if asked is not None and completion_cap is not None and asked > completion_cap:
            raise BudgetTooSmallError(
                f"max_tokens {asked} is above your budget max_completion_tokens = "
                f"{completion_cap} (the tenant's or this key's); ask for at most "
                f"{completion_cap}",
                reason="max_completion_tokens",
            )
        default = self.config.generator.max_tokens
        return asked or min(default, completion_cap or default), prompt_cap

    async def account(self, caller: Caller, answer: Answer | None, grants: list[Grant]) -> dict:
        """Record one request in the ledger (in a thread: SQLite off the event loop) and the
        per-tenant metrics, by model; returns its cost."""
        if answer is not None:
            by_model = answer.model_usage or {answer.route.model: answer.usage}
        else:  # cancelled: what the generations admitted so far used
            by_model = {}
            for grant in grants:
                by_model[grant.model] = by_model.get(grant.model, Usage()) + grant.usage
        outcome = "cancelled" if answer is None else "abstained" if answer.abstained else "answered"
        cost = await off_loop(
            self.ledger.record, caller.tenant, caller.id, outcome, models=by_model
        )
        m, tags = metrics(), {"tenant": caller.tenant, "key": caller.id}
        m.tenant_requests.inc(tags={**tags, "outcome": outcome, "reason": ""})
        for model, usage in by_model.items():
            tagged = {**tags, "model": model}
            m.add(m.tenant_tokens, usage.prompt_tokens, {**tagged, "kind": "prompt"})
            m.add(m.tenant_tokens, usage.cached_tokens, {**tagged, "kind": "cached_prompt"})
            m.add(m.tenant_tokens, usage.completion_tokens, {**tagged, "kind": "completion"})
            m.add(m.tenant_cost, self.ledger.cost(usage, model), tagged)
        return {"amount": round(cost, 8), "currency": self.config.budgets.prices.currency}

    async def refused(self, caller: Caller, exc: GroundedError) -> None:
        reason = getattr(exc, "reason", None)
        if reason is None:
            return
        await off_loop(self.ledger.record, caller.tenant, caller.id, "refused", reason=reason)
        metrics().tenant_requests.inc(
            tags={
                "tenant": caller.tenant,
                "key": caller.id,
                "outcome": "refused",
                "reason": reason,
            }
        )

    async def ask(
        self,
        caller: Caller,
        question: str,
        history: list[Turn],
        asked_tokens: int | None,
        options: QueryOptions,
        request_id: str,
        *,
        streaming: bool,
        endpoint: str = "chat.completions",
        model: str | None = None,
    ) -> Asked:
        """The one answering path of the API (chat completions and responses): the budget's
        caps, then the pipeline under admission (budgets, a fair slot). Refusals (budgets, the
        queue, the prompt) raise here, before anything is sent, so they become a 4xx."""
        grants: list[Grant] = []
        try:
            tokens, prompt_cap = self.caps(caller, asked_tokens)
            options = dataclasses.replace(
                self.scoped(caller, options), max_prompt_tokens=prompt_cap
            )
            # The engine's request id is the server's own: vLLM aborts by id, so a client's
            # X-Request-Id reused by another caller must never reach it.
            engine_id = f"{request_id}-{uuid.uuid4().hex[:12]}"
            stream = self.pipeline.stream(
                caller.tenant, question, history, tokens, engine_id, options,
                admit=self.admission(caller, grants), model=model, live=streaming,
            )  # fmt: skip
            first = await anext(stream) if streaming else await _final(stream)
        except GroundedError as exc:
            await self.refused(caller, exc)
            raise
        except asyncio.CancelledError:  # the client went away; account what was generated
            if grants:
                await self.account(caller, None, grants)
            raise

        async def finish(answer: Answer) -> dict[str, Any]:
            self.observe(answer)
            shown = [s.hit.doc_id for s in answer.sources]
            await self.record(caller, endpoint, question, shown, answer)
            return await self.account(caller, answer, grants)

        async def on_end(answer: Answer | None) -> None:
            if answer is None:  # cancelled or failed: account what was generated
                await self.account(caller, None, grants)

        return Asked(first, stream, finish, on_end)

    async def record(
        self,
        caller: Caller,
        endpoint: str,
        question: str | None,
        shown: Sequence[str],
        answer: Answer | None = None,
    ) -> None:
        """One audit entry (serve/identity/audit.py): ``shown``, the ids of the documents the caller
        was given; ``answer``, the Answer when there is one (what it cited, if it
        abstained)."""
        doc_ids = tuple(shown)
        cited = tuple(c.source.hit.doc_id for c in answer.cited) if answer is not None else ()
        entry = AuditEntry(
            caller.tenant, caller.identity, caller.id, caller.groups, endpoint, question,
            doc_ids, cited, answer.abstained if answer is not None else None,
        )  # fmt: skip
        await off_loop(self.audit.append, entry)

    def observe(self, answer: Answer) -> None:
        m, route = metrics(), answer.route
        m.record_stages(answer.timings)
        for model, usage in (answer.model_usage or {route.model: answer.usage}).items():
            m.add(m.tokens, usage.prompt_tokens, {"kind": "prompt", "model": model})
            m.add(m.tokens, usage.cached_tokens, {"kind": "cached_prompt", "model": model})
            m.add(m.tokens, usage.completion_tokens, {"kind": "completion", "model": model})
        m.routes.inc(tags={"model": route.model, "decision": route.decision,
                           "reason": route.reason or ""})  # fmt: skip
        if answer.abstained:
            m.abstentions.inc(tags={"by": "model" if answer.sources else "gate"})
        m.add(m.invalid_citations, answer.invalid_citations_removed)

    async def stores_filter(
        self, caller: Caller, store_ids: list[str], filters: dict[str, Any] | None
    ) -> tuple[SearchFilter | None, dict[str, dict[str, Any]]]:
        """Retrieval narrowed to the caller's vector stores: the documents that are members
        of any of them and whose membership attributes pass ``filters`` (OpenAI's comparison
        and compound filters), with those attributes. ``vs_<tenant>`` is the tenant's whole
        document set (no narrowing), which has no attributes to filter on."""
        tenant = caller.tenant
        alias = f"vs_{tenant}"
        if alias in store_ids or tenant in store_ids:
            if filters is not None:
                raise InvalidRequestError(
                    f"filters select vector store files by their attributes, and {alias} (every "
                    "document of the tenant) has none: search a vector store you created",
                    param="filters",
                )
            return None, {}
        members = await self.shards_for(tenant).catalog(
            caller.reader, VectorStoreCatalog.matching_members, store_ids, filters
        )
        return SearchFilter(doc_ids=tuple(members)), members

    async def embed(self, caller: Caller, texts: list[str]):
        """Embeddings under the caller's budgets: reserved with the generator's tokenizer (an
        estimate made before the embedder runs); charged and recorded as the embedder's own
        count, the usage the response reports. Returns (vectors, tokens)."""
        reserved = sum(self.generator.count(text) for text in texts)
        try:
            lease = await off_loop(
                self.ledger.reserve, caller.tenant, caller.id, caller.limits, reserved
            )
        except GroundedError as exc:
            await self.refused(caller, exc)
            raise
        tokens = 0
        try:
            vectors, tokens = await self._embed(texts)
        finally:
            await off_loop(self.ledger.settle, lease, tokens)
        await off_loop(self.ledger.record, caller.tenant, caller.id, "embedded", prompt=tokens)
        return vectors, tokens
