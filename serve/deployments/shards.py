"""The Shards deployment: tenant shards multiplexed by tenant id (LRU), their search, uploads
and ingestion, files and vector-store catalog; and RemoteSearcher, the query pipeline's
Searcher in the ingress (the Embedder, then the Shards replica holding the tenant)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np
from ray import serve

from index.access import KEEP
from index.errors import (
    DocumentNotFoundError,
    EmbedderChangedError,
    GroundedError,
)
from index.pipeline import IngestResult, SourceFile, doc_id_for
from index.service import IndexService
from index.store.collections import MUTATIONS, VectorStoreCatalog
from index.store.shard import TenantShard
from index.store.uploads import Uploads
from index.types import SearchHit
from serve.config import AppConfig
from serve.deployments.embedder import HandleEmbedder
from serve.metrics import metrics
from serve.query.retrieval import PrecomputedQuery, SearchParams, for_embedder, search_shard
from serve.shard_owners import (
    LeaseLostError,
    Replayed,
    ShardLease,
    ShardOwners,
    catalog_entry,
    catalog_of,
    replay,
    upload_entry,
)
from serve.tenant_shards import TenantShards, check_catalog_operation

log = logging.getLogger("grounded")


class Shards:
    """Tenant shards, loaded on demand per tenant (Serve model multiplexing, LRU eviction).
    Writes for a tenant go through the replica that holds its shard, so its readers see them.

    One node: the shards are in the data directory, and SQLite stays the source of truth
    across replicas (a shard notices another writer's commits and reloads its vectors).
    Several nodes (``state.url``): each replica keeps its shards on its node's disk
    (``<data_dir>/nodes/<Ray node id>``), owns a tenant's shard under a lease on the state
    server, logs each write there before applying it, and replays the log when it takes a
    tenant over (serve/shard_owners.py)."""

    def __init__(self, config: AppConfig, embedder) -> None:
        self.config = config
        self.embedder = embedder
        self.service: IndexService | None = None
        self.loaded: weakref.WeakValueDictionary[str, TenantShard] = weakref.WeakValueDictionary()
        self.ingesting: dict[tuple[str, str], asyncio.Task] = {}  # (tenant, file id) -> task
        self.owners = None
        self.leases: dict[str, ShardLease] = {}  # tenant -> this replica's lease (several nodes)
        self.writing: dict[str, asyncio.Lock] = {}  # tenant -> its writes, one at a time
        self._renewing: asyncio.Task | None = None
        if config.state.url:
            self.owners = ShardOwners(config.state, config.state.shard_lease_s)

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
            service = IndexService(self.config.index, self._shard_root(), embedders=remote,
                                   instruction_judge=judge)  # fmt: skip
            self.service = await asyncio.to_thread(service.start)
        return self.service

    def _shard_root(self) -> Path:
        """Where this replica's shards live: the data directory, or with several nodes its
        node's own folder in it (on that node's disk)."""
        if self.owners is None:
            return self.config.data_dir
        import ray

        return self.config.data_dir / "nodes" / ray.get_runtime_context().get_node_id()

    async def _load_shard(self, tenant: str) -> TenantShard:
        service = await self._service()
        shard = await asyncio.to_thread(service.open_shard, tenant, create=True)
        self.loaded[tenant] = shard  # evicted shards drop out when collected
        if self.owners is None:  # several nodes: resumed once the shard is owned (_own)
            await self._resume_uploads(shard, tenant)
        metrics().shards_loaded.set(len(self.loaded))
        metrics().shard_chunks.set(shard.stats().chunks, tags={"tenant": tenant})
        return shard

    async def _resume_uploads(self, shard: TenantShard, tenant: str) -> None:
        for upload in await asyncio.to_thread(Uploads(shard).unfinished):
            if upload.status == "in_progress":  # interrupted by a restart: resumed here
                self._ingest_upload(shard, tenant, upload.doc_id)

    async def _shard(self) -> TenantShard:
        tenant = serve.get_multiplexed_model_id()
        if self.owners is not None and tenant not in self.leases:
            async with self.writing.setdefault(tenant, asyncio.Lock()):
                if tenant not in self.leases:
                    return await self._own(tenant)
        return await self.get_shard(tenant)

    async def _own(self, tenant: str) -> TenantShard:
        """Take the tenant's lease (ShardOwnedElsewhereError, a 503, while another replica
        holds it), then load its shard and bring this node's copy up to the tenant's log.

        The lease comes first: Serve routes a tenant to the replicas that report it loaded,
        and a replica reports a tenant as soon as its load begins (Ray 2.60 may go on
        reporting it after the load failed). A replica that cannot own the tenant never
        loads it, so it draws none of the tenant's requests. The index service starts
        before (its first start is slow), and a replay that outlasts the lease takes it
        again and replays what came meanwhile."""
        import ray

        holder = serve.get_replica_context().replica_id.unique_id
        node = ray.get_runtime_context().get_node_id()
        await self._service()
        lease = await asyncio.to_thread(self.owners.acquire, tenant, holder, node)
        try:
            shard = await self.get_shard(tenant)
            started, applied = time.perf_counter(), 0
            position, ingest = Replayed(shard.directory), self._replayed_upload(shard, tenant)
            while True:
                applied += await asyncio.to_thread(
                    replay, self.owners, tenant, position, ingest, shard
                )
                try:
                    lease = await asyncio.to_thread(self.owners.renew, lease)
                    break
                except LeaseLostError:  # ran out during the replay: again, if still free
                    lease = await asyncio.to_thread(self.owners.acquire, tenant, holder, node)
        except BaseException:  # its next owner need not wait for the lease to run out
            with contextlib.suppress(GroundedError):
                await asyncio.to_thread(self.owners.release, lease)
            raise
        if applied:
            log.info("took tenant %r over: %d logged writes replayed in %.1f s", tenant, applied,
                     time.perf_counter() - started)  # fmt: skip
        self.leases[tenant] = lease
        await self._resume_uploads(shard, tenant)
        if self._renewing is None or self._renewing.done():
            self._renewing = asyncio.get_running_loop().create_task(self._renew())
        return shard

    def _replayed_upload(self, shard: TenantShard, tenant: str):
        """A logged upload, applied as it was when it came (kept, then ingested), in the
        replaying thread; a refusal or failure is kept as it was the first time."""

        def ingest(file_name: str, data: bytes, access) -> None:
            doc_id = doc_id_for(f"upload:{tenant}:{file_name}")
            Uploads(shard).store(doc_id, file_name, data, access)
            try:
                result, _ = self._ingest_stored(shard, tenant, doc_id)
            except Exception:  # recorded on the upload, as when it first ran
                log.warning("replaying %s for %r failed", file_name, tenant, exc_info=True)
                return
            if result.status == "refused":
                Uploads(shard).forget(doc_id)

        return ingest

    async def _renew(self) -> None:
        """Renew this replica's leases every third of their length; a lease lost (the
        replica paused past it, or the server unreachable that long) is dropped, and the
        tenant's next request takes it again or is told another replica holds it."""
        while self.leases:
            await asyncio.sleep(self.owners.lease_s / 3)
            for tenant, lease in list(self.leases.items()):
                if tenant not in self.loaded:  # evicted: left to run out for the next owner
                    self.leases.pop(tenant, None)
                    continue
                try:
                    self.leases[tenant] = await asyncio.to_thread(self.owners.renew, lease)
                except GroundedError as exc:  # LeaseLostError, StateUnavailableError
                    log.warning("lease on tenant %r lost: %s", tenant, exc)
                    self.leases.pop(tenant, None)

    async def _logged(self, tenant: str, op: str, meta: dict, data: bytes | None = None):
        """With several nodes, log a write on the state server before it is applied (fenced
        by this replica's lease): the caller holds the tenant's writing lock, applies the
        write, then records its position. None on one node."""
        if self.owners is None:
            return None
        lease = self.leases.get(tenant)
        if lease is None:  # lost since the request began (the renewal failed)
            raise LeaseLostError(f"this replica no longer owns tenant {tenant!r}'s shard; retry")
        try:
            return await asyncio.to_thread(self.owners.append, lease, op, meta, data)
        except LeaseLostError:
            self.leases.pop(tenant, None)
            raise

    @contextlib.asynccontextmanager
    async def _write(self, shard: TenantShard, tenant: str, op: str, meta: dict, data=None):
        """One write to the tenant's shard: logged first (several nodes), then applied by
        the body, then its log position recorded; one at a time per tenant."""
        if self.owners is None:
            yield
            return
        async with self.writing.setdefault(tenant, asyncio.Lock()):
            seq = await self._logged(tenant, op, meta, data)
            try:
                yield
            except GroundedError:  # refused (a 4xx): it is refused again when replayed
                await asyncio.to_thread(Replayed(shard.directory).set, seq)
                raise
            await asyncio.to_thread(Replayed(shard.directory).set, seq)

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

    async def upload(self, file_name: str, data: bytes, wait_s: float, access=KEEP):
        """Keep the upload, ingest it in the background (it may outlast the request, and a
        restart: see ``_load_shard``) and wait up to ``wait_s`` for it. Returns
        (IngestResult, DocumentRecord | None) when it ended in time (a refusal then leaves
        nothing behind: the client gets the error), or (None, UploadRecord) while it goes on."""
        shard, tenant = await self._shard(), serve.get_multiplexed_model_id()
        doc_id = doc_id_for(f"upload:{tenant}:{file_name}")
        uploads = Uploads(shard)
        async with self._write(shard, tenant, "upload", upload_entry(file_name, access), data):
            await asyncio.to_thread(uploads.store, doc_id, file_name, data, access)
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
            data, file_name, source=f"upload:{tenant}:{file_name}", doc_id=doc_id,
            access=uploads.access(doc_id),
        )  # fmt: skip
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

    async def set_access(self, doc_id: str, access) -> None:
        shard, tenant = await self._shard(), serve.get_multiplexed_model_id()
        if self.owners is not None:  # a 404 is not logged
            await asyncio.to_thread(shard.get_document, doc_id)
        async with self._write(shard, tenant, "set_access", {"doc_id": doc_id, "access": access}):
            await asyncio.to_thread(shard.set_access, doc_id, access)

    async def delete(self, doc_id: str) -> None:
        shard, tenant = await self._shard(), serve.get_multiplexed_model_id()
        async with self._write(shard, tenant, "delete", {"doc_id": doc_id}):
            await asyncio.to_thread(shard.delete_document, doc_id)

    async def catalog(self, operation, *args: Any, **kwargs: Any) -> Any:
        """One VectorStoreCatalog method (index/store/collections.py) on the calling
        tenant's shard: the vector stores live in its database (serve/tenant_shards.py)."""
        check_catalog_operation(operation)
        shard, tenant = await self._shard(), serve.get_multiplexed_model_id()
        if self.owners is None or operation.__name__ not in MUTATIONS:
            return await asyncio.to_thread(operation, VectorStoreCatalog(shard), *args, **kwargs)
        meta = catalog_entry(operation.__name__, args, kwargs)  # replayed exactly: time, ids
        async with self._write(shard, tenant, "catalog", meta):
            catalog, args, kwargs = catalog_of(shard, meta)
            return await asyncio.to_thread(operation, catalog, *args, **kwargs)

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
    deployment with the tenant as multiplexed id (serve/tenant_shards.py)."""

    def __init__(self, embedder, shards) -> None:
        self.embedder, self.shards = embedder, shards
        self.models: dict[str, str] = {}  # tenant -> the model its shard was built with

    async def search(
        self, tenant: str, query: str, k: int, params: SearchParams
    ) -> list[tuple[SearchHit, float]]:
        shards = TenantShards(self.shards, tenant)
        if params.mode == "lexical":
            return (await shards.search(query, None, None, k, params))[1]
        if tenant not in self.models:
            self.models[tenant] = await shards.embedder_model()
        for _ in range(3):  # a reindex may move the shard to another model between the calls
            started = time.perf_counter()
            vector = await self.embedder.embed_query.remote(query, tenant, self.models[tenant])
            metrics().stage.observe(time.perf_counter() - started, tags={"stage": "embed"})
            model, hits = await shards.search(query, vector, self.models[tenant], k, params)
            self.models[tenant] = model
            if hits is not None:
                return hits
        raise EmbedderChangedError(f"tenant {tenant!r} is being reindexed; retry shortly")
