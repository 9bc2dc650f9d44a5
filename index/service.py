"""IndexService: the embedders, their chunkers and the tenant shards of one data directory."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from index.chunking import StructureChunker
from index.config import DEFAULT_EMBEDDER, EmbedderConfig, IndexConfig
from index.embedding import SentenceTransformerEmbedder, resolve_model
from index.errors import ConfigError, DocumentNotFoundError, EmbedderMismatchError
from index.pipeline import IngestPipeline
from index.screening import InstructionJudge
from index.store.rows import Manifest, read_manifest
from index.store.shard import TenantShard
from index.store.tenants import TenantDirectory


class TenantNotFoundError(DocumentNotFoundError):
    param = "tenant"


class Embedders:
    """The configured embedders by name, each loaded (with its chunker) on first use.

    ``make`` builds an unstarted embedder from its config (default: the sentence-transformers
    one); ``given`` supplies ready objects by name (tests inject fakes). An embedder needs
    ``model_id``, ``dimension``, ``tokenizer``, ``max_tokens``, ``start()`` and
    ``embed_documents``.
    """

    def __init__(
        self,
        config: IndexConfig,
        make: Callable[[EmbedderConfig], Any] = SentenceTransformerEmbedder,
        given: Mapping[str, Any] | None = None,
    ) -> None:
        self.config = config
        self._make = make
        self._embedders: dict[str, Any] = {k: v for k, v in (given or {}).items() if v}
        self._chunkers: dict[str, StructureChunker] = {}
        self._locks = {name: threading.Lock() for name in config.embedder_configs()}

    def model_id(self, name: str) -> str | None:
        """The model id a name stands for, without loading it (None: not installed)."""
        if name in self._embedders:
            return self._embedders[name].model_id
        try:
            return resolve_model(self.config.embedder_configs()[name].model)[0]
        except ConfigError:
            return None

    def model_ids(self) -> set[str]:
        ids = (self.model_id(name) for name in self.config.embedder_configs())
        return {i for i in ids if i}

    def name_of(self, model_id: str) -> str | None:
        return next((n for n in self.config.embedder_configs() if self.model_id(n) == model_id),
                    None)  # fmt: skip

    def get(self, name: str) -> tuple[Any, StructureChunker]:
        """The started embedder called ``name`` and its chunker. Each name loads under its own
        lock, so a model loading for the first time does not hold up queries on the others."""
        if name in self._chunkers:
            return self._embedders[name], self._chunkers[name]
        with self._locks[name]:
            if name not in self._chunkers:
                if name not in self._embedders:
                    self._embedders[name] = self._make(self.config.embedder_configs()[name])
                embedder = self._embedders[name].start()
                self._chunkers[name] = StructureChunker(
                    self.config.chunker, embedder.tokenizer, embedder.max_tokens
                )
            return self._embedders[name], self._chunkers[name]

    def manifest(self, name: str) -> Manifest:
        embedder, chunker = self.get(name)
        return Manifest(embedder.model_id, embedder.dimension, chunker.version)

    def for_model(self, model_id: str, tenant: str = "") -> tuple[Any, StructureChunker]:
        """The embedder that built a shard; refused when none configured has its model."""
        name = self.name_of(model_id)
        if name is None:
            raise EmbedderMismatchError(
                f"tenant {tenant!r} was indexed with {model_id}, which no configured embedder "
                "provides: configure it again (index.embedder or index.embedders), or run "
                f"`grounded reindex --tenant {tenant}` to re-embed with the configured one",
                param="index.embedders",
            )
        return self.get(name)


class IndexService:
    """Constructing is cheap; ``start()`` loads the default embedder. Shards open on first
    use, each served by the embedder that built it (``index.tenant_embedders`` chooses the
    one a new shard is built with, and the one ``reindex`` moves it to).

    ``embedder`` may be injected as the default embedder (tests use a deterministic fake);
    ``embedders`` may replace the whole set (the appliance's shard replicas embed remotely).
    ``instruction_judge`` is the instruction screen's judged layer at ingest (serve builds it
    from ``index.screen`` and the query path's judge; None: keyword rules alone).
    """

    def __init__(
        self,
        config: IndexConfig,
        data_dir: Path,
        embedder=None,
        embedders: Embedders = None,
        instruction_judge: InstructionJudge | None = None,
    ) -> None:
        self.config = config
        self.instruction_judge = instruction_judge
        self.tenants = TenantDirectory(data_dir)
        self.embedders = embedders or Embedders(config, given={DEFAULT_EMBEDDER: embedder})
        self._shards: dict[str, TenantShard] = {}
        self._lock = threading.Lock()

    @property
    def embedder(self):
        """The default embedder (``index.embedder``)."""
        return self.embedders.get(DEFAULT_EMBEDDER)[0]

    @property
    def chunker(self) -> StructureChunker:
        return self.embedders.get(DEFAULT_EMBEDDER)[1]

    def start(self) -> IndexService:
        self.embedders.get(DEFAULT_EMBEDDER)
        return self

    def open_shard(self, tenant: str, *, create: bool = False, adopt: bool = False):
        """A newly opened shard (not kept here: the appliance keeps its own LRU). Without
        ``create``, an unknown tenant is a 404."""
        if not create and not self.tenants.exists(tenant):
            raise TenantNotFoundError(
                f"tenant {tenant!r} has no documents yet; "
                f"ingest some with `grounded ingest --tenant {tenant} PATH`"
            )
        path, accept = self.tenants.path_for(tenant), self.embedders.model_ids()
        manifest = read_manifest(path)
        if manifest is None or manifest.embedder_model_id not in accept:  # new, or refused
            manifest = self.embedders.manifest(self.config.embedder_name(tenant))
        shard = TenantShard(path, tenant, manifest, self.config.vectors)
        return shard.start(accept=accept, adopt_manifest=adopt)

    def shard(self, tenant: str, *, create: bool = False, adopt: bool = False) -> TenantShard:
        """The tenant's shard, kept open. Without ``create``, an unknown tenant is a 404."""
        with self._lock:
            if tenant not in self._shards:
                self._shards[tenant] = self.open_shard(tenant, create=create, adopt=adopt)
            return self._shards[tenant]

    def query_embedder(self, shard: TenantShard):
        """The embedder a shard's questions are embedded with: the one that built it."""
        return self.embedders.for_model(shard.manifest.embedder_model_id, shard.tenant)[0]

    def dense_weight(self, shard: TenantShard) -> float | None:
        """The hybrid dense weight configured for the shard's embedder (None: the query's)."""
        name = self.embedders.name_of(shard.manifest.embedder_model_id)
        return name and self.config.embedder_configs()[name].dense_weight

    def pipeline(self, tenant: str, *, adopt: bool = False) -> IngestPipeline:
        """Ingestion into the tenant's shard, with the embedder that built it."""
        return self.pipeline_for(self.shard(tenant, create=True, adopt=adopt))

    def pipeline_for(self, shard: TenantShard) -> IngestPipeline:
        """Ingestion into an open shard (the appliance keeps its own), with its embedder."""
        model = shard.manifest.embedder_model_id
        return self._pipeline(shard, *self.embedders.for_model(model, shard.tenant))

    def reindex(self, tenant: str, name: str | None = None) -> tuple[str, str, int]:
        """Move a tenant to embedder ``name`` (default: the one configured for it), re-embedding
        its stored text; readers keep the old vectors until the swap. Returns (old model id,
        new model id, chunks written)."""
        name = name or self.config.embedder_name(tenant)
        if name not in self.config.embedder_configs():
            known = ", ".join(self.config.embedder_configs())
            raise ConfigError(f"no embedder named {name!r}; configured: {known}", param="name")
        shard = self.shard(tenant, adopt=True)
        old = shard.manifest.embedder_model_id
        embedder, chunker = self.embedders.get(name)
        return old, embedder.model_id, self._pipeline(shard, embedder, chunker).reindex()

    def _pipeline(self, shard: TenantShard, embedder, chunker) -> IngestPipeline:
        return IngestPipeline(shard, embedder, chunker, self.config.limits,
                              batch_chunks=self.config.ingest_batch_chunks,
                              judge=self.instruction_judge, ocr=self.config.ocr)  # fmt: skip

    def close(self) -> None:
        with self._lock:
            for shard in self._shards.values():
                shard.close()
            self._shards.clear()
