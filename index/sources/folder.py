"""A folder source: a local or mounted path (SMB, NFS, CephFS mounts included), listed by a
periodic scan (change events do not fire on network mounts), one entry at a time; with
``permissions``, each file's owner, group, mode and POSIX ACL come with it
(index/sources/posix.py turns them into readers)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from index.sources.kinds import Entry, SourceUnreachableError, wanted
from index.sources.posix import permissions_of


class FolderSource:
    """Files under ``root`` of a supported type; hidden files and folders are skipped."""

    kind = "folder"

    def __init__(self, root: str | Path, permissions: bool = False) -> None:
        self.root = Path(root)
        self.permissions = permissions

    @property
    def location(self) -> str:
        return str(self.root)

    def entries(self) -> Iterator[Entry]:
        """Every file, depth first, in name order; SourceUnreachableError when the root is
        not a readable folder (never read as an empty one)."""
        if not self.root.is_dir():
            raise SourceUnreachableError(
                f"source folder {self.root} is not there (not mounted, moved, or no "
                "permission): nothing was changed; mount it or fix the source's path"
            )
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
            path = f"{prefix}{child.name}"
            if child.name.startswith("."):
                continue
            if child.is_dir(follow_symlinks=False):
                yield from self._walk(Path(child.path), path + "/")
            elif child.is_file(follow_symlinks=False) and wanted(path):  # links: not followed
                stat = child.stat()
                granted = permissions_of(child.path, stat) if self.permissions else None
                yield Entry(path, stat.st_size, stat.st_mtime_ns, permissions=granted)

    def read(self, path: str) -> bytes:
        return (self.root / path).read_bytes()
