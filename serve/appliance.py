"""The appliance: Ray Serve deployments around the plain-Python stages, bound by build_app.

    Ingress (FastAPI, OpenAI surface, keys, token budget, prompt)
      -> Embedder   (query embeddings: @serve.batch + LRU cache; document embeddings)
      -> Shards     (tenant shards multiplexed by tenant id, LRU; search, ingest, files)
      -> Generator  (vLLM AsyncLLM, prefix caching, streaming, yes/no judge for reranking)

The ingress holds the generator's tokenizer (not its engine), so budgets and prompts are
computed in front of the generator (DESIGN.md decision 10). The tenant comes from the API key
alone; every shard call carries it as the multiplexed model id.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException

from index.errors import DocumentNotFoundError, GroundedError, InvalidRequestError
from index.pipeline import SourceFile
from index.service import IndexService
from index.store.shard import TenantShard
from index.types import SearchHit
from serve import api, openapi
from serve.budgets import BudgetTooSmallError, Ledger, request_caps
from serve.config import AppConfig
from serve.fairness import FairQueue
from serve.generator import (
    ChatTokenizer,
    EngineStats,
    GenerationChunk,
    GeneratorUnavailableError,
    VllmGenerator,
)
from serve.guard import RequestGuard
from serve.keys import ApiKey, KeyStore
from serve.metrics import metrics
from serve.models import resolve_model
from serve.query.admission import Grant, Usage
from serve.query.pipeline import Answer, QueryOptions, QueryPipeline
from serve.query.retrieval import PrecomputedQuery, SearchParams, search_shard
from serve.query_cache import QueryEmbeddingCache
from serve.streaming import chat_events
from serve.tracing import setup_tracing

log = logging.getLogger("grounded")


# --- Embedder ---------------------------------------------------------------------------


@serve.deployment
class Embedder:
    """Query embeddings batched across concurrent requests, with an LRU cache keyed by tenant,
    model id and whitespace-normalised text; document embeddings for ingestion."""

    def __init__(self, config: AppConfig) -> None:
        from index.embedding import SentenceTransformerEmbedder

        self.embedder = SentenceTransformerEmbedder(config.index.embedder).start()
        self.cache = QueryEmbeddingCache(config.serve.embed_cache_size)
        self._embed_batch.set_max_batch_size(config.serve.embed_batch_size)
        self._embed_batch.set_batch_wait_timeout_s(config.serve.embed_batch_wait_s)

    def info(self) -> dict[str, Any]:
        e = self.embedder
        return {"model_id": e.model_id, "dimension": e.dimension, "path": str(e.path),
                "max_tokens": e.max_tokens}  # fmt: skip

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def _embed_batch(self, texts: list[str]) -> list[np.ndarray]:
        return list(await asyncio.to_thread(self.embedder.embed_queries, texts))

    async def embed_query(self, text: str, tenant: str) -> np.ndarray:
        """Cached per tenant: a hit's speed would otherwise tell one tenant what another asked."""
        key = QueryEmbeddingCache.key(tenant, self.embedder.model_id, text)
        if (vector := self.cache.get(key)) is not None:
            metrics().embed_cache.inc(tags={"result": "hit"})
            return vector
        metrics().embed_cache.inc(tags={"result": "miss"})
        vector = await self._embed_batch(key[2])
        self.cache.put(key, vector)
        return vector

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.embedder.embed_documents, texts)

    async def embed(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """/v1/embeddings: vectors and the number of input tokens."""
        tokens = sum(self.embedder.tokenizer.count(t) for t in texts)
        return await asyncio.to_thread(self.embedder.embed_documents, texts), tokens


class HandleEmbedder:
    """The DocumentEmbedder the shard replicas ingest with: the embedder deployment does the
    work; the tokenizer (for chunking) is loaded locally from the same model folder."""

    def __init__(self, handle, info: dict[str, Any], chunk_tokenizer) -> None:
        self.handle = handle
        self.model_id = info["model_id"]
        self.dimension = info["dimension"]
        self.max_tokens = info["max_tokens"]
        self.tokenizer = chunk_tokenizer

    def start(self) -> HandleEmbedder:
        return self

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        # Called from the ingest thread (never the replica's event loop), so blocking is fine.
        return self.handle.embed_documents.remote(list(texts)).result()


# --- Shards -----------------------------------------------------------------------------


@serve.deployment
class Shards:
    """Tenant shards, loaded on demand per tenant (Serve model multiplexing, LRU eviction).
    Writes for a tenant go through the replica that holds its shard, so its readers see them;
    SQLite stays the source of truth across replicas (a shard notices another writer's
    commits and reloads its vectors)."""

    def __init__(self, config: AppConfig, embedder) -> None:
        self.config = config
        self.embedder = embedder
        self.service: IndexService | None = None
        self.loaded: weakref.WeakValueDictionary[str, TenantShard] = weakref.WeakValueDictionary()

        # LRU of open shards per replica; the size comes from config, so wrap at run time.
        async def load(tenant: str) -> TenantShard:  # Serve marks the function it wraps
            return await self._load_shard(tenant)

        self.get_shard = serve.multiplexed(
            max_num_models_per_replica=config.serve.shards_per_replica
        )(load)

    async def _service(self) -> IndexService:
        if self.service is None:
            from transformers import AutoTokenizer

            from index.embedding import HFTokenCounter

            info = await self.embedder.info.remote()
            tokenizer = HFTokenCounter(AutoTokenizer.from_pretrained(info["path"]))
            remote = HandleEmbedder(self.embedder, info, tokenizer)
            self.service = IndexService(self.config.index, self.config.data_dir, embedder=remote)
            self.service.start()
        return self.service

    async def _load_shard(self, tenant: str) -> TenantShard:
        service = await self._service()
        shard = TenantShard(
            service.tenants.path_for(tenant), tenant, service.manifest, service.config.vectors
        )
        await asyncio.to_thread(shard.start)
        self.loaded[tenant] = shard  # evicted shards drop out when collected
        metrics().shards_loaded.set(len(self.loaded))
        metrics().shard_chunks.set(shard.stats().chunks, tags={"tenant": tenant})
        return shard

    async def _shard(self) -> TenantShard:
        return await self.get_shard(serve.get_multiplexed_model_id())

    async def search(
        self, query: str, vector: np.ndarray | None, k: int, params: SearchParams
    ) -> list[tuple[SearchHit, float]]:
        shard = await self._shard()
        return await asyncio.to_thread(
            search_shard, shard, PrecomputedQuery(vector), query, k, params
        )

    async def ingest(self, file_name: str, data: bytes, attributes: dict[str, str]):
        shard, service = await self._shard(), await self._service()
        tenant = serve.get_multiplexed_model_id()

        def work():
            from index.pipeline import IngestPipeline

            pipeline = IngestPipeline(shard, service.embedder, service.chunker,
                                      service.config.limits,
                                      batch_chunks=service.config.ingest_batch_chunks)  # fmt: skip
            source = SourceFile.from_bytes(
                data, file_name, source=f"upload:{tenant}:{file_name}", attributes=attributes
            )
            [result] = list(pipeline.ingest([source]))
            record = shard.get_document(result.doc_id) if result.doc_id else None
            return result, record

        result, record = await asyncio.to_thread(work)
        metrics().shard_chunks.set(shard.stats().chunks, tags={"tenant": tenant})
        return result, record

    async def files(self):
        shard = await self._shard()
        return await asyncio.to_thread(shard.list_documents)

    async def placement(self) -> dict[str, Any]:
        """Where the calling tenant's shard is served: this replica's Ray node and the tenants
        it holds open (for operators and the multi-node test)."""
        import ray

        await self._shard()
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "replica": serve.get_replica_context()
                .replica_id.unique_id, "tenants": sorted(self.loaded)}  # fmt: skip

    async def file(self, doc_id: str):
        shard = await self._shard()
        return await asyncio.to_thread(shard.get_document, doc_id)

    async def text(self, doc_id: str) -> str:
        shard = await self._shard()
        return await asyncio.to_thread(shard.document_text, doc_id)

    async def delete(self, doc_id: str) -> None:
        shard = await self._shard()
        await asyncio.to_thread(shard.delete_document, doc_id)

    async def attributes(self, doc_ids: list[str]) -> dict[str, dict[str, str]]:
        shard = await self._shard()
        records = await asyncio.to_thread(shard.list_documents)
        wanted = set(doc_ids)
        return {r.doc_id: r.attributes for r in records if r.doc_id in wanted}


class RemoteSearcher:
    """The query pipeline's Searcher in the appliance: embedder deployment, then the shard
    deployment with the tenant as multiplexed id."""

    def __init__(self, embedder, shards) -> None:
        self.embedder, self.shards = embedder, shards

    async def search(
        self, tenant: str, query: str, k: int, params: SearchParams
    ) -> list[tuple[SearchHit, float]]:
        vector = None
        if params.mode != "lexical":
            started = time.perf_counter()
            vector = await self.embedder.embed_query.remote(query, tenant)
            metrics().stage.observe(time.perf_counter() - started, tags={"stage": "embed"})
        shards = self.shards.options(multiplexed_model_id=tenant)
        return await shards.search.remote(query, vector, k, params)


# --- Reranker ---------------------------------------------------------------------------


@serve.deployment
class Reranker:
    """The cross-encoder reranker (query.rerank.backend: cross-encoder); CUDA when present."""

    def __init__(self, config: AppConfig) -> None:
        from serve.query.rerank import cross_encoder

        rerank = config.query.rerank
        self.reranker = cross_encoder(rerank.model, rerank.device, rerank.batch_size)
        self.reranker.start()

    async def scores(self, query: str, passages: list[str], cache_salt: str = "") -> list[float]:
        return await self.reranker.scores(query, passages, cache_salt)


class RemoteReranker:
    def __init__(self, handle) -> None:
        self.handle = handle

    async def scores(self, query: str, passages: Sequence[str], cache_salt: str) -> list[float]:
        return await self.handle.scores.remote(query, list(passages), cache_salt)


# --- Generator --------------------------------------------------------------------------


@serve.deployment
class Generator:
    """vLLM's AsyncLLM (prefix caching on); exports the engine's counters as metrics."""

    def __init__(self, config: AppConfig, model_folder: str) -> None:
        settings = config.generator.model_copy(update={"model": model_folder})
        self.generator = VllmGenerator(settings).start()
        self._exported = EngineStats()
        self._task: asyncio.Task | None = None

    def _export(self) -> None:
        stats, m = self.generator.stats(), metrics()
        m.kv_cache_usage.set(stats.kv_cache_usage)
        m.running.set(stats.running_requests, tags={"state": "running"})
        m.running.set(stats.waiting_requests, tags={"state": "waiting"})
        m.add(m.prefix_queries, stats.prefix_cache_queries - self._exported.prefix_cache_queries)
        m.add(m.prefix_hits, stats.prefix_cache_hits - self._exported.prefix_cache_hits)
        self._exported = stats

    async def _export_forever(self) -> None:
        while True:  # Ray drops a gauge a few report intervals after its last set()
            self._export()
            await asyncio.sleep(2.0)

    def _ensure_exporting(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._export_forever())

    async def stream(
        self, token_ids: list[int], max_tokens: int, cache_salt: str, request_id: str,
        priority: int = 0, json_schema: dict | None = None,
    ) -> AsyncIterator[GenerationChunk]:  # fmt: skip
        self._ensure_exporting()
        async for chunk in self.generator.stream(
            token_ids, max_tokens=max_tokens, cache_salt=cache_salt, request_id=request_id,
            priority=priority, json_schema=json_schema,
        ):  # fmt: skip
            yield chunk
        self._export()

    async def next_token_logprobs(
        self, token_ids: list[int], allowed_token_ids: list[int], cache_salt: str
    ) -> dict[int, float]:
        return await self.generator.next_token_logprobs(
            token_ids, allowed_token_ids=allowed_token_ids, cache_salt=cache_salt
        )

    def check_health(self) -> None:
        if not self.generator.health():
            raise RuntimeError("the vLLM engine has failed")


class RemoteGenerator:
    """The query pipeline's Generator in the ingress: the tokenizer here, the engine there."""

    def __init__(self, tokenizer: ChatTokenizer, handle, max_model_len: int) -> None:
        self.tokenizer, self.handle, self.max_model_len = tokenizer, handle, max_model_len

    @property
    def special_tokens(self) -> list[str]:
        return self.tokenizer.special_tokens

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def count(self, text: str) -> int:
        return self.tokenizer.count(text)

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        return self.tokenizer.render(messages)

    async def stream(
        self,
        token_ids: list[int],
        *,
        max_tokens: int,
        cache_salt: str,
        request_id: str = "",
        priority: int = 0,
        json_schema: dict | None = None,
    ) -> AsyncIterator[GenerationChunk]:
        response = self.handle.options(stream=True).stream.remote(
            token_ids, max_tokens, cache_salt, request_id or uuid.uuid4().hex, priority,
            json_schema,
        )  # fmt: skip
        finished = False
        try:
            async for chunk in response:
                finished = chunk.finish_reason is not None
                yield chunk
        finally:
            if not finished:  # the client went away: the replica's stream aborts the request
                response.cancel()

    async def next_token_logprobs(
        self, token_ids: list[int], *, allowed_token_ids: Sequence[int], cache_salt: str
    ) -> dict[int, float]:
        return await self.handle.next_token_logprobs.remote(
            token_ids, list(allowed_token_ids), cache_salt
        )


# --- Ingress ----------------------------------------------------------------------------

app = FastAPI(
    title="Grounded",
    description="Answers from your own documents, with checked citations (OpenAI-compatible).",
)
openapi.install(app)


@app.exception_handler(GroundedError)
async def _grounded_error(request: Request, exc: GroundedError) -> JSONResponse:
    # Raised in another deployment, it arrives wrapped (a RayTaskError that is also an
    # instance of the original class); answer with the original.
    cause = getattr(exc, "cause", None)
    if isinstance(cause, GroundedError):
        exc = cause
    return api.error_response(exc)


@app.exception_handler(RequestValidationError)
async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    if first.get("type") == "json_invalid":
        return api.error_response(InvalidRequestError("the request body is not valid JSON"))
    field = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
    message = first["msg"].removeprefix("Value error, ")
    return api.error_response(InvalidRequestError(f"{field}: {message}", param=field))


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Unknown paths and methods answer with OpenAI's error object too."""
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}; the API is described at /docs"
    else:
        message = f"{request.method} {request.url.path}: {exc.detail}"
    error = InvalidRequestError(message)
    error.status = exc.status_code
    return api.error_response(error)


def _replica_failed(exc: BaseException) -> bool:
    """A deployment's replica died or is restarting (Serve brings it back)."""
    from ray.exceptions import ActorUnavailableError, RayActorError

    return isinstance(exc, RayActorError | ActorUnavailableError)


@app.middleware("http")
async def _request_id(request: Request, call_next):
    request_id = request.headers.get("x-request-id") or "req-" + uuid.uuid4().hex[:24]
    request.state.request_id = request_id
    started = time.perf_counter()
    try:
        guard: RequestGuard | None = getattr(request.app.state, "guard", None)
        if guard is not None:  # the key and the size, before the body is read
            request.state.api_key = guard.check(request.method, request.url.path, request.headers)
        response = await call_next(request)
    except GroundedError as exc:
        response = api.error_response(exc, request_id)
    except Exception as exc:  # unexpected: logged with the id, never a traceback to clients
        log.exception("request %s %s failed", request_id, request.url.path)
        error = GroundedError(f"internal error; see the server log for request {request_id}")
        if _replica_failed(exc):
            error = GeneratorUnavailableError(
                f"a server component is restarting; retry shortly (request {request_id})"
            )
            error.retry_after = 5
        response = api.error_response(error, request_id)
    # A bounded label: the route's template, never the raw path (a scanner's random paths).
    route = request.scope.get("route")
    label = route.path if route is not None else "unmatched"
    metrics().requests.inc(tags={"route": label, "status": str(response.status_code)})
    metrics().latency.observe(time.perf_counter() - started, tags={"route": label})
    log.info("%s %s %s %d", request_id, request.method, label, response.status_code)
    return response


async def _final(stream) -> Answer:
    async for item in stream:
        if isinstance(item, Answer):
            return item
    raise GeneratorUnavailableError("the query pipeline ended without an answer")


@serve.deployment
@serve.ingress(app)
class Ingress:
    def __init__(
        self, config: AppConfig, model_folder: str, embedder, shards, generator, reranker=None
    ):
        self.config = config
        setup_tracing(config.serve.tracing)
        self.keys = KeyStore(config.data_dir)
        app.state.guard = RequestGuard(self.keys, config.index.limits.max_bytes)
        self.embedder, self.shards = embedder, shards
        tokenizer = ChatTokenizer.from_folder(model_folder)
        self.generator = RemoteGenerator(tokenizer, generator, config.generator.max_model_len)
        searcher = RemoteSearcher(embedder, shards)
        remote = RemoteReranker(reranker) if reranker is not None else None
        self.pipeline = QueryPipeline(searcher, self.generator, config.query, remote)
        self.model_name = config.generator.model or model_folder
        self.ledger = Ledger(config.data_dir, config.budgets)
        self.fair = FairQueue(
            config.serve.generation_slots, config.serve.queue_per_tenant, config.serve.prefill_slots
        )

    def _key(self, request: Request, scope: str) -> ApiKey:
        key = getattr(request.state, "api_key", None)  # the guard read it before the body
        if key is None:
            key = self.keys.authenticate(request.headers.get("authorization"))
        key.require(scope)
        return key

    def _tenant_shards(self, tenant: str):
        return self.shards.options(multiplexed_model_id=tenant)

    @app.get("/health", response_model=None, responses={200: {"model": openapi.Health}})
    async def health(self) -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models", response_model=None, responses=openapi.MODELS)
    async def models(self, request: Request) -> dict[str, Any]:
        self._key(request, "query")
        return api.models_list(self.model_name)

    def _admission(self, key: ApiKey, grants: list[Grant]):
        """Budgets (reserve prompt + max_tokens in the shared ledger), then a fair slot: for
        the answer, and for the generator's work before it (condensing, the generator
        reranker)."""

        @contextlib.asynccontextmanager
        async def admit(tokens: int):
            lease = await asyncio.to_thread(
                self.ledger.reserve, key.tenant, key.id, key.limits, tokens
            )
            grant = Grant()
            try:
                async with self.fair.slot(key.tenant) as turn:
                    grant.run = turn.run
                    grants.append(grant)
                    try:
                        yield grant
                    finally:
                        m = metrics()
                        m.add(m.tenant_preemptions, turn.preemptions, {"tenant": key.tenant})
            finally:
                used = grant.usage.prompt_tokens + grant.usage.completion_tokens
                await asyncio.to_thread(self.ledger.settle, lease, used)

        return admit

    def _caps(self, key: ApiKey, body: api.ChatRequest) -> tuple[int, int | None]:
        """max_tokens and the prompt cap of this request, from the tenant's and key's budgets."""
        prompt_cap, completion_cap = request_caps(
            self.config.budgets.for_tenant(key.tenant), key.limits
        )
        asked = body.answer_tokens()
        if asked is not None and completion_cap is not None and asked > completion_cap:
            raise BudgetTooSmallError(
                f"max_tokens {asked} is above your budget max_completion_tokens = "
                f"{completion_cap} (the tenant's or this key's); ask for at most {completion_cap}",
                reason="max_completion_tokens",
            )
        default = self.config.generator.max_tokens
        return asked or min(default, completion_cap or default), prompt_cap

    async def _account(self, key: ApiKey, answer: Answer | None, grants: list[Grant]) -> dict:
        """Record one request in the ledger (in a thread: SQLite off the event loop) and the
        per-tenant metrics; returns its cost."""
        usage = answer.usage if answer is not None else (grants[0].usage if grants else Usage())
        outcome = "cancelled" if answer is None else "abstained" if answer.abstained else "answered"
        cost = await asyncio.to_thread(
            self.ledger.record, key.tenant, key.id, outcome, prompt=usage.prompt_tokens,
            cached=usage.cached_tokens, completion=usage.completion_tokens,
        )  # fmt: skip
        m, tags = metrics(), {"tenant": key.tenant, "key": key.id}
        m.tenant_requests.inc(tags={**tags, "outcome": outcome, "reason": ""})
        m.add(m.tenant_tokens, usage.prompt_tokens, {**tags, "kind": "prompt"})
        m.add(m.tenant_tokens, usage.cached_tokens, {**tags, "kind": "cached_prompt"})
        m.add(m.tenant_tokens, usage.completion_tokens, {**tags, "kind": "completion"})
        m.add(m.tenant_cost, cost, tags)
        return {"amount": round(cost, 8), "currency": self.config.budgets.prices.currency}

    async def _refused(self, key: ApiKey, exc: GroundedError) -> None:
        reason = getattr(exc, "reason", None)
        if reason is None:
            return
        await asyncio.to_thread(self.ledger.record, key.tenant, key.id, "refused", reason=reason)
        metrics().tenant_requests.inc(
            tags={"tenant": key.tenant, "key": key.id, "outcome": "refused", "reason": reason}
        )

    @app.post("/v1/chat/completions", response_model=None, responses=openapi.CHAT)
    async def chat(self, request: Request, body: api.ChatRequest):
        key = self._key(request, "query")
        api.check_model(body.model)
        request_id = "chatcmpl-" + request.state.request_id.removeprefix("req-")
        created, files_url = api.now(), f"{request.base_url}v1/files"
        grants: list[Grant] = []
        try:
            tokens, prompt_cap = self._caps(key, body)
            options = dataclasses.replace(body.options(), max_prompt_tokens=prompt_cap)
            # The engine's request id is the server's own: vLLM aborts by id, so a client's
            # X-Request-Id reused by another caller must never reach it.
            engine_id = f"{request_id}-{uuid.uuid4().hex[:12]}"
            stream = self.pipeline.stream(
                key.tenant, body.question(), body.history(), tokens, engine_id, options,
                admit=self._admission(key, grants),
            )  # fmt: skip
            # Budgets, the queue and the prompt are settled before the first delta, so their
            # refusals become a 4xx here rather than a broken stream.
            first = await anext(stream) if body.stream else await _final(stream)
        except GroundedError as exc:
            await self._refused(key, exc)
            raise
        except asyncio.CancelledError:  # the client went away; account what was generated
            if grants:
                await self._account(key, None, grants)
            raise
        if not body.stream:
            self._observe(first)
            cost = await self._account(key, first, grants)
            return JSONResponse(api.chat_completion(first, request_id, created, files_url, cost))

        async def final_chunks(answer: Answer) -> list[dict[str, Any]]:
            self._observe(answer)
            cost = await self._account(key, answer, grants)
            return api.final_chunks(answer, request_id, created, body.include_usage(),
                                    files_url, cost)  # fmt: skip

        async def on_end(answer: Answer | None) -> None:
            if answer is None:  # cancelled or failed: account what was generated
                await self._account(key, None, grants)

        events = chat_events(first, stream, request_id=request_id, created=created,
                             final_chunks=final_chunks, on_end=on_end)  # fmt: skip
        return StreamingResponse(
            events, media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )  # fmt: skip

    def _observe(self, answer: Answer) -> None:
        m = metrics()
        m.record_stages(answer.timings)
        m.add(m.tokens, answer.usage.prompt_tokens, {"kind": "prompt"})
        m.add(m.tokens, answer.usage.cached_tokens, {"kind": "cached_prompt"})
        m.add(m.tokens, answer.usage.completion_tokens, {"kind": "completion"})
        if answer.abstained:
            m.abstentions.inc(tags={"by": "model" if answer.sources else "gate"})
        m.add(m.invalid_citations, answer.invalid_citations_removed)

    @app.post("/v1/embeddings", response_model=None, responses=openapi.EMBEDDINGS)
    async def embeddings(self, request: Request, body: api.EmbeddingRequest) -> dict[str, Any]:
        key = self._key(request, "query")
        texts = body.texts()
        # Reserved with the generator's tokenizer (an estimate made before the embedder runs);
        # charged and recorded as the embedder's own count, the usage the response reports.
        reserved = sum(self.generator.count(text) for text in texts)
        try:
            lease = await asyncio.to_thread(
                self.ledger.reserve, key.tenant, key.id, key.limits, reserved
            )
        except GroundedError as exc:
            await self._refused(key, exc)
            raise
        tokens = 0
        try:
            vectors, tokens = await self.embedder.embed.remote(texts)
        finally:
            await asyncio.to_thread(self.ledger.settle, lease, tokens)
        await asyncio.to_thread(self.ledger.record, key.tenant, key.id, "embedded", prompt=tokens)
        return api.embeddings(vectors, body.encoding_format, tokens, body.model)

    @app.post("/v1/files", response_model=None, responses=openapi.FILE)
    async def upload(
        self,
        request: Request,
        file: UploadFile = File(...),  # noqa: B008
        purpose: str = Form("assistants"),  # accepted as OpenAI clients send it; not used
    ) -> dict[str, Any]:
        key = self._key(request, "ingest")
        limit = self.config.index.limits.max_bytes
        data = await file.read(limit + 1)
        name = Path(file.filename or "").name
        if not name:
            raise InvalidRequestError("the upload has no file name", param="file")
        if len(data) > limit:
            error = InvalidRequestError(
                f"{name}: larger than the limit of {limit:,} bytes (index.limits.max_bytes)",
                param="file",
            )
            error.status = 413
            raise error
        result, record = await self._tenant_shards(key.tenant).ingest.remote(name, data, {})
        if result.status == "refused":
            raise api.refusal(result)
        return api.file_object(record)

    @app.get("/v1/files", response_model=None, responses=openapi.FILES)
    async def files(self, request: Request) -> dict[str, Any]:
        key = self._key(request, "query")
        records = await self._tenant_shards(key.tenant).files.remote()
        return {"object": "list", "data": [api.file_object(r) for r in records],
                "has_more": False}  # fmt: skip

    @app.get("/v1/files/{file_id}", response_model=None, responses=openapi.FILE)
    async def file(self, request: Request, file_id: str) -> dict[str, Any]:
        key = self._key(request, "query")
        return api.file_object(await self._file(key.tenant, file_id))

    @app.get(
        "/v1/files/{file_id}/content", response_class=PlainTextResponse, responses=openapi.TEXT
    )
    async def file_content(self, request: Request, file_id: str) -> PlainTextResponse:
        """The file's text as stored (extracted from PDF and HTML): citation URLs give character
        ranges of this text (``#char=start,end``)."""
        key = self._key(request, "query")
        await self._file(key.tenant, file_id)
        return PlainTextResponse(await self._tenant_shards(key.tenant).text.remote(file_id))

    async def _file(self, tenant: str, file_id: str):
        try:
            return await self._tenant_shards(tenant).file.remote(file_id)
        except DocumentNotFoundError:
            raise DocumentNotFoundError(f"no such file: {file_id}") from None

    @app.delete("/v1/files/{file_id}", response_model=None, responses=openapi.DELETED)
    async def delete(self, request: Request, file_id: str) -> dict[str, Any]:
        key = self._key(request, "ingest")
        await self._file(key.tenant, file_id)  # 404 for absent and other tenants' ids alike
        await self._tenant_shards(key.tenant).delete.remote(file_id)
        return {"id": file_id, "object": "file", "deleted": True}

    @app.post("/v1/vector_stores/{store_id}/search", response_model=None, responses=openapi.SEARCH)
    async def search(
        self, request: Request, store_id: str, body: api.SearchRequest
    ) -> dict[str, Any]:
        key = self._key(request, "query")
        if store_id not in (key.tenant, f"vs_{key.tenant}"):
            raise DocumentNotFoundError(
                f"no such vector store: {store_id}; yours is {key.tenant!r}",
                param="vector_store_id",
            )
        query = body.text()
        threshold = body.ranking_options.score_threshold if body.ranking_options else None
        options = QueryOptions(
            top_k=body.max_num_results, gate=False, score_threshold=threshold,
            search_filter=body.filters.search_filter() if body.filters else None,
        )  # fmt: skip
        # The generator reranker, when configured, is the generator's work: admitted.
        hits = await self.pipeline.retrieve(
            key.tenant, query, options, admit=self._admission(key, [])
        )
        attributes = await self._tenant_shards(key.tenant).attributes.remote(
            [h.doc_id for h in hits]
        )
        return api.search_page(body.query, [(h, api.score_of(h) or 0.0) for h in hits], attributes)


# --- The application --------------------------------------------------------------------


def _options(config: AppConfig, name: str, **extra) -> dict[str, Any]:
    options = config.serve.options(name)
    actor = {"num_cpus": options.num_cpus, "num_gpus": options.num_gpus}
    if options.resources:
        actor["resources"] = dict(options.resources)
    if extra.get("runtime_env"):
        actor["runtime_env"] = extra.pop("runtime_env")
    return {
        "num_replicas": options.num_replicas,
        "max_ongoing_requests": options.max_ongoing_requests,
        "ray_actor_options": actor,
        **extra,
    }


def generator_env(config: AppConfig) -> dict[str, str]:
    threads = config.serve.generator_threads or os.cpu_count() or 1
    env = {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "OMP_NUM_THREADS": str(threads),  # Ray sets 1 for fractional num_cpus
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    for name in ("VLLM_LOGGING_LEVEL", "VLLM_CACHE_ROOT", "VLLM_RPC_BASE_PATH",
                 "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_OMP_THREADS_BIND"):  # fmt: skip
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def build_app(config: AppConfig | dict | None = None):
    """The Serve application (also the import path of configs/serve.yaml: its args are the
    config file's fields, or {"config": PATH})."""
    from serve.config import load_config

    if config is None or isinstance(config, dict):
        args = dict(config or {})
        path = args.pop("config", None) or os.environ.get("GROUNDED_CONFIG")
        config = load_config(Path(path) if path else None, **args)
    model_folder = resolve_model(config.generator.model, config.data_dir)
    env = {"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}}
    embedder = Embedder.options(**_options(config, "embedder", runtime_env=env)).bind(config)
    shards = Shards.options(**_options(config, "shards", runtime_env=env)).bind(config, embedder)
    generator = Generator.options(
        **_options(config, "generator", runtime_env={"env_vars": generator_env(config)})
    ).bind(config, model_folder)
    reranker = None
    if config.query.rerank.backend == "cross-encoder":  # the generator judges in its own replica
        reranker = Reranker.options(**_options(config, "reranker", runtime_env=env)).bind(config)
    return Ingress.options(**_options(config, "ingress", runtime_env=env)).bind(
        config, model_folder, embedder, shards, generator, reranker
    )
