"""One tenant's shard as the ingress calls it: the Shards deployment's operations as typed
methods, each routed to the replica that holds the tenant (its multiplexed model id).

With several nodes one replica owns each tenant's shard (serve/state/shard_owners.py), and Serve's
multiplexing prefers that replica without promising it: a request it sends elsewhere (the
owner busy, or its routing table not yet told who holds the tenant) is refused there before
anything is applied (ShardOwnedElsewhereError), as is a write that reached an owner whose lease
ran out (LeaseLostError: its next request takes the lease again); both are sent again
(``to_owner``).

Vector-store operations name the VectorStoreCatalog method itself (``catalog(reader,
VectorStoreCatalog.get_store, store_id)``): typed, checked by the replica, never a string.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from index.access import KEEP, Access, Reader
from index.pipeline import IngestResult
from index.store.collections import VectorStoreCatalog
from index.types import DocumentRecord, SearchHit
from serve.query.retrieval import SearchParams
from serve.shards.host import StoredFile
from serve.state.shard_owners import LeaseLostError, ShardOwnedElsewhereError

P = ParamSpec("P")
R = TypeVar("R")
RESEND_AFTER_S = (0.1, 0.3, 0.6, 1.0)  # a misrouted request's waits before each retry


async def to_owner(call: Callable[[], Awaitable[R]]) -> R:
    """``call`` (one request to the Shards deployment), sent again while a replica refuses it
    for not owning the tenant's shard; the refusal stands (a 503) once the retries are spent:
    the owner's node is gone and its lease has not run out yet (Retry-After says how long)."""
    for wait in RESEND_AFTER_S:
        try:
            return await call()
        except (ShardOwnedElsewhereError, LeaseLostError):  # nothing applied: safe to resend
            await asyncio.sleep(wait)
    return await call()


class TenantShards:
    """The Shards deployment (serve/deployments/shards.py, over serve/shards/host.py's
    ShardHost) for ``tenant``. Every read and write names the caller's Reader."""

    def __init__(self, handle, tenant: str) -> None:
        self.tenant = tenant
        self._handle = handle.options(multiplexed_model_id=tenant)

    async def _remote(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await to_owner(lambda: getattr(self._handle, method).remote(*args, **kwargs))

    async def embedder_model(self) -> str:
        """The model id the tenant's shard was built with (its queries are embedded with it)."""
        return await self._remote("embedder_model")

    async def search(
        self, reader: Reader, query: str, vector: np.ndarray | None, model_id: str | None,
        k: int, params: SearchParams,
    ) -> tuple[str, list[tuple[SearchHit, float]] | None]:  # fmt: skip
        """(the shard's model id, hits); no hits when ``vector`` came from another model."""
        return await self._remote("search", reader, query, vector, model_id, k, params)

    async def upload(
        self, reader: Reader, file_name: str, data: bytes, wait_s: float,
        access: Access | str = KEEP,
    ) -> tuple[IngestResult | None, StoredFile | None]:  # fmt: skip
        """Keep and ingest ``reader``'s upload (for ``access``: index/access.py), waiting up
        to ``wait_s``: (result, record) when it ended in time, (None, the upload in
        progress) when it goes on."""
        return await self._remote("upload", reader, file_name, data, wait_s, access)

    async def set_access(self, reader: Reader, doc_id: str, access: Access) -> DocumentRecord:
        return await self._remote("set_access", reader, doc_id, access)

    async def files(self, reader: Reader) -> list[StoredFile]:
        return await self._remote("files", reader)

    async def file(self, reader: Reader, doc_id: str) -> StoredFile:
        return await self._remote("file", reader, doc_id)

    async def readable(self, reader: Reader, doc_ids: list[str]) -> set[str]:
        return await self._remote("readable", reader, doc_ids)

    async def text(self, reader: Reader, doc_id: str) -> str:
        return await self._remote("text", reader, doc_id)

    async def content(self, reader: Reader, doc_id: str, as_text: bool) -> tuple[Any, ...]:
        """("original", file name, bytes) or ("text", text)."""
        return await self._remote("content", reader, doc_id, as_text)

    async def delete(self, reader: Reader, doc_id: str) -> None:
        await self._remote("delete", reader, doc_id)

    async def attributes(self, reader: Reader, doc_ids: list[str]) -> dict[str, dict[str, str]]:
        return await self._remote("attributes", reader, doc_ids)

    async def catalog(
        self,
        reader: Reader,
        operation: Callable[Concatenate[VectorStoreCatalog, P], R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        """One VectorStoreCatalog operation on the tenant's shard, as ``reader``."""
        return await self._remote("catalog", reader, operation, *args, **kwargs)

    async def source(self, reader: Reader, operation: str, *args: Any) -> Any:
        """One operation on the tenant's sources (serve/shards/sources.py), as ``reader``."""
        return await self._remote("source", reader, operation, *args)
