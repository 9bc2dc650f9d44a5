"""IndexService: the embedder, the chunker and the tenant shards of one data directory."""

from __future__ import annotations

import threading
from pathlib import Path

from index.chunking import StructureChunker
from index.config import IndexConfig
from index.embedding import SentenceTransformerEmbedder
from index.errors import DocumentNotFoundError
from index.pipeline import IngestPipeline
from index.store.shard import Manifest, TenantShard
from index.store.tenants import TenantDirectory


class TenantNotFoundError(DocumentNotFoundError):
    param = "tenant"


class IndexService:
    """Constructing is cheap; ``start()`` loads the embedder. Shards open on first use.

    ``embedder`` may be injected (tests use a deterministic fake); it needs ``model_id``,
    ``dimension``, ``tokenizer``, ``max_tokens``, ``start()`` and ``embed_documents``.
    """

    def __init__(self, config: IndexConfig, data_dir: Path, embedder=None) -> None:
        self.config = config
        self.tenants = TenantDirectory(data_dir)
        self.embedder = embedder or SentenceTransformerEmbedder(config.embedder)
        self.chunker: StructureChunker | None = None
        self._shards: dict[str, TenantShard] = {}
        self._lock = threading.Lock()

    def start(self) -> IndexService:
        if self.chunker is None:
            self.embedder.start()
            self.chunker = StructureChunker(
                self.config.chunker, self.embedder.tokenizer, self.embedder.max_tokens
            )
        return self

    @property
    def manifest(self) -> Manifest:
        self.start()
        return Manifest(self.embedder.model_id, self.embedder.dimension, self.chunker.version)

    def shard(self, tenant: str, *, create: bool = False, adopt: bool = False) -> TenantShard:
        """The tenant's shard. Without ``create``, an unknown tenant is a 404."""
        path = self.tenants.path_for(tenant)
        with self._lock:
            if tenant in self._shards:
                return self._shards[tenant]
            if not create and not self.tenants.exists(tenant):
                raise TenantNotFoundError(
                    f"tenant {tenant!r} has no documents yet; "
                    f"ingest some with `grounded ingest --tenant {tenant} PATH`"
                )
            shard = TenantShard(path, tenant, self.manifest, self.config.vectors)
            shard.start(adopt_manifest=adopt)
            self._shards[tenant] = shard
            return shard

    def pipeline(self, tenant: str, *, adopt: bool = False) -> IngestPipeline:
        shard = self.shard(tenant, create=True, adopt=adopt)
        return IngestPipeline(
            shard,
            self.embedder,
            self.chunker,
            self.config.limits,
            batch_chunks=self.config.ingest_batch_chunks,
        )

    def close(self) -> None:
        with self._lock:
            for shard in self._shards.values():
                shard.close()
            self._shards.clear()
