"""OpenAI's objects other than the chat completion: the models list, embeddings, file objects,
the vector-store search page and cursor pages (serve/http/api.py holds the requests and chat)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from index.errors import GroundedError, InvalidRequestError
from index.pipeline import IngestResult
from index.store.paging import EMPTY, MAX_LIMIT, validate_page
from index.store.uploads import UploadRecord
from index.types import DocumentRecord, SearchHit
from serve.http.api import MODEL_ID, ModelNotFoundError, score_of, shown_score


def check_embedding_model(model: str, embedding_model: str) -> None:
    """/v1/embeddings takes the embedder's own name, or ``grounded`` (the appliance's one name,
    which clients configured with a single model send)."""
    if model not in (MODEL_ID, embedding_model):
        raise ModelNotFoundError(
            f"the embedding model {model!r} does not exist; use {embedding_model!r} "
            f"(GET /v1/models lists it)"
        )


def models_list(models: dict[str, str], embedding_model: str) -> dict[str, Any]:
    """Every model the API accepts: ``grounded`` for chat and Responses (routed between
    ``models``, name -> the model it runs, where there are several; each may also be asked by
    name), and the embedder for /v1/embeddings. OpenAI's model object has no field for what a
    model does, and its schema leaves the object open: Grounded's extension says
    (``grounded.kind``)."""
    chat = {
        "object": "model",
        "created": 0,
        "owned_by": "grounded",
    }
    endpoints = ["/v1/chat/completions", "/v1/responses"]
    described = "Answers from the caller's tenant documents only, with checked citations"
    if MODEL_ID in models:  # one generator
        listed = [{"id": MODEL_ID, **chat, "grounded": {
            "kind": "chat", "endpoints": endpoints, "description": described,
            "generator": models[MODEL_ID]}}]  # fmt: skip
    else:
        listed = [{"id": MODEL_ID, **chat, "grounded": {
            "kind": "chat", "endpoints": endpoints, "routes_to": list(models),
            "description": described + "; each question is routed to the cheapest model that "
            "answers it as well (the default)"}}]  # fmt: skip
        listed += [{"id": name, **chat, "grounded": {
            "kind": "chat", "endpoints": endpoints, "generator": model,
            "description": described + f"; always by {name}"}}
            for name, model in models.items()]  # fmt: skip
    return {
        "object": "list",
        "data": [
            *listed,
            {
                "id": embedding_model,
                "object": "model",
                "created": 0,
                "owned_by": "grounded",
                "grounded": {
                    "kind": "embedding",
                    "endpoints": ["/v1/embeddings"],
                    "description": "The embedder that indexes the documents",
                },
            },
        ],
    }


def embeddings(vectors: np.ndarray, encoding: str, tokens: int, model: str) -> dict[str, Any]:
    def encode(vector: np.ndarray):
        if encoding == "base64":
            return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
        return [float(x) for x in vector]

    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": encode(v)}
            for i, v in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def file_object(record: DocumentRecord | UploadRecord) -> dict[str, Any]:
    """OpenAI's file object: a stored document is ``processed``; an upload still being
    ingested ``uploaded``; a refused one ``error``, with the reason in ``status_details``
    (left out otherwise: the spec types it as a string, not null)."""
    if isinstance(record, UploadRecord):
        upload = {
            "id": record.doc_id, "object": "file", "bytes": record.byte_count,
            "created_at": record.created_at, "filename": record.file_name,
            "purpose": "assistants",
            "status": "uploaded" if record.status == "in_progress" else "error",
        }  # fmt: skip
        if record.error is not None:
            upload["status_details"] = record.error
        return upload
    return {
        "id": record.doc_id,
        "object": "file",
        "bytes": record.byte_count,
        "created_at": _epoch(record.created_at),
        "filename": record.file_name,
        "purpose": "assistants",
        "status": "processed",
        "grounded": {k: v for k, v in asdict(record).items() if k not in ("doc_id", "source")},
    }


def _epoch(stamp: str) -> int:
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(stamp).timestamp())
    except ValueError:
        return 0


def refusal(result: IngestResult) -> GroundedError:
    error = InvalidRequestError(f"{result.file_name}: {result.reason}", param="file")
    error.status = result.refusal_status or 400
    return error


def search_page(
    query: str | list[str],
    hits: Sequence[SearchHit],
    attributes: dict[str, dict[str, Any]],
    provenance: bool = False,
) -> dict:
    """OpenAI's search results page. The spec closes each result to the fields it lists
    (``additionalProperties: false``), so Grounded's extension (chunk id, character offsets,
    page, heading path, the raw score) is added only when the request asks (``provenance``)."""

    def result(hit: SearchHit) -> dict[str, Any]:
        item = {
            "file_id": hit.doc_id,
            "filename": hit.file_name,
            "score": shown_score(hit),
            "attributes": attributes.get(hit.doc_id, {}),
            "content": [{"type": "text", "text": hit.text}],
        }
        if provenance:
            item["grounded"] = {
                "chunk_id": hit.chunk_id,
                "start": hit.start,
                "end": hit.end,
                "page": hit.page,
                "heading_path": list(hit.heading_path),
                "raw_score": score_of(hit),
            }
        return item

    return {
        "object": "vector_store.search_results.page",
        "search_query": [query] if isinstance(query, str) else list(query),
        "data": [result(hit) for hit in hits],
        "has_more": False,
        "next_page": None,
    }


def cursor_page(
    items: Sequence[dict[str, Any]],
    *,
    limit: int,
    order: str,
    after: str | None = None,
    max_limit: int = MAX_LIMIT,
) -> dict[str, Any]:
    """OpenAI's cursor page over an in-memory list (oldest first, each with an ``id``):
    ``limit`` of them in ``order``, after the given id (the vector stores page their SQLite
    rows in index/store/paging.py, which validates the same way; an empty page's first_id
    and last_id are "" there and here)."""
    validate_page(limit, order, max_limit)
    ordered = list(items) if order == "asc" else list(reversed(items))
    ids = [item["id"] for item in ordered]
    after = after or None
    if after is not None and after not in ids:
        raise InvalidRequestError(f"after {after!r} is not an id in this list", param="after")
    start = ids.index(after) + 1 if after is not None else 0
    page = ordered[start : start + limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else EMPTY,
        "last_id": page[-1]["id"] if page else EMPTY,
        "has_more": start + len(page) < len(ordered),
    }
