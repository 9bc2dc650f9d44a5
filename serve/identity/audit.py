"""The audit trail: who asked or read what, and what they were shown.

Every answer (chat completions, responses), search (vector-store search) and file read (a
file's content) appends one entry: when, the tenant, the identity (its user, else its key),
its key id and groups, the endpoint, the question (unless ``audit.store_questions`` is off),
the documents retrieved and those cited, and whether it abstained. ``grounded audit`` filters
the trail by tenant, user, document and time and writes it as JSON lines.

The trail is append-only (entries are never changed; those older than ``audit.retention_days`` are
dropped) and durable: one SQLite database in WAL mode with ``synchronous=FULL`` (or, with several
nodes, the ``audit`` store of the state server: serve/state/database.py), each entry committed
before the request it records is answered.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from serve.state.database import StateConfig, open_database

DB_NAME = "audit.sqlite"
DAY = 86_400
PRUNE_EVERY = 1_000  # entries appended between two retention passes

_COLUMNS = """
    tenant    TEXT NOT NULL,
    identity  TEXT NOT NULL,           -- user:<name>, or key:<id>
    key_id    TEXT NOT NULL,
    groups    TEXT NOT NULL,           -- JSON list
    endpoint  TEXT NOT NULL,
    question  TEXT,                    -- NULL when audit.store_questions is off
    retrieved TEXT NOT NULL,           -- JSON list of document ids shown to the generator
    cited     TEXT NOT NULL,           -- JSON list of document ids the answer cites
    abstained INTEGER                  -- 1 "not found", 0 answered, NULL not an answer
);
CREATE INDEX IF NOT EXISTS audit_tenant_at ON audit(tenant, at)
"""
MIGRATIONS = {  # serve/state/database.py; ids in order of appending, as each dialect makes them
    "sqlite": ("CREATE TABLE IF NOT EXISTS audit (id INTEGER PRIMARY KEY AUTOINCREMENT, "
               "at REAL NOT NULL," + _COLUMNS,),
    "postgresql": ("CREATE TABLE IF NOT EXISTS audit (id BIGSERIAL PRIMARY KEY, "
                   "at DOUBLE PRECISION NOT NULL," + _COLUMNS,),
}  # fmt: skip
# An entry that retrieved or cited a document, in each dialect's JSON.
_MENTIONS = {
    "sqlite": "(EXISTS (SELECT 1 FROM json_each(retrieved) WHERE value = ?)"
    " OR EXISTS (SELECT 1 FROM json_each(cited) WHERE value = ?))",
    "postgresql": "(jsonb_exists(retrieved::jsonb, ?) OR jsonb_exists(cited::jsonb, ?))",
}


class AuditConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    store_questions: bool = Field(
        True, description="Off: entries keep who, when, what was shown, not the question."
    )
    retention_days: int = Field(365, gt=0, description="Entries older than this are dropped.")


@dataclass(frozen=True, slots=True)
class AuditEntry:
    tenant: str
    identity: str
    key_id: str
    groups: tuple[str, ...]
    endpoint: str
    question: str | None = None
    retrieved: tuple[str, ...] = ()
    cited: tuple[str, ...] = ()
    abstained: bool | None = None


class AuditLog:
    def __init__(
        self,
        data_dir: Path,
        config: AuditConfig,
        clock: Callable[[], float] = time.time,
        state: StateConfig | None = None,
    ) -> None:
        """``state``: where the store is (default: ``<data_dir>/audit.sqlite``, each entry on
        disk before ``append`` returns)."""
        self.config, self._clock = config, clock
        self._appended = 0
        self.db = open_database(state or StateConfig(), data_dir, "audit", MIGRATIONS,
                                synchronous="FULL")  # fmt: skip

    def close(self) -> None:
        self.db.close()

    def append(self, entry: AuditEntry) -> None:
        """Record ``entry``, committed (and on disk) when this returns."""
        if not self.config.enabled:
            return
        question = entry.question if self.config.store_questions else None
        with self.db.transaction() as db:
            db.execute(
                "INSERT INTO audit(at, tenant, identity, key_id, groups, endpoint, question,"
                " retrieved, cited, abstained) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self._clock(), entry.tenant, entry.identity, entry.key_id,
                 json.dumps(list(entry.groups)), entry.endpoint, question,
                 json.dumps(list(dict.fromkeys(entry.retrieved))),
                 json.dumps(list(dict.fromkeys(entry.cited))),
                 None if entry.abstained is None else int(entry.abstained)),
            )  # fmt: skip
            self._appended += 1
            if self._appended % PRUNE_EVERY == 1:
                cutoff = self._clock() - self.config.retention_days * DAY
                db.execute("DELETE FROM audit WHERE at < ?", (cutoff,))

    def entries(
        self,
        tenant: str | None = None,
        user: str | None = None,
        document: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> Iterator[dict]:
        """The entries matching every given condition, oldest first. ``user``: the name a
        key or token gives (or a key id); ``document``: retrieved or cited."""
        sql, params = "SELECT * FROM audit WHERE 1=1", []
        conditions: Sequence[tuple[str, object]] = (
            ("tenant = ?", tenant), ("(identity = ? OR key_id = ?)", user),
            ("at >= ?", since), ("at < ?", until),
        )  # fmt: skip
        for clause, value in conditions:
            if value is not None:
                sql += f" AND {clause}"
                params += [f"user:{value}", value] if "identity" in clause else [value]
        if document is not None:
            sql += " AND " + _MENTIONS[self.db.dialect]
            params += [document, document]
        with self.db.read() as db:
            cursor = db.execute(sql + " ORDER BY id", params)
            names = [column[0] for column in cursor.description]
            rows = cursor.fetchall()
        for row in rows:
            entry = dict(zip(names, row, strict=True))
            for field in ("groups", "retrieved", "cited"):
                entry[field] = json.loads(entry[field])
            if entry["abstained"] is not None:
                entry["abstained"] = bool(entry["abstained"])
            yield entry
