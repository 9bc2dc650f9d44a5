"""A folder source: a local or mounted path (SMB, NFS, CephFS mounts included), listed by a
periodic scan (change events do not fire on network mounts), one entry at a time."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from index.errors import InvalidRequestError
from index.loaders import SUPPORTED_EXTENSIONS


class SourceUnreachableError(InvalidRequestError):
    """The source cannot be listed now (not mounted, gone, no permission): the run changes
    nothing."""

    status = 503
    type = "service_unavailable"
    code = "source_unreachable"


@dataclass(frozen=True, slots=True)
class Entry:
    """A file as the source lists it: its path below the source's root (``/``-separated),
    size and modification time; the content is read only when these changed."""

    path: str
    size: int
    mtime_ns: int


class FolderSource:
    """Files under ``root`` of a supported type; hidden files and folders are skipped."""

    kind = "folder"

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def location(self) -> str:
        return str(self.root)

    def check(self) -> None:
        """SourceUnreachableError unless the root is a folder."""
        if not self.root.is_dir():
            raise SourceUnreachableError(
                f"source folder {self.root} is not there (not mounted, moved, or no "
                "permission): nothing was changed; mount it or fix the source's path"
            )

    def entries(self) -> Iterator[Entry]:
        """Every file, depth first, in name order; SourceUnreachableError when the root is
        not a readable folder (never read as an empty one)."""
        self.check()
        yield from self._walk(self.root, "")

    def _walk(self, folder: Path, prefix: str) -> Iterator[Entry]:
        try:
            with os.scandir(folder) as listing:
                children = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            raise SourceUnreachableError(
                f"cannot list {folder} ({exc.strerror or exc}): nothing was changed"
            ) from exc
        for child in children:
            if child.name.startswith("."):
                continue
            path = f"{prefix}{child.name}"
            if child.is_dir(follow_symlinks=False):
                yield from self._walk(Path(child.path), path + "/")
            elif child.is_file() and Path(child.name).suffix.lower() in SUPPORTED_EXTENSIONS:
                stat = child.stat()
                yield Entry(path, stat.st_size, stat.st_mtime_ns)

    def read(self, path: str) -> bytes:
        return (self.root / path).read_bytes()


def open_source(kind: str, location: str) -> FolderSource:
    """The source a stored declaration names."""
    if kind == "folder":
        return FolderSource(location)
    raise InvalidRequestError(f"unknown source kind {kind!r}: folder", param="kind")
