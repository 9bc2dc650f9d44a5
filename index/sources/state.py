"""A tenant's sources as its shard stores them (the ``sources`` and ``source_files`` tables of
index/store/schema.py): declared, listed, removed; a run's claim, so that one source runs once
at a time; and the last run's report."""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from index.errors import ConflictError, DocumentNotFoundError, InvalidRequestError
from index.sources.folder import FolderSource, open_source
from index.sources.rules import AccessRules
from index.store.shard import TenantShard

STALE_S = 600  # a run that has not reported for this long died: another may start
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_")


@dataclass(frozen=True)
class Declared:
    name: str
    kind: str
    location: str
    rules: AccessRules
    every_s: float | None = None
    last_run: dict | None = None
    files: int = 0  # files it holds (documents, and refused files retried when they change)

    def source(self) -> FolderSource:
        return open_source(self.kind, self.location)


class SourceNotFoundError(DocumentNotFoundError):
    """No source of that name in the tenant."""


def _no_source(name: str) -> SourceNotFoundError:
    return SourceNotFoundError(
        f"no source {name!r} in this tenant; `grounded sources list` names them", param="name"
    )


def check_name(name: str) -> str:
    if not name or len(name) > 64 or not set(name) <= _NAME_CHARS:
        raise InvalidRequestError(
            f"source name {name!r}: 1 to 64 lowercase letters, digits, '-' or '_'", param="name"
        )
    return name


def parse_location(spec: str) -> tuple[str, str]:
    """``kind:location`` (``folder:/mnt/hr``) as (kind, location)."""
    kind, sep, location = spec.partition(":")
    if not sep or not location:
        raise InvalidRequestError(
            f"source {spec!r}: write it as kind:location, e.g. folder:/mnt/hr", param="source"
        )
    if kind == "folder":  # absolute: a run from another working directory finds it too
        return kind, str(Path(location).expanduser().resolve())
    raise InvalidRequestError(f"source kind {kind!r}: folder (WebDAV and S3 are to come)",
                              param="source")  # fmt: skip


def add(shard: TenantShard, declared: Declared) -> None:
    check_name(declared.name)
    with shard.transaction(write=True) as db:
        if db.execute("SELECT 1 FROM sources WHERE name = ?", (declared.name,)).fetchone():
            raise ConflictError(f"source {declared.name!r} exists; remove it first, or pick "
                                "another name", param="name")  # fmt: skip
        db.execute(
            "INSERT INTO sources (name, kind, location, access, every_s, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (declared.name, declared.kind, declared.location, json.dumps(declared.rules.json()),
             declared.every_s, int(time.time())),
        )  # fmt: skip


def listed(shard: TenantShard) -> list[Declared]:
    with shard.transaction() as db:
        rows = db.execute(
            "SELECT name, kind, location, access, every_s, last_run, (SELECT count(*) FROM "
            "source_files f WHERE f.source = s.name) FROM sources s ORDER BY name"
        ).fetchall()
    return [Declared(name, kind, location, AccessRules.of_json(json.loads(access)), every,
                     json.loads(last) if last else None, files)
            for name, kind, location, access, every, last, files in rows]  # fmt: skip


def get(shard: TenantShard, name: str) -> Declared:
    for declared in listed(shard):
        if declared.name == name:
            return declared
    raise _no_source(name)


def remove(shard: TenantShard, name: str) -> list[str]:
    """The source forgotten; the ids of the documents it held (the caller deletes them, or
    keeps them as the tenant's own)."""
    with shard.transaction(write=True) as db:
        held = db.execute("SELECT doc_id FROM source_files WHERE source = ?", (name,))
        doc_ids = [row[0] for row in held]
        if not db.execute("DELETE FROM sources WHERE name = ?", (name,)).rowcount:
            raise _no_source(name)
    return doc_ids


def claim(shard: TenantShard, name: str, now: float) -> None:
    """Mark a run of ``name`` under way; ConflictError while another runs: one that has
    reported within STALE_S, from a process still alive (a run whose process died, killed
    or restarted, is resumed at once)."""
    with shard.transaction(write=True) as db:
        row = db.execute("SELECT running FROM sources WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise _no_source(name)
        if row[0] is not None and _alive(json.loads(row[0]), now):
            began = now - json.loads(row[0])["at"]
            raise ConflictError(
                f"source {name!r} is being synced (its run last reported {began:.0f} s ago); "
                "wait for it to end", param="name",
            )  # fmt: skip
        db.execute("UPDATE sources SET running = ? WHERE name = ?", (_running(now), name))


def claim_again(shard: TenantShard, name: str, now: float) -> None:
    """The run under way is alive (it reports after each batch)."""
    with shard.transaction(write=True) as db:
        db.execute("UPDATE sources SET running = ? WHERE name = ?", (_running(now), name))


def _running(now: float) -> str:
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "at": now})


def _alive(run: dict, now: float) -> bool:
    if now - run["at"] >= STALE_S:
        return False
    if run["host"] != socket.gethostname():
        return True  # another machine's: only its silence tells
    try:
        os.kill(run["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def report(shard: TenantShard, name: str, run: dict) -> None:
    """The run is over (done, or stopped with ``run["error"]``): its report kept."""
    with shard.transaction(write=True) as db:
        db.execute("UPDATE sources SET running = NULL, last_run = ? WHERE name = ?",
                   (json.dumps(run), name))  # fmt: skip
