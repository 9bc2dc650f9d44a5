"""A WebDAV source (Nextcloud, ownCloud, SharePoint's WebDAV, any RFC 4918 server) through
webdav4 (MIT): each folder listed with one ``PROPFIND`` of depth 1 (servers refuse depth
infinity, and one folder's listing bounds the memory), a file's size, modification time and
ETag taken from it; files read with ``GET``. What WebDAV carries of permissions is the
server's own (Nextcloud shares, SharePoint groups): nothing of it reaches Grounded, whose
access comes from the source's rules."""

from __future__ import annotations

import io
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
from webdav4.client import Client, ClientError

from index.sources.kinds import Entry, SourceUnreachableError, wanted

TIMEOUT_S = 30.0


class WebDavSource:
    kind = "webdav"

    def __init__(self, url: str, username: str | None, password: str | None) -> None:
        self.url = url
        auth = (username, password or "") if username else None
        self._client = Client(url, auth=auth, timeout=TIMEOUT_S)

    @property
    def location(self) -> str:
        return self.url

    def entries(self) -> Iterator[Entry]:
        yield from self._walk("")

    def _walk(self, folder: str) -> Iterator[Entry]:
        try:
            listing = self._client.ls(folder, detail=True)
        except (ClientError, httpx.HTTPError) as exc:
            raise SourceUnreachableError(
                f"cannot list {self._where(folder)} ({_reason(exc)}): nothing was changed; "
                "check the URL, the server and the source's credentials"
            ) from exc
        for item in sorted(listing, key=lambda i: i["name"]):
            path = item["name"].strip("/")
            if path.rsplit("/", 1)[-1].startswith("."):
                continue
            if item["type"] == "directory":
                yield from self._walk(path)
            elif wanted(path):
                modified = item.get("modified")
                mtime_ns = int(modified.timestamp() * 1e9) if modified else 0
                size = item.get("content_length") or 0
                yield Entry(path, size, mtime_ns, (item.get("etag") or "").strip('"'))

    def read(self, path: str) -> bytes:
        buffer = io.BytesIO()
        try:
            self._client.download_fileobj(path, buffer)
        except (ClientError, httpx.HTTPError) as exc:
            raise OSError(f"{self._where(path)}: {_reason(exc)}") from exc
        return buffer.getvalue()

    def _where(self, path: str) -> str:
        url = urlsplit(self.url)  # the host and path only: never what the URL may carry else
        port = f":{url.port}" if url.port else ""
        return f"{url.scheme}://{url.hostname}{port}{url.path.rstrip('/')}/{path}"


def _reason(exc: Exception) -> str:
    response = getattr(exc, "response", None)  # webdav4's HTTPError, httpx's HTTPStatusError
    if response is not None:
        status = response.status_code
        return {401: "401: credentials refused", 403: "403: not allowed",
                404: "404: no such folder"}.get(status, f"HTTP {status}")  # fmt: skip
    return str(exc) or type(exc).__name__
