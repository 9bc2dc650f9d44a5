"""Uploads ingested in the background by a ShardHost (serve/shards/host.py): kept first
(index/store/uploads.py), then loaded, chunked and embedded as a task of the host, so that an
ingestion may outlast its request, resumes after a restart, and a newer upload of the same file
waits for the one before it; and a logged upload applied again on a new owner (several nodes).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from index.errors import DocumentNotFoundError, EmbedderChangedError
from index.pipeline import IngestResult, SourceFile, doc_id_for
from index.service import IndexService
from index.store.shard import TenantShard
from index.store.uploads import Uploads
from serve.metrics import metrics
from serve.shards.sources import replay_source


def upload_id(tenant: str, owner: str | None, file_name: str) -> str:
    """The file id of ``owner``'s upload named ``file_name``: the same name uploaded again
    by the same identity is a new version; by another, another document. (None: the logs
    of uploads from before owners were recorded.)"""
    who = "" if owner is None else f"{owner}:"
    return doc_id_for(f"upload:{tenant}:{who}{file_name}")


class UploadIngestion:
    """``service()``: the host's started IndexService."""

    def __init__(self, service: Callable[[], IndexService]) -> None:
        self.service = service
        self.ingesting: dict[tuple[str, str], asyncio.Task] = {}  # (tenant, file id) -> task

    async def resume(self, shard: TenantShard, tenant: str) -> None:
        """Ingest again the uploads a restart interrupted."""
        for upload in await asyncio.to_thread(Uploads(shard).unfinished):
            if upload.status == "in_progress":  # interrupted by a restart: resumed here
                self.start(shard, tenant, upload.doc_id)

    def start(self, shard: TenantShard, tenant: str, doc_id: str) -> asyncio.Task:
        """The stored upload's ingestion, as a task of the host; a newer upload of the
        same file waits for the one before it."""
        key, previous = (tenant, doc_id), self.ingesting.get((tenant, doc_id))

        async def run():
            if previous is not None:
                await asyncio.wait({previous})
            return await asyncio.to_thread(self.run, shard, tenant, doc_id)

        task = asyncio.get_running_loop().create_task(run())
        self.ingesting[key] = task
        task.add_done_callback(lambda t: self.ingesting.get(key) is t and self.ingesting.pop(key))
        return task

    def run(self, shard: TenantShard, tenant: str, doc_id: str):
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
        pipeline = self.service().pipeline_for(shard)

        def deleted(doc_id: str) -> bool:  # asked while scans are read: OCR stops at once
            return not uploads.pending(doc_id)

        upload = uploads.get(doc_id)
        source = SourceFile.from_bytes(
            data, file_name, source=f"upload:{tenant}:{file_name}", doc_id=doc_id,
            access=uploads.access(doc_id), owner=upload.owner,
        )  # fmt: skip
        try:
            try:
                [result] = list(pipeline.ingest([source], deleted))
            except EmbedderChangedError:  # a reindex moved the shard meanwhile: its new model
                [result] = list(self.service().pipeline_for(shard).ingest([source], deleted))
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

    def replayed(self, shard: TenantShard, tenant: str) -> Replaying:
        return Replaying(self, shard, tenant)


class Replaying:
    """What a replay (serve/state/shard_owners.py ``replay``) applies with the replica's
    own pipeline, in the replaying thread: a logged upload, as it was when it came (kept, then
    ingested; a refusal, the file's own fault, kept as it was the first time), and a source's
    write (serve/shards/sources.py). A failure (the embedder down, a disk) stops the replay
    before the entry, never skipping it."""

    def __init__(self, ingestion: UploadIngestion, shard: TenantShard, tenant: str) -> None:
        self.ingestion, self.shard, self.tenant = ingestion, shard, tenant

    def __call__(self, file_name: str, data: bytes, access, owner: str | None = None) -> None:
        shard, doc_id = self.shard, upload_id(self.tenant, owner, file_name)
        Uploads(shard).store(doc_id, file_name, data, access, owner)
        result, _ = self.ingestion.run(shard, self.tenant, doc_id)
        if result.status == "refused":
            Uploads(shard).forget(doc_id)

    def source(self, op: str, meta: dict, data: bytes) -> None:
        pipeline = self.ingestion.service().pipeline_for(self.shard)
        replay_source(self.shard, pipeline, op, meta, data)


def _deleted(doc_id: str, file_name: str) -> IngestResult:
    """The upload was deleted before its ingestion ended: nothing of it is kept."""
    reason = "deleted while it was being ingested; nothing of it was kept"
    return IngestResult(doc_id, file_name, "refused", reason=reason, refusal_status=409)
