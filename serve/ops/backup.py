"""`grounded backup` and `grounded restore`: a consistent copy of a data directory's state, taken
while the appliance serves, and brought back without ever leaving a half-restored directory.

What is state under the data directory, and how it is copied:

- ``tenants/<tenant>/shard.sqlite3``, each tenant's shard, the source of truth (DESIGN.md
  decision 1, with the tenant's vector stores), ``keys.sqlite``, the API keys (only their
  hashes, serve/identity/keys.py; mode 0600), ``usage.sqlite``, the budgets and usage ledger
  (serve/accounting/budgets.py), ``audit.sqlite`` and ``responses.sqlite``, the stored
  responses (serve/state/response_store.py): copied with SQLite's online backup API in a single
  step. One step is one read transaction, so each copy is one consistent snapshot that includes
  the committed pages still in the WAL (the main file alone can be nearly empty: a file copy
  would lose documents), and in WAL mode it never blocks the appliance's writers. A step-wise
  backup restarts whenever another connection writes, so under steady ingestion it might never
  finish. The copies are switched to rollback-journal mode, so each is one self-contained file.
- ``keys.json``, where earlier versions kept the keys, in a data directory this version has not
  opened yet (opening it imports the file into keys.sqlite): copied as bytes, checked to parse.

Not copied:

- ``vectors-<generation>.faiss``: derived. A shard rebuilds its FAISS index from the stored
  vectors when the file is missing (index/store/shard.py ``_sync_vectors``), so a restored
  shard rebuilds it when first opened; a copied file could only be equal or stale.
- ``models/``: large and re-fetchable; the manifest names the models the configuration used.
- ``keys.lock`` (earlier versions') and SQLite's ``-wal``/``-shm`` files: locks, and pages
  folded into the copies.

Each database is a snapshot of its own moment: one tenant's copy is consistent, but the
tenants, the keys and the ledger are not one atomic snapshot together.

A backup is a folder holding those files and ``grounded-backup.json`` (format version, creation
time, tenants, models, and every file with its size and sha256), written last: a folder without
it is an unfinished backup, and restore refuses it. Restore checks every file's sha256 and runs
``PRAGMA integrity_check`` (and FTS5's own check on shards) on a copy staged next to the data
directory, then swaps it in with one rename. What a backup does not hold (``models/``, anything
else) is moved over from the replaced directory, whose state is kept beside it, never deleted.
Restore with the appliance stopped: a running one keeps its databases open.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from index.durable import fsync_dir, fsync_tree, write_atomic
from index.errors import GroundedError
from index.store.rows import DB_NAME
from index.store.tenants import TenantDirectory, validate_tenant
from serve.identity.audit import DB_NAME as AUDIT_DB
from serve.identity.keys import DB_NAME as KEYS_DB
from serve.identity.keys import KEY_FILE
from serve.ops.backup_files import (
    ANOTHER,
    BackupError,
    check_database,
    check_keys,
    copy_database,
    copy_hashing,
    file_sha256,
)
from serve.state.response_store import DB_NAME as RESPONSES_DB

log = logging.getLogger(__name__)

FORMAT = "grounded-backup"
FORMAT_VERSION = 1
MANIFEST = "grounded-backup.json"
KEYS = KEYS_DB
OLD_KEYS = KEY_FILE  # an earlier version's key file, in a data directory it has not opened
LEDGER = "usage.sqlite"
RESPONSES = RESPONSES_DB
AUDIT = AUDIT_DB
DATABASES = (KEYS, LEDGER, RESPONSES, AUDIT)  # top-level SQLite databases
TENANTS = "tenants"
# The entries of a data directory that a restore replaces; all others move to the new one.
STATE = (TENANTS, OLD_KEYS, f"{OLD_KEYS}.imported", "keys.lock",
         *(f"{db}{suffix}" for db in DATABASES for suffix in ("", "-wal", "-shm")))  # fmt: skip


class BackupFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str  # relative to the backup folder, '/'-separated
    kind: Literal["sqlite", "file"]
    size: int
    sha256: str


class TenantSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    tenant: str
    documents: int
    chunks: int
    generation: int
    embedder_model_id: str
    dimension: int


class BackupManifest(BaseModel):
    """``grounded-backup.json``; a later version of the format may add fields."""

    model_config = ConfigDict(frozen=True)

    format: Literal["grounded-backup"] = FORMAT
    format_version: int = FORMAT_VERSION
    created_at: str
    source: str
    tenants: tuple[TenantSummary, ...]
    models: dict[str, str | None]
    files: tuple[BackupFile, ...]


@dataclass(frozen=True, slots=True)
class RestoreResult:
    data_dir: Path
    manifest: BackupManifest
    replaced: Path | None  # where the previous state was kept, if there was any


def models_in_use(config) -> dict[str, str | None]:
    """The models an AppConfig uses: recorded in the backup, not copied (a fetched one is named
    as `grounded models fetch` knows it)."""
    from serve.engine.models import models_dir

    def named(model: str) -> str:  # a fetched model by the name `models fetch` knows
        return Path(model).name if Path(model).parent == models_dir(config.data_dir) else model

    rerank = config.query.rerank
    judge = rerank.model if rerank.backend == "cross-encoder" else rerank.backend
    generators = {"generator": config.generator.model}
    if config.generator.models:  # several: each by its name in requests
        generators = {f"generator {n}": m.model for n, m in config.generator.models.items()}
    embedders = {f"embedder {name}": named(e.model)
                 for name, e in config.index.embedders.items()}  # fmt: skip
    return {
        **generators,
        "embedder": named(config.index.embedder.model),
        "reranker": None if judge in (None, "none") else named(judge),
        **embedders,
    }


# -- backup -------------------------------------------------------------------------------------


def backup(
    data_dir: Path,
    dest: Path,
    *,
    models: dict[str, str | None] | None = None,
    progress: Callable[[BackupFile], None] | None = None,
) -> BackupManifest:
    """Copy every tenant shard, the keys and the usage ledger of ``data_dir`` into the new or
    empty folder ``dest``; safe while the appliance writes. ``progress`` is told of each file."""
    data_dir, dest = Path(data_dir), Path(dest)
    sources = _state_files(data_dir)
    if not sources:
        raise BackupError(
            f"nothing to back up in {data_dir}: no tenant shard, no {KEYS}, no {LEDGER}; "
            "check --data-dir (or GROUNDED_DATA_DIR, or data_dir in the config)"
        )
    created = _claim(dest)
    try:
        files = []
        for relative, kind in sources:
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if kind == "sqlite":
                copy_database(data_dir / relative, target)
            else:
                write_atomic(target, (data_dir / relative).read_bytes(), mode=0o600)
                check_keys(
                    target, f"{OLD_KEYS} of {data_dir}", "check it with `grounded keys list`"
                )
            if relative in (KEYS, OLD_KEYS):
                os.chmod(target, 0o600)
            entry = BackupFile(path=relative, kind=kind, size=target.stat().st_size,
                               sha256=file_sha256(target))  # fmt: skip
            log.info("backed up %s (%d bytes)", relative, entry.size)
            files.append(entry)
            if progress is not None:
                progress(entry)
        manifest = BackupManifest(
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            source=str(data_dir.resolve()),
            tenants=tuple(_summary(dest, f.path) for f in files if f.path.startswith(TENANTS)),
            models=models or {},
            files=tuple(files),
        )
        fsync_tree(dest)
        write_atomic(dest / MANIFEST, manifest.model_dump_json(indent=2).encode())
    except BaseException:
        _discard(dest, created)
        raise
    return manifest


def _state_files(data_dir: Path) -> list[tuple[str, Literal["sqlite", "file"]]]:
    tenants = TenantDirectory(data_dir)
    files: list[tuple[str, Literal["sqlite", "file"]]] = [
        (f"{TENANTS}/{t}/{DB_NAME}", "sqlite") for t in tenants.tenants() if tenants.exists(t)
    ]
    if (data_dir / OLD_KEYS).is_file():
        files.append((OLD_KEYS, "file"))
    files += [(db, "sqlite") for db in DATABASES if (data_dir / db).is_file()]
    return files


def _claim(dest: Path) -> bool:
    """Refuse a destination that holds anything; True when this backup created it."""
    if dest.exists():
        if not dest.is_dir() or any(dest.iterdir()):
            raise BackupError(
                f"backup destination {dest} already exists and is not empty: give a new folder "
                "(a backup never overwrites or merges into another), or move that one away"
            )
        return False
    dest.mkdir(parents=True, mode=0o700)  # it holds every tenant's documents
    return True


def _discard(dest: Path, created: bool) -> None:
    if created:
        shutil.rmtree(dest, ignore_errors=True)
        return
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _summary(dest: Path, relative: str) -> TenantSummary:
    uri = f"{(dest / relative).resolve().as_uri()}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as db:
        meta = dict(db.execute("SELECT key, value FROM manifest").fetchall())
        documents = db.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
        chunks = db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    return TenantSummary(tenant=relative.split("/")[1], documents=documents, chunks=chunks,
                         generation=int(meta.get("generation", 0)),
                         embedder_model_id=meta.get("embedder_model_id", ""),
                         dimension=int(meta.get("dimension", 0)))  # fmt: skip


# -- restore ------------------------------------------------------------------------------------


def read_manifest(src: Path) -> BackupManifest:
    """The backup's manifest, or BackupError saying what is wrong with the folder."""
    src = Path(src)
    if not src.is_dir():
        raise BackupError(f"no backup folder at {src}: give the folder `grounded backup` wrote")
    path = src / MANIFEST
    if not path.is_file():
        raise BackupError(
            f"{src} has no {MANIFEST}: it is not a Grounded backup, or the backup that wrote it "
            f"did not finish; {ANOTHER}"
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BackupError(f"{path} is not readable JSON ({exc}): the backup is damaged; "
                          f"{ANOTHER}") from exc  # fmt: skip
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise BackupError(f'{path} is not a Grounded backup manifest (no "format": "{FORMAT}")')
    version = raw.get("format_version")
    if version != FORMAT_VERSION:
        raise BackupError(
            f"{src} is a backup of format version {version!r}, and this Grounded reads version "
            f"{FORMAT_VERSION}: restore it with the Grounded release that wrote it"
        )
    try:
        manifest = BackupManifest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise BackupError(f"{path} is malformed ({where}: {first['msg']}): the backup is "
                          f"damaged; {ANOTHER}") from exc  # fmt: skip
    for entry in manifest.files:
        _check_entry(path, entry)
    return manifest


def _check_entry(manifest: Path, entry: BackupFile) -> None:
    """Only the files a backup writes, by their exact paths: nothing can land elsewhere."""
    parts = entry.path.split("/")
    expected = {OLD_KEYS: "file", **dict.fromkeys(DATABASES, "sqlite")}.get(entry.path)
    if len(parts) == 3 and parts[0] == TENANTS and parts[2] == DB_NAME:
        try:
            validate_tenant(parts[1])
            expected = "sqlite"
        except GroundedError:
            expected = None
    if expected != entry.kind:
        raise BackupError(
            f"{manifest} lists an unexpected file {entry.path!r} ({entry.kind}): only tenant "
            f"shards, {OLD_KEYS}, {', '.join(DATABASES)} are restored; the backup is damaged; "
            f"{ANOTHER}"
        )


def restore(src: Path, data_dir: Path, *, force: bool = False) -> RestoreResult:
    """Verify the backup in ``src`` and make it the state of ``data_dir``, all or nothing.

    Refuses a ``data_dir`` that already holds state unless ``force``; the replaced state is
    then kept next to it (``RestoreResult.replaced``)."""
    src = Path(src)
    manifest = read_manifest(src)
    target = Path(data_dir).resolve()
    existing = _existing_state(target)
    if existing and not force:
        raise BackupError(
            f"{target} already holds {', '.join(existing)}: restore into a new or empty data "
            "directory (--data-dir), or add --force to replace it (the current state is kept "
            f"beside it as .{target.name}.replaced-...)"
        )
    if target.exists() and not target.is_dir():
        raise BackupError(f"the data directory {target} is a file: check --data-dir")
    if target.exists() and os.path.ismount(target):
        raise BackupError(
            f"{target} is a mount point, which cannot be swapped in one rename: restore into a "
            f"new folder on it (`grounded --data-dir {target / 'restored'} restore {src}`) and "
            "use that folder as the data directory"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.restore-"))
    try:
        _stage(src, manifest, staging)
        replaced = _swap(target, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return RestoreResult(target, manifest, replaced)


def _existing_state(target: Path) -> list[str]:
    tenants = TenantDirectory(target)
    shards = [t for t in tenants.tenants() if tenants.exists(t)]
    found = [f"{len(shards)} tenant shard(s)"] if shards else []
    return found + [name for name in (KEYS, OLD_KEYS, LEDGER) if (target / name).exists()]


def _stage(src: Path, manifest: BackupManifest, staging: Path) -> None:
    """Copy every file into ``staging`` and check the copies: sha256, SQLite, key file."""
    for entry in manifest.files:
        source, target = src / entry.path, staging / entry.path
        if not source.is_file():
            raise BackupError(f"{entry.path} is missing from {src}: the backup is incomplete; "
                              f"{ANOTHER}")  # fmt: skip
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = copy_hashing(source, target)
        if digest != entry.sha256:
            raise BackupError(
                f"{entry.path} in {src} does not match its checksum in the manifest (sha256 "
                f"{digest[:16]}..., expected {entry.sha256[:16]}...): the backup is damaged or "
                f"was changed; {ANOTHER}"
            )
        if entry.kind == "sqlite":
            check_database(target, f"{entry.path} in {src}", shard=target.name == DB_NAME)
        else:
            check_keys(target, f"{OLD_KEYS} in {src}", f"the backup is damaged; {ANOTHER}")
        if entry.path in (KEYS, OLD_KEYS):
            os.chmod(target, 0o600)
    fsync_tree(staging)


def _swap(target: Path, staging: Path) -> Path | None:
    """Put ``staging`` in the place of ``target`` with one rename, moving what the backup does
    not hold (``models/``, ...) over first; on any failure everything goes back."""
    if not target.exists():
        os.rename(staging, target)
        fsync_dir(target.parent)
        return None
    os.chmod(staging, stat.S_IMODE(target.stat().st_mode))
    moved: list[str] = []
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.replaced-{stamp}-"))
    try:
        for child in sorted(target.iterdir()):
            if child.name not in STATE:
                os.rename(child, staging / child.name)
                moved.append(child.name)
        os.rename(target, old)  # onto the empty folder just made: a unique name
        try:
            os.rename(staging, target)
        except BaseException:
            os.rename(old, target)
            raise
    except BaseException:
        for name in reversed(moved):
            os.rename(staging / name, target / name)
        if old.is_dir() and not any(old.iterdir()):
            old.rmdir()
        raise
    fsync_dir(target.parent)
    if not any(p.is_file() and p.name != "keys.lock" for p in old.rglob("*")):
        shutil.rmtree(old)  # nothing was stored there (empty folders, a lock file)
        return None
    return old
