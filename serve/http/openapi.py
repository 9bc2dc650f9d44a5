"""What the OpenAPI document says about responses.

Routes build their bodies in serve/http/api.py and return them as JSON (or SSE); these declarations
document those bodies with the official ``openai`` package's own types (which the tests hold
every response to, tests/openai_schema.py), and the errors with OpenAI's error object, so
``/docs``, client generators and schema-driven tests (tests/integration/test_fuzz.py) see the
API as it is. FastAPI's default 422 is dropped: validation errors answer 400 here.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from openai.types import (
    FileDeleted,
    FileObject,
    Model,
    VectorStore,
    VectorStoreDeleted,
    VectorStoreSearchResponse,
)
from openai.types.chat import ChatCompletion
from openai.types.create_embedding_response import Usage as EmbeddingUsage
from openai.types.responses import Response, ResponseItemList
from openai.types.vector_stores import (
    FileContentResponse,
    VectorStoreFile,
    VectorStoreFileBatch,
    VectorStoreFileDeleted,
)
from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error object; 429 and 503 carry a Retry-After header."""

    error: ErrorDetail


class EmbeddingItem(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str = Field(
        description="The vector; with encoding_format base64, its little-endian float32 bytes "
        "in base64 (openai's own type says list[float], its client decodes the string)."
    )


class EmbeddingList(BaseModel):
    object: Literal["list"]
    data: list[EmbeddingItem]
    model: str
    usage: EmbeddingUsage


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[Model]


class FileList(BaseModel):
    object: Literal["list"]
    data: list[FileObject]
    has_more: bool


class SearchPage(BaseModel):
    object: Literal["vector_store.search_results.page"]
    search_query: list[str]
    data: list[VectorStoreSearchResponse]
    has_more: bool
    next_page: str | None = None


class VectorStoreList(BaseModel):
    object: Literal["list"]
    data: list[VectorStore]
    first_id: str | None
    last_id: str | None
    has_more: bool


class VectorStoreFileList(BaseModel):
    object: Literal["list"]
    data: list[VectorStoreFile]
    first_id: str | None
    last_id: str | None
    has_more: bool


class VectorStoreFileContentPage(BaseModel):
    object: Literal["vector_store.file_content.page"]
    data: list[FileContentResponse]
    has_more: bool
    next_page: str | None


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response"]
    deleted: Literal[True]


class Health(BaseModel):
    status: Literal["ok"]


class SourceRunReport(BaseModel):
    """A source's run: its counts, how long it took, its first failures, the error it stopped
    on (index/sources/sync.py)."""

    source: str
    added: int
    changed: int
    moved: int
    access: int
    deleted: int
    unchanged: int
    failed: int
    seconds: float
    finished_at: float
    failures: list[list[str]]
    error: str | None


class SourceAccess(BaseModel):
    rules: list[tuple[str, list[str] | None]]
    default: list[str] | None
    posix: bool
    names: dict[str, str]


class GroundedSource(BaseModel):
    """Grounded's: a tenant's source (docs/sources.md); credentials are never part of it."""

    object: Literal["grounded.source"]
    name: str
    kind: Literal["folder", "webdav", "s3"]
    location: str
    access: SourceAccess
    every_s: float | None
    files: int
    last_run: SourceRunReport | None
    running: bool
    next_run_at: float | None


class GroundedSourceList(BaseModel):
    object: Literal["list"]
    data: list[GroundedSource]


class GroundedSourceDeleted(BaseModel):
    object: Literal["grounded.source"]
    name: str
    deleted: Literal[True]
    documents: int = Field(description="Documents it held: deleted, or kept as the tenant's.")


_ERRORS = {
    400: "The request is invalid: the message says what to change.",
    401: "No API key, or an unknown one.",
    403: "The key lacks the scope this route needs (query, ingest or admin).",
    404: "No such file, vector store or route (another tenant's ids are never found).",
    409: "The tenant's index conflicts with the request (see the message).",
    411: "An upload without a Content-Length header.",
    413: "The upload is larger than the configured limit.",
    415: "The upload's file type is not supported (the message lists those that are).",
    429: "A budget or the tenant's queue is full; Retry-After says when to try again.",
    503: "A component is starting or restarting; Retry-After says when to try again.",
}


# One Server-Sent Event; its data is a chat.completion.chunk, an error object, or [DONE].
_SSE_EVENT = {
    "type": "object",
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
    "required": ["data"],
}


def responses(success: type[BaseModel] | None, *, stream: str | None = None) -> dict[int, Any]:
    """FastAPI ``responses=`` for a /v1 route: its 200 body (JSON, and Server-Sent Events
    when it can stream, ``stream`` saying which) and OpenAI errors."""
    documented: dict[int, Any] = {
        status: {"model": ErrorResponse, "description": text} for status, text in _ERRORS.items()
    }
    if success is not None:
        documented[200] = {"model": success}
        if stream:
            events = {"schema": _SSE_EVENT}
            documented[200]["content"] = {"text/event-stream": events}
            documented[200]["description"] = f"JSON, or with stream: true {stream}"
    return documented


CHAT = responses(
    ChatCompletion,
    stream="Server-Sent Events of chat.completion.chunk objects, an error event if the answer "
    "fails midway, then [DONE].",
)
VECTOR_STORE = responses(VectorStore)
VECTOR_STORES = responses(VectorStoreList)
VECTOR_STORE_DELETED = responses(VectorStoreDeleted)
STORE_FILE = responses(VectorStoreFile)
STORE_FILES = responses(VectorStoreFileList)
STORE_FILE_DELETED = responses(VectorStoreFileDeleted)
STORE_FILE_CONTENT = responses(VectorStoreFileContentPage)
BATCH = responses(VectorStoreFileBatch)
RESPONSE = responses(
    Response,
    stream="Server-Sent Events named by their type (response.created, ..., "
    "response.output_text.delta, response.output_text.annotation.added, response.completed), "
    "or an error event and response.failed if the answer fails midway.",
)
INPUT_ITEMS = responses(ResponseItemList)
RESPONSE_DELETED = responses(ResponseDeleted)
EMBEDDINGS = responses(EmbeddingList)
MODELS = responses(ModelList)
FILE = responses(FileObject)
FILES = responses(FileList)
DELETED = responses(FileDeleted)
SEARCH = responses(SearchPage)
TEXT = responses(None)
SOURCE = responses(GroundedSource)
SOURCES = responses(GroundedSourceList)
SOURCE_DELETED = responses(GroundedSourceDeleted)
CONTENT = {
    **responses(None),
    200: {
        "description": "The file as uploaded (its media type), or with format=text its text "
        "as stored (text/plain), which citation URLs' #char= ranges index.",
        "content": {"application/octet-stream": {"schema": {"type": "string",
                                                             "format": "binary"}},
                    "text/plain": {"schema": {"type": "string"}}},
    },
}  # fmt: skip


_ERROR_REF = "#/components/schemas/ErrorResponse"


def install(app: FastAPI) -> None:
    """Serve the document without FastAPI's 422 (this API answers validation errors 400),
    and with every error as JSON (FastAPI would give a text route's errors its media type)."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, description=app.description,
                routes=app.routes,
            )  # fmt: skip
            error = {"application/json": {"schema": {"$ref": _ERROR_REF}}}
            for operations in schema["paths"].values():
                for operation in operations.values():
                    documented = operation.get("responses", {})
                    documented.pop("422", None)
                    for status, response in documented.items():
                        if int(status) >= 400:  # JSON, also where the route answers text
                            response["content"] = error
            components = schema.get("components", {}).get("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                components.pop(name, None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = document
