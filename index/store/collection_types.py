"""What a vector store holds: the frozen records ``VectorStoreCatalog`` returns (fields named as
in OpenAI's objects, so the API layer translates them one to one) and OpenAI's limits on the
values a request may set (metadata, attributes, chunking strategy, expiry)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from index.errors import DocumentNotFoundError, InvalidRequestError
from index.store.filters import value_kind

FileStatus = Literal["in_progress", "completed", "failed", "cancelled"]
FILE_STATUSES: tuple[FileStatus, ...] = ("in_progress", "completed", "failed", "cancelled")
MAX_PAIRS = 16  # OpenAI's limit on metadata and attributes
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 512
MAX_EXPIRY_DAYS = 365
DAY = 86_400


class VectorStoreNotFoundError(DocumentNotFoundError):
    """An unknown vector store (or file batch) id: 404, whatever tenant it may belong to."""

    param = "vector_store_id"


class Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset()  # update_store: leave the field as it is


@dataclass(frozen=True, slots=True)
class FileCounts:
    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    total: int = 0


@dataclass(frozen=True, slots=True)
class ExpiresAfter:
    days: int
    anchor: Literal["last_active_at"] = "last_active_at"


@dataclass(frozen=True, slots=True)
class FileError:
    code: Literal["server_error", "unsupported_file", "invalid_file"]
    message: str


@dataclass(frozen=True, slots=True)
class VectorStoreRecord:
    """A vector store; the fields are OpenAI's ``VectorStore`` (less ``object``)."""

    id: str
    name: str
    created_at: int
    last_active_at: int
    status: Literal["expired", "in_progress", "completed"]
    file_counts: FileCounts
    usage_bytes: int
    metadata: dict[str, str] = field(default_factory=dict)
    expires_after: ExpiresAfter | None = None
    expires_at: int | None = None


@dataclass(frozen=True, slots=True)
class VectorStoreFileRecord:
    """A membership; OpenAI's ``VectorStoreFile`` fields (``id`` is the file id), then
    Grounded's: the batch it came with and the document's file name."""

    id: str
    vector_store_id: str
    created_at: int
    status: FileStatus
    usage_bytes: int
    attributes: dict[str, str | float | bool]
    chunking_strategy: dict
    last_error: FileError | None = None
    batch_id: str | None = None
    file_name: str = ""


@dataclass(frozen=True, slots=True)
class FileBatchRecord:
    """OpenAI's ``VectorStoreFileBatch`` (less ``object``); counts are of the files whose
    latest attachment came with this batch."""

    id: str
    vector_store_id: str
    created_at: int
    status: FileStatus
    file_counts: FileCounts


@dataclass(frozen=True, slots=True)
class FileSpec:
    """One file to attach with its own attributes and strategy (OpenAI's batch ``files``)."""

    doc_id: str
    attributes: Mapping[str, str | float | bool] | None = None
    chunking_strategy: Mapping | None = None


def validate_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """OpenAI's metadata: at most 16 string pairs, keys up to 64 and values up to 512 chars."""
    return _pairs(metadata, "metadata", lambda v: isinstance(v, str), "strings")


def validate_attributes(attributes: Mapping[str, object] | None) -> dict[str, str | float | bool]:
    """OpenAI's file attributes: like metadata, but values may also be numbers or booleans."""

    def allowed(value: object) -> bool:
        kind = value_kind(value)
        return kind is not None and (kind != "number" or math.isfinite(value))

    return _pairs(attributes, "attributes", allowed, "strings, finite numbers or booleans")


def _pairs(pairs: Mapping | None, param: str, allowed: Callable, what: str) -> dict:
    if pairs is None:
        return {}
    if not isinstance(pairs, Mapping):
        raise InvalidRequestError(f"{param} must be an object of key-value pairs", param=param)
    if len(pairs) > MAX_PAIRS:
        raise InvalidRequestError(
            f"{param} has {len(pairs)} keys; at most {MAX_PAIRS} are allowed", param=param
        )
    for key, value in pairs.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS:
            raise InvalidRequestError(
                f"{param} key {key!r} must be a string of 1 to {MAX_KEY_CHARS} characters",
                param=f"{param}.{key}",
            )
        if not allowed(value):
            raise InvalidRequestError(
                f"{param}[{key!r}] is {type(value).__name__}; values must be {what}",
                param=f"{param}.{key}",
            )
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            raise InvalidRequestError(
                f"{param}[{key!r}] has {len(value)} characters; at most {MAX_VALUE_CHARS}",
                param=f"{param}.{key}",
            )
    return dict(pairs)


class _StaticSizes(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_chunk_size_tokens: StrictInt = Field(ge=100, le=4096)
    chunk_overlap_tokens: StrictInt = Field(ge=0)

    @model_validator(mode="after")
    def _overlap_at_most_half(self) -> _StaticSizes:
        if self.chunk_overlap_tokens > self.max_chunk_size_tokens // 2:
            raise ValueError("chunk_overlap_tokens must not exceed half of max_chunk_size_tokens")
        return self


class _AutoStrategy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["auto"]


class _StaticStrategy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["static"]
    static: _StaticSizes


_STRATEGY = TypeAdapter(Annotated[_AutoStrategy | _StaticStrategy, Field(discriminator="type")])


def validate_chunking_strategy(strategy: Mapping | None) -> dict:
    """``{"type": "auto"}`` (the default) or OpenAI's static strategy, within OpenAI's limits.
    It is recorded, not applied: the document was chunked once, when it was uploaded."""
    if strategy is None:
        return {"type": "auto"}
    try:
        return _STRATEGY.validate_python(strategy).model_dump()
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"][1:])  # [0] is the union's tag
        raise InvalidRequestError(
            f"invalid chunking_strategy{' at ' + where if where else ''}: "
            f'{error["msg"].removeprefix("Value error, ")}. Use {{"type": "auto"}} or '
            '{"type": "static", "static": {"max_chunk_size_tokens": 100-4096, '
            '"chunk_overlap_tokens": at most half of it}}',
            param="chunking_strategy",
        ) from None


def validate_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidRequestError("name must be a string", param="name")
    return name


def validate_expiry(expires_after: Mapping | None) -> dict | None:
    if expires_after is None:
        return None
    days = expires_after.get("days") if isinstance(expires_after, Mapping) else None
    anchor = expires_after.get("anchor") if isinstance(expires_after, Mapping) else None
    if (
        anchor != "last_active_at"
        or isinstance(days, bool)
        or not isinstance(days, int)
        or not 1 <= days <= MAX_EXPIRY_DAYS
    ):
        raise InvalidRequestError(
            f'expires_after must be {{"anchor": "last_active_at", "days": 1-{MAX_EXPIRY_DAYS}}}, '
            f"not {expires_after!r}",
            param="expires_after",
        )
    return {"anchor": anchor, "days": days}


def store_not_found(store_id: str) -> VectorStoreNotFoundError:
    return VectorStoreNotFoundError(
        f"no vector store {store_id!r}: GET /v1/vector_stores lists this tenant's stores"
    )


def file_not_found(store_id: str, doc_id: str) -> DocumentNotFoundError:
    return DocumentNotFoundError(
        f"file {doc_id!r} is not in vector store {store_id!r}: "
        f"GET /v1/vector_stores/{store_id}/files lists its files"
    )
