"""Files written so that a crash leaves either the old file or the whole new one: a temporary
file in the same directory, fsync, rename over the old one, fsync of the directory (the
rename itself is then durable). Used by the vector index, the key file and backups."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` with permissions ``mode``; readers see no file, the old one
    or the whole new one."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def install(written: Path, path: Path) -> None:
    """Move a file written by someone else (``written``, in ``path``'s directory) to ``path``
    durably: fsync it, rename it, fsync the directory."""
    with open(written, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(written, path)
    fsync_dir(path.parent)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root``, deepest first, then ``root``."""
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        elif path.is_dir():
            fsync_dir(path)
    fsync_dir(root)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
