"""API keys: bearer secrets that map to one tenant and a set of scopes (DESIGN.md decision 5).

Only the SHA-256 of each key is stored (keys are 256-bit random secrets, so a fast hash is
enough), in the ``keys`` store of the state layer like every other store
(serve/state/database.py): ``<data_dir>/keys.sqlite`` on one node, the state server's with
several (``state.url``). A key is looked up on each request, so one created or revoked by
`grounded keys` takes effect without a restart. A data directory that still has the
``keys.json`` of earlier versions has it imported when the store is first opened.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from index.access import Reader, parse_access, principals_of
from index.errors import AuthenticationError, InvalidRequestError, PermissionDeniedError
from index.store.tenants import validate_tenant
from serve.accounting.budgets import Budget
from serve.state.database import StateConfig, open_database

SCOPES = ("query", "ingest", "admin")
DEFAULT_SCOPES = ("query", "ingest")
PREFIX = "gk-"


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    tenant: str
    scopes: tuple[str, ...]
    sha256: str
    name: str = ""
    created_at: float = 0.0
    revoked_at: float | None = None
    budget: dict[str, int] | None = None  # its own limits (serve/accounting/budgets.py)
    user: str | None = None  # who uses it, for documents restricted to users (index/access.py)
    groups: tuple[str, ...] = ()  # the groups it reads as
    sources_in_text: bool = False  # answers list their sources in the text (chat windows)

    @classmethod
    def of(cls, item: dict) -> ApiKey:
        """A key from its JSON form (``asdict``: tuples written as lists)."""
        return cls(**{**item, "scopes": tuple(item["scopes"]),
                      "groups": tuple(item.get("groups", ()))})  # fmt: skip

    @property
    def identity(self) -> str:
        """Who it stands for: its user, else the key itself (stored responses are theirs)."""
        return f"user:{self.user}" if self.user else f"key:{self.id}"

    @property
    def owner(self) -> str | None:
        """Whose stored responses it reads: its identity's; None (all) for an admin key."""
        return None if "admin" in self.scopes else self.identity

    @property
    def reader(self) -> Reader:
        """Who it reads and writes documents as (index/access.py): every shard call takes
        it; an ``admin`` key reads and writes every document of its tenant."""
        return Reader(self.identity, principals_of(self.user, self.groups),
                      admin="admin" in self.scopes)  # fmt: skip

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @property
    def limits(self) -> Budget:
        return Budget(**(self.budget or {}))

    def require(self, scope: str) -> None:
        """``admin`` grants every scope of its tenant."""
        if scope not in self.scopes and "admin" not in self.scopes:
            raise PermissionDeniedError(
                f"this API key has the scopes {', '.join(self.scopes)}; this route needs "
                f"{scope!r}: create a key with `grounded keys create --scopes {scope}`"
            )


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(s.strip() for s in scopes if s.strip()))
    unknown = [s for s in chosen if s not in SCOPES]
    if unknown or not chosen:
        raise InvalidRequestError(
            f"unknown scopes {unknown}; use one or more of {', '.join(SCOPES)}"
            if unknown
            else f"give at least one scope of {', '.join(SCOPES)}",
            param="scopes",
        )
    return chosen


def new_key(
    tenant: str,
    scopes: Iterable[str],
    name: str,
    user: str | None,
    groups: Iterable[str],
    sources_in_text: bool = False,
) -> tuple[ApiKey, str]:
    """A new key and its secret (which is never stored)."""
    validate_tenant(tenant)
    groups = tuple(dict.fromkeys(g.strip() for g in groups if g.strip()))
    named = [*([f"user:{user}"] if user else []), *(f"group:{g}" for g in groups)]
    if named:  # well formed
        parse_access(named, param="user" if user and not groups else "groups")
    secret = PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(
        id="key_" + secrets.token_hex(6), tenant=tenant, scopes=parse_scopes(scopes),
        sha256=_digest(secret), name=name, created_at=time.time(), user=user or None,
        groups=groups, sources_in_text=sources_in_text,
    )  # fmt: skip
    return key, secret


def with_budget(key: ApiKey, budget: Budget, keep: bool) -> ApiKey:
    kept = (key.budget or {}) if keep else {}
    return replace(key, budget={**kept, **budget.model_dump(exclude_none=True)} or None)


def bearer_secret(authorization: str | None) -> str:
    scheme, _, secret = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise AuthenticationError(
            "missing API key: send the header 'Authorization: Bearer <key>' "
            "(create one with `grounded keys create --tenant <tenant>`)"
        )
    return secret.strip()


def _known(key: ApiKey | None) -> ApiKey:
    if key is None:
        raise AuthenticationError("unknown or revoked API key")
    return key


def _no_key(key_id: str) -> InvalidRequestError:
    return InvalidRequestError(f"no API key with id {key_id!r}; see `grounded keys list`")


KEY_MIGRATIONS = (  # serve/state/database.py
    """
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY, sha256 TEXT NOT NULL UNIQUE, body TEXT NOT NULL, revoked BIGINT NOT NULL
)
""",
)
KEY_FILE = "keys.json"  # where one node kept its keys before they moved to keys.sqlite
DB_NAME = "keys.sqlite"


class KeyStore:
    """The API keys, in the ``keys`` store of the state layer (serve/state/database.py):
    ``<data_dir>/keys.sqlite`` on one node, the state server with several (``state``). One
    row per key, looked up by its digest on each request, so a key created or revoked (by
    `grounded keys`, another process) takes effect at the next request, on every node."""

    def __init__(self, data_dir: Path, state: StateConfig | None = None) -> None:
        self.db = open_database(state or StateConfig(), data_dir, "keys", KEY_MIGRATIONS, "FULL")
        if self.db.dialect == "sqlite":
            os.chmod(self.db.path, 0o600)  # hashes only, but nobody else's to read
            self._adopt(Path(data_dir) / KEY_FILE)

    def close(self) -> None:
        self.db.close()

    def _adopt(self, key_file: Path) -> None:
        """A data directory from before keys.sqlite: its keys.json imported once, in one
        transaction, then renamed keys.json.imported (kept, never read again)."""
        if not key_file.is_file():
            return
        keys = read_key_file(key_file)
        with self.db.transaction() as db:
            for key in keys:
                db.execute("INSERT INTO api_keys VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                           _row(key))  # fmt: skip
        key_file.replace(key_file.with_name(KEY_FILE + ".imported"))

    @staticmethod
    def _key(body: str) -> ApiKey:
        return ApiKey.of(json.loads(body))

    def _put(self, db, key: ApiKey) -> None:
        db.execute(
            "INSERT INTO api_keys VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
            "body = excluded.body, revoked = excluded.revoked",
            _row(key),
        )

    def list(self) -> list[ApiKey]:
        with self.db.read() as db:
            rows = db.execute("SELECT body FROM api_keys ORDER BY id").fetchall()
        return sorted((self._key(body) for (body,) in rows), key=lambda k: k.created_at)

    def create(
        self,
        tenant: str,
        scopes: Iterable[str] = DEFAULT_SCOPES,
        name: str = "",
        user: str | None = None,
        groups: Iterable[str] = (),
        sources_in_text: bool = False,
    ) -> tuple[ApiKey, str]:
        """A new key for ``tenant`` (used by ``user``, reading as ``groups``: documents
        restricted to them, index/access.py; ``sources_in_text``: for a chat window, its
        answers list their sources in the text); the secret is returned once, never stored."""
        key, secret = new_key(tenant, scopes, name, user, groups, sources_in_text)
        with self.db.transaction() as db:
            self._put(db, key)
        return key, secret

    def _change(self, key_id: str, change) -> ApiKey:
        with self.db.transaction(lock=f"key:{key_id}") as db:
            row = db.execute("SELECT body FROM api_keys WHERE id = ?", (key_id,)).fetchone()
            if row is None:
                raise _no_key(key_id)
            key = change(self._key(row[0]))
            self._put(db, key)
        return key

    def set_budget(self, key_id: str, budget: Budget, *, keep: bool = False) -> ApiKey:
        """Replace a key's own limits (an empty Budget removes them), or with ``keep`` only
        those ``budget`` sets; the appliance applies the change from its next request."""
        return self._change(key_id, lambda key: with_budget(key, budget, keep))

    def revoke(self, key_id: str) -> ApiKey:
        return self._change(
            key_id, lambda key: replace(key, revoked_at=time.time()) if key.active else key
        )

    def authenticate(self, authorization: str | None) -> ApiKey:
        digest = _digest(bearer_secret(authorization))
        with self.db.read() as db:
            row = db.execute(
                "SELECT body FROM api_keys WHERE sha256 = ? AND revoked = 0", (digest,)
            ).fetchone()
        return _known(self._key(row[0]) if row else None)


def read_key_file(path: Path) -> list[ApiKey]:
    """The keys of a ``keys.json`` (earlier versions' key file), or InvalidRequestError."""
    try:
        return [ApiKey.of(item) for item in json.loads(path.read_text("utf-8"))["keys"]]
    except KeyError as exc:
        raise InvalidRequestError(f"cannot read the key file {path}: no {exc} field") from exc
    except (OSError, ValueError, TypeError) as exc:
        raise InvalidRequestError(f"cannot read the key file {path}: {exc}") from exc


def key_store(config) -> KeyStore:
    """The appliance's keys (``config``: an AppConfig): ``<data_dir>/keys.sqlite`` on one
    node, the state server's ``keys`` store where ``state.url`` is set."""
    return KeyStore(config.data_dir, config.state)


def _row(key: ApiKey) -> tuple:
    return key.id, key.sha256, json.dumps(asdict(key)), int(not key.active)
