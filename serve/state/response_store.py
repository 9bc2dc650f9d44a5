"""Stored responses (``store: true``), per tenant: what ``GET /v1/responses/{id}``,
``input_items`` and ``previous_response_id`` read.

The ``responses`` store (serve/state/database.py): one SQLite database beside the usage ledger
(``responses.sqlite``, in backups too), or a schema on the PostgreSQL server of several nodes.
Every read and delete names the tenant with the id, so another tenant's response id is simply
absent: the same 404 as an id that never existed. Inside a tenant a response is read by the
identity that created it (``owner``: its user, or its key), and by admins (``owner`` None when
reading); responses stored before owners were recorded stay readable by the whole tenant.
Each response records the documents it quoted (``documents``, with those of the responses it
continues): the Gateway shows it only while the caller may still read every one of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from index.errors import DocumentNotFoundError
from serve.state.database import StateConfig, open_database

DB_NAME = "responses.sqlite"

MIGRATIONS = (  # serve/state/database.py: each applied once
    """
CREATE TABLE IF NOT EXISTS responses (
    tenant      TEXT NOT NULL,
    id          TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    body        TEXT NOT NULL,   -- the response object, as returned
    input_items TEXT NOT NULL,   -- JSON list of the request's input items, with their ids
    history     TEXT NOT NULL,   -- JSON [[role, text], ...]: the conversation up to and with it
    owner       TEXT,            -- the identity that created it (user:<name> or key:<id>)
    PRIMARY KEY (tenant, id)
)
""",
    # The documents it quoted (and those its earlier turns quoted): a JSON list of ids.
    "ALTER TABLE responses ADD COLUMN documents TEXT",
)


class ResponseNotFoundError(DocumentNotFoundError):
    pass


def response_not_found(response_id: str) -> ResponseNotFoundError:
    return ResponseNotFoundError(
        f"no response {response_id!r}: it does not exist, was deleted, or was created with "
        "store: false",
        param="response_id",
    )


class ResponseStore:
    def __init__(self, data_dir: Path, state: StateConfig | None = None) -> None:
        """The ``responses`` store (serve/state/database.py): ``<data_dir>/responses.sqlite``,
        or the PostgreSQL server of ``state``."""
        self.db = open_database(state or StateConfig(), data_dir, "responses", MIGRATIONS)
        if self.db.dialect == "sqlite":  # a file from before owners were recorded
            with self.db.transaction() as db:
                if "owner" not in {row[1] for row in db.execute("PRAGMA table_info(responses)")}:
                    db.execute("ALTER TABLE responses ADD COLUMN owner TEXT")

    def close(self) -> None:
        self.db.close()

    def save(
        self,
        tenant: str,
        response: dict[str, Any],
        input_items: list[dict[str, Any]],
        history: list[tuple[str, str]],
        owner: str | None = None,
        documents: list[str] = (),
    ) -> None:
        with self.db.transaction() as db:
            db.execute(
                "INSERT INTO responses(tenant, id, created_at, body, input_items, history, owner,"
                " documents) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (tenant, response["id"], response["created_at"], json.dumps(response),
                 json.dumps(input_items), json.dumps(history), owner,
                 json.dumps(sorted(set(documents)))),
            )  # fmt: skip

    def _row(self, tenant: str, owner: str | None, response_id: str, columns: str) -> tuple:
        mine = "" if owner is None else " AND (owner = ? OR owner IS NULL)"
        with self.db.read() as db:
            row = db.execute(
                f"SELECT {columns} FROM responses WHERE tenant = ? AND id = ?{mine}",
                (tenant, response_id, *(() if owner is None else (owner,))),
            ).fetchone()
        if row is None:
            raise response_not_found(response_id)
        return row

    def read(
        self, tenant: str, owner: str | None, response_id: str, part: str
    ) -> tuple[Any, list[str]]:
        """(``part``, the documents the response quoted): ``body`` (the response object),
        ``history`` (the conversation it ended: [role, text] turns, oldest first) or
        ``input_items``."""
        if part not in ("body", "history", "input_items"):
            raise ValueError(f"not a part of a stored response: {part!r}")
        value, documents = self._row(tenant, owner, response_id, f"{part}, documents")
        return json.loads(value), json.loads(documents or "[]")

    def delete(self, tenant: str, owner: str | None, response_id: str) -> None:
        self._row(tenant, owner, response_id, "id")
        with self.db.transaction() as db:
            db.execute("DELETE FROM responses WHERE tenant = ? AND id = ?", (tenant, response_id))
