"""The appliance: Ray Serve deployments around the plain-Python stages, bound by build_app.

    Ingress (FastAPI: the routers of serve/routes/ over the Gateway, serve/gateway.py: keys,
             budgets, fair admission, accounting, the token budget and prompt)
      -> Embedder   (query embeddings: @serve.batch + LRU cache; document embeddings)
      -> Shards     (tenant shards multiplexed by tenant id, LRU; search, uploads and their
                     ingestion, files, the vector-store catalog)
      -> Generator  (vLLM AsyncLLM, prefix caching, streaming, yes/no judge for reranking)
      -> Reranker   (the relevance judge, when query.rerank.backend is cross-encoder)

The ingress holds the generator's tokenizer (not its engine), so budgets and prompts are
computed in front of the generator (DESIGN.md decision 10). The tenant comes from the API key
alone; every shard call carries it as the multiplexed model id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from ray import serve

from index.config import DEFAULT_EMBEDDER
from index.errors import (
    DocumentNotFoundError,
    EmbedderChangedError,
)
from index.pipeline import IngestResult, SourceFile, doc_id_for
from index.service import IndexService
from index.store.collections import VectorStoreCatalog
from index.store.shard import TenantShard
from index.store.uploads import Uploads
from index.types import SearchHit
from serve.app import create_app
from serve.config import AppConfig
from serve.gateway import Gateway
from serve.generator import ChatTokenizer, EngineStats, VllmGenerator
from serve.guard import RequestGuard
from serve.keys import KeyStore
from serve.metrics import metrics
from serve.models import resolve_model
from serve.query.generation import GenerationChunk
from serve.query.pipeline import QueryPipeline
from serve.query.retrieval import PrecomputedQuery, SearchParams, for_embedder, search_shard
from serve.query_cache import QueryEmbeddingCache
from serve.resources import deployment_options, engine_kwargs
from serve.tenant_shards import TenantShards, check_catalog_operation
from serve.tracing import setup_tracing

log = logging.getLogger("grounded")


# --- Embedder ---------------------------------------------------------------------------


@serve.deployment
class Embedder:
    """Query embeddings batched across concurrent requests, with an LRU cache keyed by tenant,
    model id and whitespace-normalised text; document embeddings for ingestion. Hosts every
    configured embedder (index.embedders), each loaded on first use; a call names its model
    by the model id a shard records (None: the default embedder)."""

    def __init__(self, config: AppConfig) -> None:
        from index.service import Embedders

        self.embedders = Embedders(config.index)
        self.embedders.get(DEFAULT_EMBEDDER)
        self.cache = QueryEmbeddingCache(config.serve.embed_cache_size)
        self._embed_batch.set_max_batch_size(config.serve.embed_batch_size)
        self._embed_batch.set_batch_wait_timeout_s(config.serve.embed_batch_wait_s)

    async def _model(self, model_id: str | None):
        if model_id is None:
            return self.embedders.get(DEFAULT_EMBEDDER)[0]
        return (await asyncio.to_thread(self.embedders.for_model, model_id))[0]

    async def info(self, model_id: str | None = None) -> dict[str, Any]:
        e = await self._model(model_id)
        return {"model_id": e.model_id, "dimension": e.dimension, "path": str(e.path),
                "max_tokens": e.max_tokens}  # fmt: skip

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def _embed_batch(self, requests: list[tuple[str, str]]) -> list[np.ndarray]:
        """(model id, text) pairs of concurrent requests, embedded one call per model."""
        vectors: list[np.ndarray | None] = [None] * len(requests)
        for model_id in dict.fromkeys(m for m, _ in requests):
            at = [i for i, (m, _) in enumerate(requests) if m == model_id]
            embedder = await self._model(model_id)
            texts = [requests[i][1] for i in at]
            for i, vector in zip(at, await asyncio.to_thread(embedder.embed_queries, texts),
                                 strict=True):  # fmt: skip
                vectors[i] = vector
        return vectors

    async def embed_query(self, text: str, tenant: str, model_id: str) -> np.ndarray:
        """Cached per tenant: a hit's speed would otherwise tell one tenant what another asked."""
        key = QueryEmbeddingCache.key(tenant, model_id, text)
        if (vector := self.cache.get(key)) is not None:
            metrics().embed_cache.inc(tags={"result": "hit"})
            return vector
        metrics().embed_cache.inc(tags={"result": "miss"})
        # Resolved (and loaded) before joining a batch: a model no embedder provides is refused
        # for this request alone, not for every query batched with it.
        await self._model(model_id)
        vector = await self._embed_batch((model_id, key[2]))
        self.cache.put(key, vector)
        return vector

    async def embed_documents(self, texts: list[str], model_id: str | None = None) -> np.ndarray:
        embedder = await self._model(model_id)
        return await asyncio.to_thread(embedder.embed_documents, texts)

    async def embed(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """/v1/embeddings (the default embedder): vectors and the number of input tokens."""
        embedder = await self._model(None)
        tokens = sum(embedder.tokenizer.count(t) for t in texts)
        return await asyncio.to_thread(embedder.embed_documents, texts), tokens


class HandleEmbedder:
    """A DocumentEmbedder the shard replicas ingest with: the embedder deployment does the
    work; the tokenizer (for chunking) is loaded locally from the same model folder.
    ``start()`` blocks on the deployment: call it from a thread, never the event loop."""

    def __init__(self, handle, config) -> None:
        from index.embedding import resolve_model as resolve_embedder

        self.handle = handle
        self.model_id = resolve_embedder(config.model)[0]
        self.dimension = self.max_tokens = 0
        self.tokenizer = None

    def start(self) -> HandleEmbedder:
        if self.tokenizer is None:
            from transformers import AutoTokenizer

            from index.embedding import HFTokenCounter

            info = self.handle.info.remote(self.model_id).result()
            self.dimension, self.max_tokens = info["dimension"], info["max_tokens"]
            self.tokenizer = HFTokenCounter(AutoTokenizer.from_pretrained(info["path"]))
        return self

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        # Called from the ingest thread (never the replica's event loop), so blocking is fine.
        return self.handle.embed_documents.remote(list(texts), self.model_id).result()


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
        self.ingesting: dict[tuple[str, str], asyncio.Task] = {}  # (tenant, file id) -> task

        # LRU of open shards per replica; the size comes from config, so wrap at run time.
        async def load(tenant: str) -> TenantShard:  # Serve marks the function it wraps
            return await self._load_shard(tenant)

        self.get_shard = serve.multiplexed(
            max_num_models_per_replica=config.serve.shards_per_replica
        )(load)

    async def _service(self) -> IndexService:
        if self.service is None:
            from index.service import Embedders
            from serve.query.instruction_judge import instruction_judge

            remote = Embedders(self.config.index, lambda c: HandleEmbedder(self.embedder, c))
            judge = instruction_judge(self.config.index.screen, self.config.query.rerank)
            service = IndexService(self.config.index, self.config.data_dir, embedders=remote,
                                   instruction_judge=judge)  # fmt: skip
            self.service = await asyncio.to_thread(service.start)
        return self.service

    async def _load_shard(self, tenant: str) -> TenantShard:
        service = await self._service()
        shard = await asyncio.to_thread(service.open_shard, tenant, create=True)
        self.loaded[tenant] = shard  # evicted shards drop out when collected
        for upload in await asyncio.to_thread(Uploads(shard).unfinished):
            if upload.status == "in_progress":  # interrupted by a restart: resumed here
                self._ingest_upload(shard, tenant, upload.doc_id)
        metrics().shards_loaded.set(len(self.loaded))
        metrics().shard_chunks.set(shard.stats().chunks, tags={"tenant": tenant})
        return shard

    async def _shard(self) -> TenantShard:
        return await self.get_shard(serve.get_multiplexed_model_id())

    async def embedder_model(self) -> str:
        """The model id the calling tenant's shard was built with (its queries need it)."""
        return (await self._shard()).manifest.embedder_model_id

    async def search(
        self,
        query: str,
        vector: np.ndarray | None,
        model_id: str | None,
        k: int,
        params: SearchParams,
    ) -> tuple[str, list[tuple[SearchHit, float]] | None]:
        """(the shard's model id, hits); no hits when ``vector`` came from another model (a
        reindex moved the shard meanwhile): the caller embeds again with the one named."""
        shard = await self._shard()
        params = for_embedder(params, self.service.dense_weight(shard))
        try:
            hits = await asyncio.to_thread(
                search_shard, shard, PrecomputedQuery(vector, model_id), query, k, params
            )
        except EmbedderChangedError:
            hits = None
        return shard.manifest.embedder_model_id, hits

    async def upload(self, file_name: str, data: bytes, wait_s: float):
        """Keep the upload, ingest it in the background (it may outlast the request, and a
        restart: see ``_load_shard``) and wait up to ``wait_s`` for it. Returns
        (IngestResult, DocumentRecord | None) when it ended in time (a refusal then leaves
        nothing behind: the client gets the error), or (None, UploadRecord) while it goes on."""
        shard, tenant = await self._shard(), serve.get_multiplexed_model_id()
        doc_id = doc_id_for(f"upload:{tenant}:{file_name}")
        uploads = Uploads(shard)
        await asyncio.to_thread(uploads.store, doc_id, file_name, data)
        task = self._ingest_upload(shard, tenant, doc_id)
        done, _ = await asyncio.wait({task}, timeout=wait_s)
        if not done:
            return None, await asyncio.to_thread(uploads.get, doc_id)
        result, record = task.result()
        if result.status == "refused":
            await asyncio.to_thread(uploads.forget, doc_id)
        return result, record

    def _ingest_upload(self, shard: TenantShard, tenant: str, doc_id: str) -> asyncio.Task:
        """The stored upload's ingestion, as a task of this replica; a newer upload of the
        same file waits for the one before it."""
        key, previous = (tenant, doc_id), self.ingesting.get((tenant, doc_id))

        async def run():
            if previous is not None:
                await asyncio.wait({previous})
            return await asyncio.to_thread(self._ingest_stored, shard, tenant, doc_id)

        task = asyncio.get_running_loop().create_task(run())
        self.ingesting[key] = task
        task.add_done_callback(lambda t: self.ingesting.get(key) is t and self.ingesting.pop(key))
        return task

    def _ingest_stored(self, shard: TenantShard, tenant: str, doc_id: str):
        uploads = Uploads(shard)
        pending = uploads.bytes_of(doc_id, pending=True)
        if pending is None:  # ingested by the task before it (the same bytes), or deleted
            try:
                record = shard.get_document(doc_id)
            except DocumentNotFoundError:
                return _deleted(doc_id, doc_id), None
            done = IngestResult(doc_id, record.file_name, "unchanged", doc_id, record.version,
                                record.chunk_count)  # fmt: skip
            return done, record
        file_name, data = pending
        pipeline = self.service.pipeline_for(shard)

        def deleted(doc_id: str) -> bool:  # asked while scans are read: OCR stops at once
            return not uploads.pending(doc_id)

        source = SourceFile.from_bytes(
            data, file_name, source=f"upload:{tenant}:{file_name}", doc_id=doc_id
        )
        try:
            try:
                [result] = list(pipeline.ingest([source], deleted))
            except EmbedderChangedError:  # a reindex moved the shard meanwhile: its new model
                [result] = list(self.service.pipeline_for(shard).ingest([source], deleted))
        except Exception as exc:  # kept with the reason; the caller sees the failure too
            uploads.finish(doc_id, f"ingestion failed ({type(exc).__name__}); upload it again",
                           data)  # fmt: skip
            raise
        if not uploads.pending(doc_id):  # deleted while it was ingested
            with contextlib.suppress(DocumentNotFoundError):
                shard.delete_document(doc_id)
            return _deleted(doc_id, file_name), None
        uploads.finish(doc_id, result.reason if result.status == "refused" else None, data)
        metrics().shard_chunks.set(shard.stats().chunks, tags={"tenant": tenant})
        return result, shard.get_document(doc_id) if result.status != "refused" else None

    async def files(self):
        """The tenant's documents, then the uploads not (yet) documents: being ingested, or
        refused (with the reason)."""
        shard = await self._shard()
        documents = await asyncio.to_thread(shard.list_documents)
        stored = {d.doc_id for d in documents}
        unfinished = await asyncio.to_thread(Uploads(shard).unfinished)
        return documents, [u for u in unfinished if u.doc_id not in stored]

    async def placement(self) -> dict[str, Any]:
        """Where the calling tenant's shard is served: this replica's Ray node and the tenants
        it holds open (for operators and the multi-node test)."""
        import ray

        await self._shard()
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "replica": serve.get_replica_context()
                .replica_id.unique_id, "tenants": sorted(self.loaded)}  # fmt: skip

    async def file(self, doc_id: str):
        """The stored document, else the upload still being ingested (or refused)."""
        shard = await self._shard()
        try:
            return await asyncio.to_thread(shard.get_document, doc_id)
        except DocumentNotFoundError:
            return await asyncio.to_thread(Uploads(shard).get, doc_id)

    async def text(self, doc_id: str) -> str:
        shard = await self._shard()
        return await asyncio.to_thread(shard.document_text, doc_id)

    async def content(self, doc_id: str, as_text: bool) -> tuple[str, str | bytes]:
        """("original", file name, bytes) as uploaded (also while it is being ingested), or
        ("text", text) as stored (with ``as_text``, and for documents ingested from a path)."""
        shard = await self._shard()
        uploads = Uploads(shard)

        def as_uploaded():  # the stored document's original, else the upload in progress
            return uploads.bytes_of(doc_id) or uploads.bytes_of(doc_id, pending=True)

        original = None if as_text else await asyncio.to_thread(as_uploaded)
        if original is not None:
            return "original", *original
        return "text", await asyncio.to_thread(shard.document_text, doc_id)

    async def delete(self, doc_id: str) -> None:
        shard = await self._shard()
        await asyncio.to_thread(shard.delete_document, doc_id)

    async def catalog(self, operation, *args: Any, **kwargs: Any) -> Any:
        """One VectorStoreCatalog method (index/store/collections.py) on the calling
        tenant's shard: the vector stores live in its database (serve/tenant_shards.py)."""
        check_catalog_operation(operation)
        shard = await self._shard()
        return await asyncio.to_thread(operation, VectorStoreCatalog(shard), *args, **kwargs)

    async def attributes(self, doc_ids: list[str]) -> dict[str, dict[str, str]]:
        shard = await self._shard()
        records = await asyncio.to_thread(shard.list_documents)
        wanted = set(doc_ids)
        return {r.doc_id: r.attributes for r in records if r.doc_id in wanted}


def _deleted(doc_id: str, file_name: str) -> IngestResult:
    """The upload was deleted before its ingestion ended: nothing of it is kept."""
    reason = "deleted while it was being ingested; nothing of it was kept"
    return IngestResult(doc_id, file_name, "refused", reason=reason, refusal_status=409)


class RemoteSearcher:
    """The query pipeline's Searcher in the appliance: embedder deployment, then the shard
    deployment with the tenant as multiplexed id."""

    def __init__(self, embedder, shards) -> None:
        self.embedder, self.shards = embedder, shards
        self.models: dict[str, str] = {}  # tenant -> the model its shard was built with

    async def search(
        self, tenant: str, query: str, k: int, params: SearchParams
    ) -> list[tuple[SearchHit, float]]:
        shards = self.shards.options(multiplexed_model_id=tenant)
        if params.mode == "lexical":
            return (await shards.search.remote(query, None, None, k, params))[1]
        if tenant not in self.models:
            self.models[tenant] = await shards.embedder_model.remote()
        for _ in range(3):  # a reindex may move the shard to another model between the calls
            started = time.perf_counter()
            vector = await self.embedder.embed_query.remote(query, tenant, self.models[tenant])
            metrics().stage.observe(time.perf_counter() - started, tags={"stage": "embed"})
            model, hits = await shards.search.remote(query, vector, self.models[tenant], k, params)
            self.models[tenant] = model
            if hits is not None:
                return hits
        raise EmbedderChangedError(f"tenant {tenant!r} is being reindexed; retry shortly")


# --- Reranker ---------------------------------------------------------------------------


@serve.deployment
class Reranker:
    """The cross-encoder reranker (query.rerank.backend: cross-encoder); CUDA when present."""

    def __init__(self, config: AppConfig) -> None:
        from serve.query.rerankers import judge

        self.reranker = judge(config.query.rerank).start()

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
        settings = config.generator.model_copy(
            update={"model": model_folder, "engine_kwargs": engine_kwargs(config)}
        )
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


@serve.deployment
@serve.ingress()
class Ingress:
    """The HTTP entry: the app of serve/app.py over one Gateway (keys, budgets, fair
    admission, accounting) built here from the other deployments' handles."""

    def __init__(
        self, config: AppConfig, model_folder: str, embedder, shards, generator, reranker=None
    ):
        setup_tracing(config.serve.tracing)
        keys = KeyStore(config.data_dir)
        tokenizer = ChatTokenizer.from_folder(model_folder)
        remote = RemoteGenerator(tokenizer, generator, config.generator.max_model_len)
        judge = RemoteReranker(reranker) if reranker is not None else None
        pipeline = QueryPipeline(RemoteSearcher(embedder, shards), remote, config.query, judge)
        gateway = Gateway(
            config, keys, pipeline, remote, embed=lambda texts: embedder.embed.remote(texts),
            tenant_shards=partial(TenantShards, shards),
            model_name=config.generator.model or model_folder,
        )  # fmt: skip
        self.http = create_app(gateway, RequestGuard(keys, config.index.limits.max_bytes))

    def __serve_build_asgi_app__(self):  # Serve asks for the app once the replica is built
        return self.http


# --- The application --------------------------------------------------------------------


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

    def options(name: str, runtime_env=env) -> dict[str, Any]:
        return deployment_options(config, name, runtime_env=runtime_env)

    embedder = Embedder.options(**options("embedder")).bind(config)
    shards = Shards.options(**options("shards")).bind(config, embedder)
    generator = Generator.options(
        **options("generator", runtime_env={"env_vars": generator_env(config)})
    ).bind(config, model_folder)
    reranker = None
    if config.query.rerank.backend == "cross-encoder":  # the generator judges in its own replica
        reranker = Reranker.options(**options("reranker")).bind(config)
    return Ingress.options(**options("ingress")).bind(
        config, model_folder, embedder, shards, generator, reranker
    )
