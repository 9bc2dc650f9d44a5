"""What every request passes before its body is read: the API key and a size limit.

FastAPI parses a request's body (JSON, or a multipart upload spooled to disk) before the route
runs, so a check in the route comes too late: anyone who can reach the port could make the
server read, and store, any amount of data. The ingress middleware calls ``RequestGuard.check``
with the headers alone; scopes are still checked by each route.
"""

from __future__ import annotations

from collections.abc import Mapping

from index.errors import InvalidRequestError
from serve.identity.keys import ApiKey, KeyStore
from serve.identity.oidc import Authenticator

JSON_BODY_LIMIT = 8 * 2**20  # chat, embeddings, search: far above any window's worth of text
MULTIPART_OVERHEAD = 2**20  # boundaries and form fields around an uploaded file


class BodyTooLargeError(InvalidRequestError):
    status = 413


class LengthRequiredError(InvalidRequestError):
    status = 411


class RequestGuard:
    def __init__(self, keys: Authenticator | KeyStore, upload_limit: int) -> None:
        self.keys, self.upload_limit = keys, upload_limit

    @staticmethod
    def public(path: str) -> bool:
        """/health, /docs, /openapi.json: answered without a key."""
        return not path.startswith("/v1/")

    def check(self, method: str, path: str, headers: Mapping[str, str]) -> ApiKey | None:
        """The caller's key (None on public paths), or the error to answer with, before any
        byte of the body is read."""
        if self.public(path):
            return None
        key = self.keys.authenticate(headers.get("authorization"))  # 401 before anything else
        if method not in ("POST", "PUT", "PATCH"):
            return key
        upload = path == "/v1/files"
        limit = self.upload_limit + MULTIPART_OVERHEAD if upload else JSON_BODY_LIMIT
        declared = headers.get("content-length")
        if declared is None:
            raise LengthRequiredError(
                "send a Content-Length header (chunked request bodies are not accepted)"
            )
        if not declared.isdigit() or int(declared) > limit:
            what = (f"index.limits.max_bytes = {self.upload_limit:,} bytes per file" if upload
                    else f"{JSON_BODY_LIMIT:,} bytes per request")  # fmt: skip
            raise BodyTooLargeError(f"the request body is larger than the limit ({what})")
        return key
