"""Stored responses (``store: true``), per tenant: what ``GET /v1/responses/{id}``,
``input_items`` and ``previous_response_id`` read.

The ``responses`` store (serve/state.py): one SQLite database beside the usage ledger
(``responses.sqlite``, in backups too), or a schema on the PostgreSQL server of several nodes.
Every read and delete names the tenant with the id, so another tenant's response id is simply
absent: the same 404 as an id that never existed. Inside a tenant a response is read by the
identity that created it (``owner``: its user, or its key), and by admins (``owner`` None when
reading); responses stored before owners were recorded stay readable by the whole tenant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from index.errors import DocumentNotFoundError
from serve.state import StateConfig, open_database

DB_NAME = "responses.sqlite"

MIGRATIONS = (  # serve/state.py: each applied once
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
)


class ResponseNotFoundError(DocumentNotFoundError):
    pass


class ResponseStore:
    def __init__(self, data_dir: Path, state: StateConfig | None = None) -> None:
        """The ``responses`` store (serve/state.py): ``<data_dir>/responses.sqlite``, or the
        PostgreSQL server of ``state``."""
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
    ) -> None:
        with self.db.transaction() as db:
            db.execute(
                "INSERT INTO responses(tenant, id, created_at, body, input_items, history, owner)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (tenant, response["id"], response["created_at"], json.dumps(response),
                 json.dumps(input_items), json.dumps(history), owner),
            )  # fmt: skip

    def _row(self, tenant: str, owner: str | None, response_id: str, columns: str) -> tuple:
        mine = "" if owner is None else " AND (owner = ? OR owner IS NULL)"
        with self.db.read() as db:
            row = db.execute(
                f"SELECT {columns} FROM responses WHERE tenant = ? AND id = ?{mine}",
                (tenant, response_id, *(() if owner is None else (owner,))),
            ).fetchone()
        if row is None:
            raise ResponseNotFoundError(
                f"no response {response_id!r}: it does not exist, was deleted, or was created "
                "with store: false",
                param="response_id",
            )
        return row

    def get(self, tenant: str, owner: str | None, response_id: str) -> dict[str, Any]:
        return json.loads(self._row(tenant, owner, response_id, "body")[0])

    def history(self, tenant: str, owner: str | None, response_id: str) -> list[tuple[str, str]]:
        """The conversation that ``response_id`` ended: its earlier turns, its input and its
        answer, oldest first."""
        row = self._row(tenant, owner, response_id, "history")
        return [tuple(turn) for turn in json.loads(row[0])]

    def input_items(self, tenant: str, owner: str | None, response_id: str) -> list[dict]:
        return json.loads(self._row(tenant, owner, response_id, "input_items")[0])

    def delete(self, tenant: str, owner: str | None, response_id: str) -> None:
        self._row(tenant, owner, response_id, "id")
        with self.db.transaction() as db:
            db.execute("DELETE FROM responses WHERE tenant = ? AND id = ?", (tenant, response_id))
