"""ShardHost: a process's tenant shards, as every request reaches them, without Ray.

Every method takes the tenant and the caller's ``Reader`` (index/access.py); none has a
default that means "every document". What a caller may not read is answered exactly like
what does not exist (``no such file``), by one function (``_readable``); what it may read but
not write is a 403. An upload's file id comes from the tenant, its uploader and the file
name, so a name never selects another identity's document: two identities that upload
``salaries.xlsx`` get two documents.

The Shards deployment (serve/deployments/shards.py) adapts this class to Ray Serve: it
names the tenant (the multiplexed model id) and wraps ``load_shard`` in Serve's LRU; the
in-process HTTP tests use this class as it is. With several nodes (``state.url``) a tenant's
shard has one owner at a time under a lease, every write is logged before it is applied,
and a new owner replays the log (serve/state/shard_owners.py); ``placement`` says where this
process runs (its Ray node and replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from index.access import KEEP, Access, Reader
from index.errors import (
    ConflictError,
    DocumentNotFoundError,
    EmbedderChangedError,
    GroundedError,
    PermissionDeniedError,
)
from index.pipeline import IngestResult
from index.service import IndexService
from index.store.collections import MUTATIONS, VectorStoreCatalog
from index.store.shard import TenantShard
from index.store.tenants import TenantDirectory
from index.store.uploads import UploadRecord, Uploads
from index.types import DocumentRecord, SearchHit
from serve.config import AppConfig
from serve.metrics import metrics
from serve.query.retrieval import (
    PrecomputedQuery,
    SearchFilter,
    SearchParams,
    for_embedder,
    search_shard,
)
from serve.shards.ingestion import UploadIngestion, upload_id
from serve.shards.ownership import Ownership, Placement
from serve.shards.snapshots import Snapshotter
from serve.shards.sources import SourceRuns
from serve.state.shard_owners import (
    Replayed,
    ShardOwners,
    catalog_entry,
    catalog_of,
    replay,
    upload_entry,
)

log = logging.getLogger("grounded")
StoredFile = DocumentRecord | UploadRecord


def no_such_file(file_id: str) -> DocumentNotFoundError:
    return DocumentNotFoundError(f"no such file: {file_id}", param="file_id")


class ShardHost:
    """``start_service(root)``: the IndexService over the shards under ``root`` (started;
    called once, in a thread). ``placement``: needed with several nodes."""

    def __init__(
        self,
        config: AppConfig,
        start_service: Callable[[Path], IndexService],
        placement: Placement | None = None,
    ) -> None:
        self.config = config
        self._start_service = start_service
        self.placement = placement
        self.service: IndexService | None = None
        self._starting: asyncio.Future | None = None
        self.loaded: weakref.WeakValueDictionary[str, TenantShard] = weakref.WeakValueDictionary()
        self.uploads = UploadIngestion(lambda: self.service)
        self.ownership: Ownership | None = None  # with several nodes
        self.snapshots: Snapshotter | None = None
        if config.state.url:
            owners = ShardOwners(config.state, config.state.shard_lease_s)
            self.ownership = Ownership(owners, placement)
            scratch = lambda tenant: self._shard_root() / "snapshots" / tenant  # noqa: E731
            self.snapshots = Snapshotter(self.ownership, config.state, scratch)
        self.sources = SourceRuns(self, config.sources)
        self._opened: dict[str, TenantShard] = {}
        # The loaded shards by tenant: by default kept open here; the Serve deployment puts
        # its multiplexed LRU around load_shard instead.
        self.get_shard: Callable[[str], Awaitable[TenantShard]] = self._kept_open

    async def _kept_open(self, tenant: str) -> TenantShard:
        if tenant not in self._opened:
            self._opened[tenant] = await self.load_shard(tenant)
        return self._opened[tenant]

    # -- shards, leases and the log ------------------------------------------------------------

    async def _service(self) -> IndexService:
        """The index service, started on first use, once: callers that come while it starts
        wait for that start (two starts at once race in importing transformers)."""
        if self.service is None:
            if self._starting is None:
                start = asyncio.to_thread(self._start_service, self._shard_root())
                self._starting = asyncio.ensure_future(start)
            starting = self._starting
            try:
                self.service = await asyncio.shield(starting)
            except BaseException:
                if starting.done() and self._starting is starting:  # the next call retries
                    self._starting = None
                raise
        return self.service

    index_service = _service

    def tenant_directories(self) -> TenantDirectory:
        """Where this host's tenant copies are (read without starting the service)."""
        return TenantDirectory(self._shard_root())

    def _shard_root(self) -> Path:
        """Where this host's shards live: the data directory, or with several nodes its
        node's own folder in it (on that node's disk)."""
        if self.ownership is None:
            return self.config.data_dir
        return self.config.data_dir / "nodes" / self.placement.node()

    async def load_shard(self, tenant: str) -> TenantShard:
        service = await self._service()
        shard = await asyncio.to_thread(service.open_shard, tenant, create=True)
        self.loaded[tenant] = shard  # evicted shards drop out when collected
        if self.ownership is None:  # several nodes: resumed once the shard is owned (_own)
            await self.uploads.resume(shard, tenant)
        metrics().shards_loaded.set(len(self.loaded))
        metrics().shard_chunks.set(shard.stats().chunks, tags={"tenant": tenant})
        return shard

    async def shard(self, tenant: str) -> TenantShard:
        """The tenant's shard; with several nodes, only while this host owns it (serve/shards/
        ownership.py), taking it over first (its lease, then this node's copy brought up to
        the log) when it does not."""
        ownership = self.ownership
        if ownership is not None and not ownership.holds(tenant):
            async with ownership.lock(tenant):
                if not ownership.holds(tenant):
                    return await self._own(tenant)
        return await self.get_shard(tenant)

    async def _own(self, tenant: str) -> TenantShard:
        """The lease comes first: Serve routes a tenant to the replicas that report it loaded,
        and a replica reports a tenant as soon as its load begins (Ray 2.60 may go on
        reporting it after the load failed). A replica that cannot own the tenant never
        loads it, so it draws none of the tenant's requests. The index service starts
        before (its first start is slow)."""
        await self._service()
        shard = await self.ownership.take(
            tenant, lambda: self.get_shard(tenant),
            lambda s: self.snapshots.catch_up(s, tenant, self.uploads.replayed(s, tenant)),
            lambda t: t in self.loaded,
        )  # fmt: skip
        await self.uploads.resume(shard, tenant)
        return shard

    async def _replay_into(self, shard: TenantShard, tenant: str) -> int:
        """The tenant's logged writes the owner's copy has not applied (a write whose outcome
        its writer never learned), applied (how many)."""
        position, ingest = Replayed(shard.directory), self.uploads.replayed(shard, tenant)
        return await asyncio.to_thread(
            replay, self.ownership.owners, tenant, position, ingest, shard
        )

    @contextlib.asynccontextmanager
    async def _write(self, shard: TenantShard, tenant: str, op: str, meta: dict, data=None):
        """One write to the tenant's shard: logged first (several nodes), then applied by
        the body, then its log position recorded; one at a time per tenant. The copy is
        brought up to the log first: an append whose outcome its writer never learned (the
        COMMIT's reply lost: a 503 to its client) is applied here too, as any replay would."""
        if self.ownership is None:
            yield
            return
        async with self.ownership.lock(tenant):
            await self._replay_into(shard, tenant)
            seq = await self.ownership.logged(tenant, op, meta, data)
            try:
                yield
            except GroundedError:  # refused (a 4xx): it is refused again when replayed
                await asyncio.to_thread(Replayed(shard.directory).set, seq)
                self.snapshots.written(shard, tenant, len(data or b""))
                raise
            await asyncio.to_thread(Replayed(shard.directory).set, seq)
        self.snapshots.written(shard, tenant, len(data or b""))

    def close(self) -> None:
        """Give every lease back (the replica is stopping): a tenant's next owner takes it at
        once instead of waiting for the lease to run out."""
        if self.ownership is not None:
            self.ownership.release_all()
            self.snapshots.store.close()

    # -- who may read and write what -----------------------------------------------------------

    def _readable(self, shard: TenantShard, reader: Reader, doc_id: str) -> StoredFile:
        """The stored document, else the upload still being ingested (or refused), when
        ``reader`` may read it; else ``no such file``, exactly as for an id that never
        existed. Every read of one file goes through here."""
        record = _stored(shard, doc_id)
        if record is None or not reader.may_read(record.access):
            raise no_such_file(doc_id)
        return record

    def _writable(self, shard: TenantShard, reader: Reader, doc_id: str) -> StoredFile:
        """The file, when ``reader`` may change it (index/access.py); 404 as ``_readable``
        when it may not read it, 403 when it reads it but does not own it."""
        record = self._readable(shard, reader, doc_id)
        if not reader.may_write(record.access, record.owner):
            raise PermissionDeniedError(
                f"{doc_id} ({record.file_name}) belongs to {record.owner or 'the operator'}: "
                "only its owner or an admin may change or delete it; upload your own version "
                "(it gets its own id)"
            )
        return record

    # -- operations ----------------------------------------------------------------------------

    async def embedder_model(self, tenant: str) -> str:
        """The model id the tenant's shard was built with (its queries need it)."""
        return (await self.shard(tenant)).manifest.embedder_model_id

    async def search(
        self,
        tenant: str,
        reader: Reader,
        query: str,
        vector: np.ndarray | None,
        model_id: str | None,
        k: int,
        params: SearchParams,
    ) -> tuple[str, list[tuple[SearchHit, float]] | None]:
        """(the shard's model id, hits among what ``reader`` may read); no hits when
        ``vector`` came from another model (a reindex moved the shard meanwhile): the
        caller embeds again with the one named."""
        shard = await self.shard(tenant)
        narrowed = dataclasses.replace(params.search_filter or SearchFilter(), readable_by=reader)
        params = for_embedder(dataclasses.replace(params, search_filter=narrowed),
                              self.service.dense_weight(shard))  # fmt: skip
        try:
            hits = await asyncio.to_thread(
                search_shard, shard, PrecomputedQuery(vector, model_id), query, k, params
            )
        except EmbedderChangedError:
            hits = None
        return shard.manifest.embedder_model_id, hits

    async def upload(
        self,
        tenant: str,
        reader: Reader,
        file_name: str,
        data: bytes,
        wait_s: float,
        access: Access | str = KEEP,
    ) -> tuple[IngestResult | None, StoredFile | None]:
        """Keep ``reader``'s upload, ingest it in the background (it may outlast the request,
        and a restart: see ``load_shard``) and wait up to ``wait_s`` for it. Returns
        (IngestResult, DocumentRecord | None) when it ended in time (a refusal then leaves
        nothing behind: the client gets the error), or (None, UploadRecord) while it goes on.
        The same name uploaded again by the same identity is a new version of its file."""
        shard = await self.shard(tenant)
        doc_id, owner = upload_id(tenant, reader.identity, file_name), reader.identity
        uploads = Uploads(shard)
        stored = await asyncio.to_thread(_stored, shard, doc_id)  # the uploader's own, if any
        if stored is not None and not reader.may_write(stored.access, stored.owner):
            raise PermissionDeniedError(
                f"you uploaded {file_name} before ({doc_id}) and are no longer on its access "
                "list: an admin may give it back to you, or delete it"
            )
        entry = upload_entry(file_name, access, owner)
        async with self._write(shard, tenant, "upload", entry, data):
            await asyncio.to_thread(uploads.store, doc_id, file_name, data, access, owner)
        task = self.uploads.start(shard, tenant, doc_id)
        done, _ = await asyncio.wait({task}, timeout=wait_s)
        if not done:
            return None, await asyncio.to_thread(uploads.get, doc_id)
        result, record = task.result()
        if result.status == "refused":
            await asyncio.to_thread(uploads.forget, doc_id)
        return result, record

    async def files(self, tenant: str, reader: Reader) -> list[StoredFile]:
        """The files ``reader`` may read: the tenant's documents, then the uploads not (yet)
        documents: being ingested, or refused (with the reason)."""
        shard = await self.shard(tenant)

        def readable() -> list[StoredFile]:
            with shard.reading():  # no ingestion ends between the two reads
                documents, uploads = shard.list_documents(), Uploads(shard).unfinished()
            stored = {d.doc_id for d in documents}
            unfinished = [u for u in uploads if u.doc_id not in stored]
            return [f for f in [*documents, *unfinished] if reader.may_read(f.access)]

        return await asyncio.to_thread(readable)

    async def file(self, tenant: str, reader: Reader, doc_id: str) -> StoredFile:
        return await asyncio.to_thread(self._readable, await self.shard(tenant), reader, doc_id)

    async def readable(self, tenant: str, reader: Reader, doc_ids: list[str]) -> set[str]:
        """Those of ``doc_ids`` that ``reader`` may read now."""
        shard = await self.shard(tenant)

        def check() -> set[str]:
            kept = set()
            for doc_id in doc_ids:
                with contextlib.suppress(DocumentNotFoundError):
                    kept.add(self._readable(shard, reader, doc_id).doc_id)
            return kept

        return await asyncio.to_thread(check)

    async def text(self, tenant: str, reader: Reader, doc_id: str) -> str:
        """The stored document's text, what its chunks index."""
        shard = await self.shard(tenant)

        def read() -> str:
            self._readable(shard, reader, doc_id)
            try:
                return shard.document_text(doc_id)
            except DocumentNotFoundError:  # still being ingested
                raise no_such_file(doc_id) from None

        return await asyncio.to_thread(read)

    async def content(
        self, tenant: str, reader: Reader, doc_id: str, as_text: bool
    ) -> tuple[str, str] | tuple[str, str, bytes]:
        """("original", file name, bytes) as uploaded (also while it is being ingested), or
        ("text", text) as stored (with ``as_text``, and for documents ingested from a path)."""
        shard = await self.shard(tenant)
        uploads = Uploads(shard)

        def read():
            self._readable(shard, reader, doc_id)
            if not as_text:  # the stored document's original, else the upload in progress
                original = uploads.bytes_of(doc_id) or uploads.bytes_of(doc_id, pending=True)
                if original is not None:
                    return "original", *original
            try:
                return "text", shard.document_text(doc_id)
            except DocumentNotFoundError:
                raise no_such_file(doc_id) from None

        return await asyncio.to_thread(read)

    async def set_access(
        self, tenant: str, reader: Reader, doc_id: str, access: Access
    ) -> DocumentRecord:
        """A new access list for a stored document ``reader`` may write; the document as
        changed (even when ``reader`` reads it no more)."""
        shard = await self.shard(tenant)
        record = await asyncio.to_thread(self._writable, shard, reader, doc_id)
        if not isinstance(record, DocumentRecord):
            raise ConflictError(
                f"{doc_id} is still being ingested; set its access once it is processed, or "
                "upload it with the access field",
                param="file_id",
            )
        async with self._write(shard, tenant, "set_access", {"doc_id": doc_id, "access": access}):
            await asyncio.to_thread(shard.set_access, doc_id, access)
        return dataclasses.replace(record, access=access)

    async def delete(self, tenant: str, reader: Reader, doc_id: str) -> None:
        shard = await self.shard(tenant)
        await asyncio.to_thread(self._writable, shard, reader, doc_id)
        async with self._write(shard, tenant, "delete", {"doc_id": doc_id}):
            await asyncio.to_thread(shard.delete_document, doc_id)

    async def attributes(
        self, tenant: str, reader: Reader, doc_ids: list[str]
    ) -> dict[str, dict[str, str]]:
        """The upload attributes of those of ``doc_ids`` that ``reader`` may read."""
        shard = await self.shard(tenant)
        records = await asyncio.to_thread(shard.list_documents)
        wanted = set(doc_ids)
        return {r.doc_id: r.attributes for r in records
                if r.doc_id in wanted and reader.may_read(r.access)}  # fmt: skip

    async def catalog(self, tenant: str, reader: Reader, operation, *args: Any, **kwargs: Any):
        """One VectorStoreCatalog method (index/store/collections.py) on the tenant's shard,
        as ``reader``: the stores live in its database (serve/shards/tenant.py)."""
        check_catalog_operation(operation)
        shard = await self.shard(tenant)
        if self.ownership is None or operation.__name__ not in MUTATIONS:
            catalog = VectorStoreCatalog(shard, reader)
            return await asyncio.to_thread(operation, catalog, *args, **kwargs)
        meta = catalog_entry(operation.__name__, reader, args, kwargs)  # replayed exactly
        async with self._write(shard, tenant, "catalog", meta):
            catalog, args, kwargs = catalog_of(shard, meta)
            return await asyncio.to_thread(operation, catalog, *args, **kwargs)

    async def source(self, tenant: str, reader: Reader, operation: str, *args: Any) -> Any:
        """One of the tenant's sources' operations (serve/shards/sources.py), as ``reader``
        (an admin): listed, declare, remove or start (a run)."""
        if operation not in ("listed", "declare", "remove", "start"):
            raise ValueError(f"not a source operation: {operation!r}")
        return await getattr(self.sources, operation)(tenant, reader, *args)


def check_catalog_operation(operation: Callable) -> None:
    """Public VectorStoreCatalog methods only."""
    name = getattr(operation, "__name__", "")
    if name.startswith("_") or getattr(VectorStoreCatalog, name, None) is not operation:
        raise ValueError(f"not a VectorStoreCatalog operation: {operation!r}")


def _stored(shard: TenantShard, doc_id: str) -> StoredFile | None:
    """The stored document, else the upload still being ingested (or refused), else None;
    whoever may read it (the callers check)."""
    try:
        return shard.get_document(doc_id)
    except DocumentNotFoundError:
        try:
            return Uploads(shard).get(doc_id)
        except DocumentNotFoundError:
            return None
