"""A tenant's sources as its shard stores them (the ``sources`` and ``source_files`` tables of
index/store/schema.py): declared, listed, removed; a run's claim, so that one source runs once
at a time; and the last run's report."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from index.errors import ConflictError, DocumentNotFoundError, InvalidRequestError
from index.sources.kinds import Source, open_source, parse_location
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
    running: dict | None = None  # the run under way: its host, process, last report

    def stored(self) -> dict:
        """What ``add`` keeps (as the write log carries it: serve/shards/sources.py)."""
        return {"name": self.name, "kind": self.kind, "location": self.location,
                "rules": self.rules.json(), "every_s": self.every_s}  # fmt: skip

    @classmethod
    def of_stored(cls, stored: dict) -> Declared:
        return cls(stored["name"], stored["kind"], stored["location"],
                   AccessRules.of_json(stored["rules"]), stored["every_s"])  # fmt: skip

    def view(self) -> dict:
        """The source as the CLI's --json and the HTTP API show it (never its credentials:
        they are not part of it)."""
        next_at = None
        if self.every_s is not None:
            next_at = self.last_run["finished_at"] + self.every_s if self.last_run else 0.0
        return {"name": self.name, "kind": self.kind, "location": self.location,
                "access": self.rules.json(), "every_s": self.every_s, "files": self.files,
                "last_run": self.last_run, "running": self.running is not None,
                "next_run_at": next_at}  # fmt: skip

    def source(self) -> Source:
        return open_source(self.name, self.kind, self.location, self.rules.posix)


class SourceNotFoundError(DocumentNotFoundError):
    """No source of that name in the tenant."""


def no_source(name: str) -> SourceNotFoundError:
    return SourceNotFoundError(
        f"no source {name!r} in this tenant; `grounded sources list` names them", param="name"
    )


def check_name(name: str) -> str:
    if not name or len(name) > 64 or not set(name) <= _NAME_CHARS:
        raise InvalidRequestError(
            f"source name {name!r}: 1 to 64 lowercase letters, digits, '-' or '_'", param="name"
        )
    return name


def parse_every(text: str | None) -> float | None:
    """``30s``, ``10m``, ``2h``, ``1d``: seconds; None: on demand only."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", text)
    if not match or int(match[1]) == 0:
        raise InvalidRequestError(f"every {text!r}: a duration such as 10m, 1h or 1d",
                                  param="every")  # fmt: skip
    return int(match[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86_400}[match[2]]


def checked(
    name: str,
    spec: str,
    *,
    access: str | None = None,
    rules: list[str] = (),  # type: ignore[assignment]
    every: str | None = None,
    posix: bool = False,
    names: list[str] = (),  # type: ignore[assignment]
) -> Declared:
    """A source as an operator wrote it (the CLI's options, the HTTP API's fields), checked
    and listed once, so that a source that cannot be reached (a wrong path, URL or
    credentials) is refused now rather than at its first run; ``add`` keeps it."""
    kind, location = parse_location(spec)
    if posix and kind != "folder":
        raise InvalidRequestError(
            f"access_from posix: only folder sources carry POSIX permissions ({kind} has "
            "none that reach Grounded); give rules or a default access instead",
            param="access_from",
        )
    declared = Declared(check_name(name), kind, location,
                        AccessRules.parse(access, list(rules), posix, list(names)),
                        parse_every(every))  # fmt: skip
    next(iter(declared.source().entries()), None)
    return declared


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
            "source_files f WHERE f.source = s.name), running FROM sources s ORDER BY name"
        ).fetchall()
    return [Declared(name, kind, location, AccessRules.of_json(json.loads(access)), every,
                     _json(last), files, _json(running))
            for name, kind, location, access, every, last, files, running in rows]  # fmt: skip


def _json(stored: str | None):
    return json.loads(stored) if stored else None


def due_sources(directory: Path, now: float) -> list[str]:
    """The sources of the shard in ``directory`` whose interval has passed, read without
    opening the shard (a scheduler asks this of every tenant, often)."""
    try:
        db = sqlite3.connect(f"file:{directory / 'shard.sqlite3'}?mode=ro", uri=True)
    except sqlite3.Error:
        return []
    try:
        rows = db.execute(
            "SELECT name, every_s, last_run FROM sources WHERE every_s IS NOT NULL"
        ).fetchall()
    except sqlite3.Error:  # a shard from before sources, or none yet
        return []
    finally:
        db.close()
    return [name for name, every, last in rows
            if last is None or json.loads(last)["finished_at"] + every <= now]  # fmt: skip


def get(shard: TenantShard, name: str) -> Declared:
    for declared in listed(shard):
        if declared.name == name:
            return declared
    raise no_source(name)


def remove(shard: TenantShard, name: str, keep_documents: bool = False) -> int:
    """The source forgotten, and the documents it held deleted (or, with
    ``keep_documents``, kept as the tenant's own); how many it held."""
    with shard.transaction(write=True) as db:
        held = db.execute("SELECT doc_id FROM source_files WHERE source = ?", (name,))
        doc_ids = [row[0] for row in held]
        if not db.execute("DELETE FROM sources WHERE name = ?", (name,)).rowcount:
            raise no_source(name)
    if not keep_documents:
        for doc_id in doc_ids:
            with contextlib.suppress(DocumentNotFoundError):
                shard.delete_document(doc_id)
    return len(doc_ids)


def claim(shard: TenantShard, name: str, now: float) -> None:
    """Mark a run of ``name`` under way; ConflictError while another runs: one that has
    reported within STALE_S, from a process still alive (a run whose process died, killed
    or restarted, is resumed at once)."""
    with shard.transaction(write=True) as db:
        row = db.execute("SELECT running FROM sources WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise no_source(name)
        check_idle(name, _json(row[0]), now)
        db.execute("UPDATE sources SET running = ? WHERE name = ?", (_running(now), name))


def check_idle(name: str, running: dict | None, now: float) -> None:
    """ConflictError while a run of ``name`` is alive."""
    if running is not None and _alive(running, now):
        raise ConflictError(
            f"source {name!r} is being synced (its run last reported {now - running['at']:.0f} "
            "s ago); wait for it to end", param="name",
        )  # fmt: skip


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
