"""How `grounded backup` copies and checks its files (serve/ops/backup.py): a database copied
with SQLite's online backup API in one step, integrity checks (FTS5's too on a shard), the key
file read back, files hashed as they are copied."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from contextlib import closing
from pathlib import Path

from index.errors import GroundedError, InvalidRequestError
from index.store.rows import DB_NAME
from serve.identity.keys import read_key_file

ANOTHER = "use another backup"


class BackupError(InvalidRequestError):
    """A backup or restore that cannot go on; the data directory was not changed."""


def copy_database(source: Path, target: Path) -> None:
    partial = target.with_name(target.name + ".partial")
    try:
        # mode=rw: a database that vanished is an error, never silently created empty.
        live = sqlite3.connect(f"{source.resolve().as_uri()}?mode=rw", uri=True, timeout=30)
        with closing(live), closing(sqlite3.connect(partial)) as copy:
            live.backup(copy, pages=-1)  # one step: one read transaction, one snapshot
            copy.execute("PRAGMA journal_mode=DELETE")
    except sqlite3.Error as exc:
        partial.unlink(missing_ok=True)
        raise BackupError(
            f"cannot back up {source}: {exc}; check that it is readable and not damaged "
            f"(`sqlite3 {source} 'PRAGMA integrity_check'`)"
        ) from exc
    check_database(partial, str(source), shard=target.name == DB_NAME)
    os.replace(partial, target)


def check_database(path: Path, label: str, *, shard: bool) -> None:
    try:
        with closing(sqlite3.connect(path)) as db:
            problems = [row[0] for row in db.execute("PRAGMA integrity_check")]
            if problems != ["ok"]:
                raise BackupError(
                    f"{label} fails SQLite's integrity check ({'; '.join(problems[:3])}): the "
                    f"database is damaged; {ANOTHER}"
                )
            if shard:  # the lexical index must agree with the chunks it indexes
                # rank 1: compare with the content table too, not only the index with itself
                db.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")
    except sqlite3.Error as exc:
        raise BackupError(
            f"{label} is damaged or not a SQLite database ({exc}); {ANOTHER}"
        ) from exc


def check_keys(path: Path, label: str, fix: str) -> None:
    """An earlier version's keys.json (a data directory not yet opened by this one)."""
    try:
        read_key_file(path)
    except GroundedError as exc:
        raise BackupError(f"{label} is not a readable key file ({exc.message}); {fix}") from exc


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def copy_hashing(source: Path, target: Path) -> str:
    digest = hashlib.sha256()
    with open(source, "rb") as reader, open(target, "wb") as writer:
        while block := reader.read(1 << 20):
            digest.update(block)
            writer.write(block)
    return digest.hexdigest()
