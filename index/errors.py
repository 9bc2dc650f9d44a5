"""One raised hierarchy for every error a user can cause or see.

Each class carries the HTTP status and the OpenAI error ``type``/``param`` that the API layer
maps it to, so the CLI and the HTTP API report the same thing. Messages say what was wrong and
what to do about it.
"""

from __future__ import annotations


class GroundedError(Exception):
    """Base class. ``status``/``type``/``param`` follow OpenAI's error object."""

    status: int = 500
    type: str = "server_error"
    param: str | None = None
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if param is not None:
            self.param = param


class InvalidRequestError(GroundedError):
    status = 400
    type = "invalid_request_error"


class ConfigError(InvalidRequestError):
    """A configuration value is invalid; ``param`` names the field."""


class ConflictError(InvalidRequestError):
    """The request is valid but the object is not in a state that allows it yet."""

    status = 409


class InvalidTenantError(InvalidRequestError):
    param = "tenant"


class DocumentNotFoundError(GroundedError):
    status = 404
    type = "invalid_request_error"
    param = "file_id"


class DimensionMismatchError(InvalidRequestError):
    """Vectors whose dimension differs from the shard's embedder."""


class EmbedderMismatchError(GroundedError):
    """A shard opened with another embedder than the one that built it."""

    status = 409
    type = "invalid_request_error"


class EmbedderChangedError(EmbedderMismatchError):
    """A query vector from the model a shard had before a reindex moved it: embed again."""

    status = 503
    type = "service_unavailable"
    retry_after = 1


class DocumentRefusedError(InvalidRequestError):
    """A file that cannot be ingested. Names the file and the reason; nothing was stored."""

    param = "file"

    def __init__(self, file_name: str, reason: str) -> None:
        super().__init__(f"{file_name}: {reason}")
        self.file_name = file_name
        self.reason = reason


class UnsupportedFileError(DocumentRefusedError):
    status = 415


class FileTooLargeError(DocumentRefusedError):
    """The file exceeds a configured limit (bytes, pages, characters or chunks)."""

    status = 413


class MalformedDocumentError(DocumentRefusedError):
    """Binary, encrypted, truncated or otherwise unreadable content."""


class IngestCancelledError(DocumentRefusedError):
    """The file was deleted (or its upload replaced) while it was being read: the reading
    stopped and nothing of it was stored."""

    status = 409


class OcrUnavailableError(DocumentRefusedError):
    """The file needs OCR and this host cannot run it (Tesseract or a language pack missing,
    or OCR turned off); the file itself may be fine."""

    status = 503
    type = "service_unavailable"


class AuthenticationError(GroundedError):
    """Missing, malformed, unknown or revoked API key."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class PermissionDeniedError(GroundedError):
    """The key is valid but lacks the scope the route needs."""

    status = 403
    type = "permission_denied"


class RateLimitError(GroundedError):
    """Too many requests queued (or over a budget); ``retry_after`` in seconds; ``reason`` names
    the limit (the usage accounting counts refusals by it)."""

    status = 429
    type = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: float = 1.0, reason: str = "queue") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.reason = reason
