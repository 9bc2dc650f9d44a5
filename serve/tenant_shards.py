"""One tenant's shard as the ingress calls it: the Shards deployment's operations as typed
methods, each routed to the replica that holds the tenant (its multiplexed model id).

Vector-store operations name the VectorStoreCatalog method itself (``catalog(
VectorStoreCatalog.get_store, store_id)``): typed, checked by the replica, never a string.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from index.access import KEEP, Access
from index.pipeline import IngestResult
from index.store.collections import VectorStoreCatalog
from index.store.uploads import UploadRecord
from index.types import DocumentRecord

P = ParamSpec("P")
R = TypeVar("R")
StoredFile = DocumentRecord | UploadRecord


class TenantShards:
    """The Shards deployment (serve/deployments/shards.py) for ``tenant``."""

    def __init__(self, handle, tenant: str) -> None:
        self.tenant = tenant
        self._handle = handle.options(multiplexed_model_id=tenant)

    async def upload(
        self, file_name: str, data: bytes, wait_s: float, access: Access | str = KEEP
    ) -> tuple[IngestResult | None, StoredFile | None]:
        """Keep and ingest the upload (for ``access``: index/access.py), waiting up to
        ``wait_s``: (result, record) when it ended in time, (None, the upload in progress)
        when it goes on."""
        return await self._handle.upload.remote(file_name, data, wait_s, access)

    async def set_access(self, doc_id: str, access: Access) -> None:
        await self._handle.set_access.remote(doc_id, access)

    async def files(self) -> tuple[list[DocumentRecord], list[UploadRecord]]:
        return await self._handle.files.remote()

    async def file(self, doc_id: str) -> StoredFile:
        return await self._handle.file.remote(doc_id)

    async def text(self, doc_id: str) -> str:
        return await self._handle.text.remote(doc_id)

    async def content(self, doc_id: str, as_text: bool) -> tuple[Any, ...]:
        """("original", file name, bytes) or ("text", text)."""
        return await self._handle.content.remote(doc_id, as_text)

    async def delete(self, doc_id: str) -> None:
        await self._handle.delete.remote(doc_id)

    async def attributes(self, doc_ids: list[str]) -> dict[str, dict[str, str]]:
        return await self._handle.attributes.remote(doc_ids)

    async def catalog(
        self,
        operation: Callable[Concatenate[VectorStoreCatalog, P], R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        """One VectorStoreCatalog operation on the tenant's shard (the stores live there)."""
        return await self._handle.catalog.remote(operation, *args, **kwargs)


def check_catalog_operation(operation: Callable) -> None:
    """A replica runs public VectorStoreCatalog methods only."""
    name = getattr(operation, "__name__", "")
    if name.startswith("_") or getattr(VectorStoreCatalog, name, None) is not operation:
        raise ValueError(f"not a VectorStoreCatalog operation: {operation!r}")
