"""What every kind of source shares: the ``Source`` protocol (list entries as a stream, read
one file), ``Entry``, ``SourceUnreachableError``, credentials, and ``open_source`` /
``parse_location``, which know every kind:

- ``folder:/mnt/hr``: a local or mounted path (index/sources/folder.py);
- ``webdav:https://cloud.example.com/remote.php/dav/files/ana/HR``: Nextcloud, ownCloud,
  SharePoint (index/sources/webdav.py);
- ``s3:https://minio.example.com:9000/bucket/prefix`` or ``s3:bucket/prefix`` (AWS's own
  endpoint): any S3-compatible store, path-style (index/sources/s3.py).

Credentials are never stored with the declaration, printed or returned: a source named
``hr-share`` reads each field (``username``/``password`` for WebDAV, ``access_key_id``/
``secret_access_key`` for S3) from ``GROUNDED_SOURCE_HR_SHARE_<FIELD>`` or from the file
``<GROUNDED_SOURCE_SECRETS>/hr-share/<field>`` (a Kubernetes secret mounted as a folder);
S3 without either uses boto3's own chain (its environment variables, an instance role).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from index.errors import InvalidRequestError
from index.loaders import SUPPORTED_EXTENSIONS

KINDS = ("folder", "webdav", "s3")
SECRETS_DIR = "/run/secrets/grounded-sources"  # GROUNDED_SOURCE_SECRETS's default


class SourceUnreachableError(InvalidRequestError):
    """The source cannot be listed now (not mounted, gone, refused credentials, no
    permission): the run changes nothing."""

    status = 503
    type = "service_unavailable"
    code = "source_unreachable"


@dataclass(frozen=True, slots=True)
class Permissions:
    """A file's POSIX permissions (folder sources with ``access_from: posix``): owner, group,
    mode bits and ACL entries ``(tag, id, perm)`` (index/sources/posix.py reads them)."""

    uid: int
    gid: int
    mode: int
    acl: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Entry:
    """A file as the source lists it: its path below the source's root (``/``-separated),
    size, modification time and ``version`` (an ETag; "" where the kind has none); the
    content is read only when these changed. ``permissions``: where the source carries them."""

    path: str
    size: int
    mtime_ns: int
    version: str = ""
    permissions: Permissions | None = None


class Source(Protocol):
    kind: str

    @property
    def location(self) -> str: ...

    def entries(self) -> Iterator[Entry]:
        """Every supported file, in a stable order; SourceUnreachableError when the source
        cannot be listed (never read as an empty one)."""

    def read(self, path: str) -> bytes:
        """The file's bytes; OSError when it cannot be read now (tried again next run)."""


def wanted(path: str) -> bool:
    """A file a source gives: a supported type, nothing hidden on its path."""
    parts = path.split("/")
    return not any(p.startswith(".") or not p for p in parts) and (
        Path(parts[-1]).suffix.lower() in SUPPORTED_EXTENSIONS
    )


def secret(source: str, field: str) -> str | None:
    """One credential field of ``source`` from its environment variable or secret file."""
    variable = f"GROUNDED_SOURCE_{source.upper().replace('-', '_')}_{field.upper()}"
    if os.environ.get(variable):
        return os.environ[variable]
    path = Path(os.environ.get("GROUNDED_SOURCE_SECRETS", SECRETS_DIR)) / source / field
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def open_source(name: str, kind: str, location: str, posix: bool = False) -> Source:
    """The source a stored declaration names (``name``: whose credentials it reads)."""
    if kind == "folder":
        from index.sources.folder import FolderSource

        return FolderSource(location, permissions=posix)
    if kind == "webdav":
        from index.sources.webdav import WebDavSource

        return WebDavSource(location, secret(name, "username"), secret(name, "password"))
    if kind == "s3":
        from index.sources.s3 import S3Source

        keys = secret(name, "access_key_id"), secret(name, "secret_access_key")
        return S3Source(location, *keys)
    raise InvalidRequestError(f"unknown source kind {kind!r}: {', '.join(KINDS)}", param="kind")


def parse_location(spec: str) -> tuple[str, str]:
    """``kind:location`` as (kind, location): a folder's path made absolute (a run from
    another working directory finds it too), a URL checked for its scheme and host."""
    kind, sep, location = spec.partition(":")
    if not sep or not location or kind not in KINDS:
        raise InvalidRequestError(
            f"source {spec!r}: write it as kind:location with a kind of {', '.join(KINDS)}, "
            "e.g. folder:/mnt/hr, webdav:https://cloud.example.com/remote.php/dav/files/ana/HR "
            "or s3:https://minio.example.com:9000/bucket/prefix",
            param="source",
        )
    if kind == "folder":
        return kind, str(Path(location).expanduser().resolve())
    if kind == "s3" and "://" not in location:  # AWS's own endpoint
        return kind, location.strip("/")
    url = urlsplit(location)
    if url.username or url.password:
        raise InvalidRequestError(
            f"source {kind}:{url.scheme}://{url.hostname}/...: credentials do not go in the URL "
            "(it is stored and listed); give them as GROUNDED_SOURCE_<NAME>_USERNAME/PASSWORD "
            "(or ..._ACCESS_KEY_ID/SECRET_ACCESS_KEY) or in secret files: docs/sources.md",
            param="source",
        )
    if url.scheme not in ("http", "https") or not url.hostname:
        raise InvalidRequestError(f"source {spec!r}: the {kind} location is an http(s) URL",
                                  param="source")  # fmt: skip
    if kind == "s3" and not url.path.strip("/"):
        raise InvalidRequestError(
            f"source {spec!r}: name the bucket after the endpoint, e.g. "
            "s3:https://minio.example.com:9000/bucket/prefix", param="source",
        )  # fmt: skip
    return kind, location.rstrip("/")
