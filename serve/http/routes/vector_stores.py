"""``/v1/vector_stores``: OpenAI's vector stores as named collections inside a tenant.

A file is uploaded (``/v1/files``) and embedded once into the tenant's shard; a vector store is
a set of those files, each with its own ``attributes`` (index/store/collections.py), so a file
in several stores is not embedded again. The catalog lives in the tenant's shard database, and
every call goes to the Shards replica that holds the caller's tenant: another tenant's ids do
not exist there. ``vs_<tenant>`` (the tenant's whole document set, which chat completions
search) is also accepted wherever a store is searched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from index.errors import InvalidRequestError
from index.store.collection_types import FileSpec
from index.store.collections import VectorStoreCatalog as Catalog
from serve.http import api, objects, openapi
from serve.http.routes import Ingesting, Querying, gateway
from serve.identity.caller import Caller
from serve.query.pipeline import QueryOptions

router = APIRouter()
P = ParamSpec("P")
R = TypeVar("R")

ObjectName = Literal["vector_store", "vector_store.file", "vector_store.files_batch"]


class StoreCreate(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str | None = None
    file_ids: list[str] = []
    metadata: dict[str, str] | None = None
    expires_after: dict[str, Any] | None = None
    chunking_strategy: dict[str, Any] | None = None
    description: str | None = None  # accepted; not stored


class StoreUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    metadata: dict[str, str] | None = None
    expires_after: dict[str, Any] | None = None


class StoreFileCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file_id: str
    attributes: dict[str, str | float | bool] | None = None
    chunking_strategy: dict[str, Any] | None = None


class StoreFileUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attributes: dict[str, str | float | bool] | None


class BatchFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file_id: str
    attributes: dict[str, str | float | bool] | None = None
    chunking_strategy: dict[str, Any] | None = None


class BatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file_ids: list[str] = []
    files: list[BatchFile] = []
    attributes: dict[str, str | float | bool] | None = None
    chunking_strategy: dict[str, Any] | None = None


async def catalog(
    request: Request,
    caller: Caller,
    operation: Callable[Concatenate[Catalog, P], R],
    *args: P.args,
    **kwargs: P.kwargs,
) -> R:
    """A VectorStoreCatalog call on the caller's tenant shard, as the caller: what it may not
    read is absent from every answer (index/store/collections.py)."""
    shards = gateway(request).shards_for(caller.tenant)
    return await shards.catalog(caller.reader, operation, *args, **kwargs)


def _chunking(request: Request, strategy: dict[str, Any] | None) -> dict[str, Any] | None:
    """Every file is chunked once, with the tenant's chunker: ``auto``, or a static strategy
    equal to it, is what a file gets; another static strategy is refused, not ignored."""
    if strategy is None or strategy.get("type") == "auto":
        return strategy
    chunker = gateway(request).config.index.chunker
    static = strategy.get("static")
    static = static if isinstance(static, dict) else {}  # not an object: refused below
    wanted = (static.get("max_chunk_size_tokens"), static.get("chunk_overlap_tokens"))
    if strategy.get("type") != "static" or wanted != (chunker.size, chunker.overlap):
        raise InvalidRequestError(
            f"chunking_strategy {strategy}: every file is chunked once, when it is uploaded, "
            f"with the tenant's chunker ({chunker.size} tokens, {chunker.overlap} overlap); "
            "send {'type': 'auto'} or a static strategy with those numbers",
            param="chunking_strategy",
        )
    return strategy


def _object(record: Any, name: ObjectName, request: Request) -> dict[str, Any]:
    body = {**dataclasses.asdict(record), "object": name}
    if name == "vector_store" and body["expires_after"] is None:
        del body["expires_after"]  # the spec types it as an object: absent, not null
    if name == "vector_store.file":
        chunker = gateway(request).config.index.chunker
        static = {"max_chunk_size_tokens": chunker.size, "chunk_overlap_tokens": chunker.overlap}
        body["chunking_strategy"] = {"type": "static", "static": static}
        body["grounded"] = {"batch_id": body.pop("batch_id"), "filename": body.pop("file_name")}
    return body


def _page(page: Any, name: ObjectName, request: Request) -> dict[str, Any]:
    data = [_object(record, name, request) for record in page.data]
    return {"object": "list", "data": data, "first_id": page.first_id,
            "last_id": page.last_id, "has_more": page.has_more}  # fmt: skip


@router.post("/v1/vector_stores", response_model=None, responses=openapi.VECTOR_STORE)
async def create_store(request: Request, caller: Ingesting, body: StoreCreate) -> dict[str, Any]:
    record = await catalog(
        request, caller, Catalog.create_store, name=body.name, metadata=body.metadata,
        expires_after=body.expires_after, file_ids=body.file_ids,
        chunking_strategy=_chunking(request, body.chunking_strategy),
        request_key=request.headers.get("idempotency-key"),
    )  # fmt: skip
    return _object(record, "vector_store", request)


@router.get("/v1/vector_stores", response_model=None, responses=openapi.VECTOR_STORES)
async def list_stores(
    request: Request,
    caller: Querying,
    limit: int = 20,
    order: str = "desc",
    after: str | None = None,
    before: str | None = None,
) -> dict[str, Any]:
    page = await catalog(
        request,
        caller,
        Catalog.list_stores,
        limit=limit,
        order=order,
        after=after,
        before=before,
    )
    return _page(page, "vector_store", request)


@router.get("/v1/vector_stores/{store_id}", response_model=None, responses=openapi.VECTOR_STORE)
async def get_store(request: Request, caller: Querying, store_id: str) -> dict[str, Any]:
    return _object(
        await catalog(request, caller, Catalog.get_store, store_id),
        "vector_store",
        request,
    )


@router.post("/v1/vector_stores/{store_id}", response_model=None, responses=openapi.VECTOR_STORE)
async def update_store(
    request: Request, caller: Ingesting, store_id: str, body: StoreUpdate
) -> dict[str, Any]:
    changes = body.model_dump(exclude_unset=True)
    record = await catalog(request, caller, Catalog.update_store, store_id, **changes)
    return _object(record, "vector_store", request)


@router.delete(
    "/v1/vector_stores/{store_id}", response_model=None, responses=openapi.VECTOR_STORE_DELETED
)
async def delete_store(request: Request, caller: Ingesting, store_id: str) -> dict[str, Any]:
    await catalog(request, caller, Catalog.delete_store, store_id)
    return {"id": store_id, "object": "vector_store.deleted", "deleted": True}


@router.post(
    "/v1/vector_stores/{store_id}/files", response_model=None, responses=openapi.STORE_FILE
)
async def attach_file(
    request: Request, caller: Ingesting, store_id: str, body: StoreFileCreate
) -> dict[str, Any]:
    [record] = await catalog(
        request, caller, Catalog.attach, store_id, [body.file_id], attributes=body.attributes,
        chunking_strategy=_chunking(request, body.chunking_strategy),
    )  # fmt: skip
    return _object(record, "vector_store.file", request)


@router.get(
    "/v1/vector_stores/{store_id}/files", response_model=None, responses=openapi.STORE_FILES
)
async def list_files(
    request: Request,
    caller: Querying,
    store_id: str,
    limit: int = 20,
    order: str = "desc",
    after: str | None = None,
    before: str | None = None,
    filter: str | None = None,
) -> dict[str, Any]:
    page = await catalog(request, caller, Catalog.list_store_files, store_id, limit=limit,
                         order=order, after=after, before=before, status=filter)  # fmt: skip
    await _shown(request, caller, "vector_stores.files.list", [r.id for r in page.data])
    return _page(page, "vector_store.file", request)


async def _shown(request: Request, caller: Caller, endpoint: str, file_ids: list[str]) -> None:
    """An audit entry for the store files whose names a response shows (serve/identity/audit.py)."""
    if file_ids:
        await gateway(request).record(caller, endpoint, None, file_ids)


@router.get(
    "/v1/vector_stores/{store_id}/files/{file_id}",
    response_model=None,
    responses=openapi.STORE_FILE,
)
async def get_file(
    request: Request, caller: Querying, store_id: str, file_id: str
) -> dict[str, Any]:
    record = await catalog(request, caller, Catalog.get_store_file, store_id, file_id)
    await _shown(request, caller, "vector_stores.files.get", [file_id])
    return _object(record, "vector_store.file", request)


@router.post(
    "/v1/vector_stores/{store_id}/files/{file_id}",
    response_model=None,
    responses=openapi.STORE_FILE,
)
async def update_file(
    request: Request, caller: Ingesting, store_id: str, file_id: str, body: StoreFileUpdate
) -> dict[str, Any]:
    record = await catalog(
        request,
        caller,
        Catalog.update_store_file_attributes,
        store_id,
        file_id,
        body.attributes,
    )
    return _object(record, "vector_store.file", request)


@router.delete(
    "/v1/vector_stores/{store_id}/files/{file_id}",
    response_model=None,
    responses=openapi.STORE_FILE_DELETED,
)
async def detach_file(
    request: Request, caller: Ingesting, store_id: str, file_id: str
) -> dict[str, Any]:
    await catalog(request, caller, Catalog.detach, store_id, file_id)
    return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}


@router.get(
    "/v1/vector_stores/{store_id}/files/{file_id}/content",
    response_model=None,
    responses=openapi.STORE_FILE_CONTENT,
)
async def file_content(
    request: Request, caller: Querying, store_id: str, file_id: str
) -> dict[str, Any]:
    """The file's text as Grounded stores it (what its chunks index), one text part."""
    await catalog(request, caller, Catalog.get_store_file, store_id, file_id)  # a member, or 404
    service = gateway(request)
    text = await service.shards_for(caller.tenant).text(caller.reader, file_id)
    await service.record(caller, "vector_stores.files.content", None, [file_id])
    return {"object": "vector_store.file_content.page", "data": [{"type": "text", "text": text}],
            "has_more": False, "next_page": None}  # fmt: skip


@router.post(
    "/v1/vector_stores/{store_id}/file_batches", response_model=None, responses=openapi.BATCH
)
async def create_batch(
    request: Request, caller: Ingesting, store_id: str, body: BatchCreate
) -> dict[str, Any]:
    if body.file_ids and body.files:
        raise InvalidRequestError("give file_ids or files, not both", param="files")
    files = [FileSpec(f.file_id, f.attributes, _chunking(request, f.chunking_strategy))
             for f in body.files] or body.file_ids  # fmt: skip
    if not files:
        raise InvalidRequestError("a batch needs file_ids (or files)", param="file_ids")
    record = await catalog(
        request, caller, Catalog.create_batch, store_id, files, attributes=body.attributes,
        chunking_strategy=_chunking(request, body.chunking_strategy),
        request_key=request.headers.get("idempotency-key"),
    )  # fmt: skip
    return _object(record, "vector_store.files_batch", request)


@router.get(
    "/v1/vector_stores/{store_id}/file_batches/{batch_id}",
    response_model=None,
    responses=openapi.BATCH,
)
async def get_batch(
    request: Request, caller: Querying, store_id: str, batch_id: str
) -> dict[str, Any]:
    record = await catalog(request, caller, Catalog.get_batch, store_id, batch_id)
    return _object(record, "vector_store.files_batch", request)


@router.post(
    "/v1/vector_stores/{store_id}/file_batches/{batch_id}/cancel",
    response_model=None,
    responses=openapi.BATCH,
)
async def cancel_batch(
    request: Request, caller: Ingesting, store_id: str, batch_id: str
) -> dict[str, Any]:
    """A batch is complete when it is created (its files are already embedded): nothing is
    left to cancel, and the batch is returned as it is."""
    record = await catalog(request, caller, Catalog.get_batch, store_id, batch_id)
    return _object(record, "vector_store.files_batch", request)


@router.get(
    "/v1/vector_stores/{store_id}/file_batches/{batch_id}/files",
    response_model=None,
    responses=openapi.STORE_FILES,
)
async def batch_files(
    request: Request,
    caller: Querying,
    store_id: str,
    batch_id: str,
    limit: int = 20,
    order: str = "desc",
    after: str | None = None,
    before: str | None = None,
    filter: str | None = None,
) -> dict[str, Any]:
    await catalog(request, caller, Catalog.get_batch, store_id, batch_id)  # a batch of this store
    page = await catalog(request, caller, Catalog.list_store_files, store_id, limit=limit,
                         order=order, after=after, before=before, status=filter,
                         batch_id=batch_id)  # fmt: skip
    await _shown(request, caller, "vector_stores.file_batches.files", [r.id for r in page.data])
    return _page(page, "vector_store.file", request)


@router.post("/v1/vector_stores/{store_id}/search", response_model=None, responses=openapi.SEARCH)
async def search(
    request: Request, caller: Querying, store_id: str, body: api.SearchRequest
) -> dict[str, Any]:
    """Retrieval only, in OpenAI's shape: over a vector store (OpenAI's filters on its files'
    attributes), or over ``vs_<tenant>``, the whole document set (the extension filters)."""
    service = gateway(request)
    query = body.text()
    threshold = body.ranking_options.score_threshold if body.ranking_options else None
    if isinstance(body.filters, api.Filters):  # Grounded's extension shape
        search_filter, attributes = await service.stores_filter(caller, [store_id], None)
        if search_filter is not None:
            raise InvalidRequestError(
                "this filters shape (file_ids, filenames, attributes) applies to the "
                f"tenant's whole document set, vs_{caller.tenant}; for a vector store use "
                "OpenAI's filters ({'type': 'eq', 'key': ..., 'value': ...})",
                param="filters",
            )
        search_filter = body.filters.search_filter()
    else:
        search_filter, attributes = await service.stores_filter(caller, [store_id], body.filters)
    options = service.scoped(caller, QueryOptions(
        top_k=body.max_num_results, gate=False, score_threshold=threshold,
        search_filter=search_filter,
    ))  # fmt: skip
    # The generator reranker, when configured, is the generator's work: admitted.
    hits = await service.pipeline.retrieve(
        caller.tenant, query, options, admit=service.admission(caller, [])
    )
    await service.record(caller, "vector_stores.search", query, [h.doc_id for h in hits])
    if not attributes:  # the whole document set: the files' upload attributes
        shards = service.shards_for(caller.tenant)
        attributes = await shards.attributes(caller.reader, [h.doc_id for h in hits])
    return objects.search_page(body.query, hits, attributes, provenance=body.grounded)
