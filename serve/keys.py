"""API keys: bearer secrets that map to one tenant and a set of scopes (DESIGN.md decision 5).

Only the SHA-256 of each key is stored (keys are 256-bit random secrets, so a fast hash is
enough), in ``<data_dir>/keys.json``, written atomically under a file lock so that several
`grounded keys` commands and the running appliance never see a half-written file. The appliance
re-reads the file when it changes, so a created or revoked key takes effect without a restart.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import secrets
import time
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from index.access import parse_access, principals_of
from index.durable import write_atomic
from index.errors import AuthenticationError, InvalidRequestError, PermissionDeniedError
from index.store.tenants import validate_tenant
from serve.budgets import Budget

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
    budget: dict[str, int] | None = None  # this key's own limits (serve/budgets.py Budget)
    user: str | None = None  # who uses it, for documents restricted to users (index/access.py)
    groups: tuple[str, ...] = ()  # the groups it reads as

    @property
    def identity(self) -> str:
        """Who it stands for: its user, else the key itself (stored responses are theirs)."""
        return f"user:{self.user}" if self.user else f"key:{self.id}"

    @property
    def owner(self) -> str | None:
        """Whose stored responses it reads: its identity's; None (all) for an admin key."""
        return None if "admin" in self.scopes else self.identity

    @property
    def readers(self) -> frozenset[str] | None:
        """The principals its searches and file reads are limited to; None (every document
        of the tenant) for an ``admin`` key."""
        return None if "admin" in self.scopes else principals_of(self.user, self.groups)

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


class KeyStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "keys.json"
        self._cache: dict[str, ApiKey] = {}
        self._stamp: tuple[int, int] | None = None

    @contextmanager
    def _locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> list[ApiKey]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidRequestError(f"cannot read the key file {self.path}: {exc}") from exc
        return [
            ApiKey(
                **{**item, "scopes": tuple(item["scopes"]), "groups": tuple(item.get("groups", ()))}
            )
            for item in raw["keys"]
        ]

    def _write(self, keys: list[ApiKey]) -> None:
        payload = json.dumps({"keys": [asdict(k) for k in keys]}, indent=2)
        write_atomic(self.path, payload.encode("utf-8"), mode=0o600)

    def list(self) -> list[ApiKey]:
        return self._read()

    def create(
        self,
        tenant: str,
        scopes: Iterable[str] = DEFAULT_SCOPES,
        name: str = "",
        user: str | None = None,
        groups: Iterable[str] = (),
    ) -> tuple[ApiKey, str]:
        """A new key for ``tenant`` (used by ``user``, reading as ``groups``: documents
        restricted to them, index/access.py); the secret is returned once and never stored."""
        validate_tenant(tenant)
        groups = tuple(dict.fromkeys(g.strip() for g in groups if g.strip()))
        named = [*([f"user:{user}"] if user else []), *(f"group:{g}" for g in groups)]
        parse_access(named, param="user" if user and not groups else "groups")  # well formed
        secret = PREFIX + secrets.token_urlsafe(32)
        key = ApiKey(
            id="key_" + secrets.token_hex(6), tenant=tenant, scopes=parse_scopes(scopes),
            sha256=_digest(secret), name=name, created_at=time.time(), user=user or None,
            groups=groups,
        )  # fmt: skip
        with self._locked():
            self._write([*self._read(), key])
        return key, secret

    def set_budget(self, key_id: str, budget: Budget, *, keep: bool = False) -> ApiKey:
        """Replace a key's own limits (an empty Budget removes them), or with ``keep`` only
        those ``budget`` sets; the appliance picks the change up on its next request."""
        with self._locked():
            keys = self._read()
            for index, key in enumerate(keys):
                if key.id == key_id:
                    kept = (key.budget or {}) if keep else {}
                    limits = {**kept, **budget.model_dump(exclude_none=True)} or None
                    keys[index] = replace(key, budget=limits)
                    self._write(keys)
                    return keys[index]
        raise InvalidRequestError(f"no API key with id {key_id!r}; see `grounded keys list`")

    def revoke(self, key_id: str) -> ApiKey:
        with self._locked():
            keys = self._read()
            for index, key in enumerate(keys):
                if key.id == key_id:
                    if key.active:
                        keys[index] = replace(key, revoked_at=time.time())
                        self._write(keys)
                    return keys[index]
        raise InvalidRequestError(f"no API key with id {key_id!r}; see `grounded keys list`")

    def _active_by_digest(self) -> dict[str, ApiKey]:
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            self._cache = {k.sha256: k for k in self._read() if k.active}
            self._stamp = stamp
        return self._cache

    def authenticate(self, authorization: str | None) -> ApiKey:
        """The key behind an ``Authorization: Bearer ...`` header, or AuthenticationError."""
        scheme, _, secret = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise AuthenticationError(
                "missing API key: send the header 'Authorization: Bearer <key>' "
                "(create one with `grounded keys create --tenant <tenant>`)"
            )
        key = self._active_by_digest().get(_digest(secret.strip()))
        if key is None:
            raise AuthenticationError("unknown or revoked API key")
        return key
