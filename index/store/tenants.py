"""Tenant ids and where their shards live: ``<data_dir>/tenants/<tenant>/``."""

from __future__ import annotations

import re
from pathlib import Path

from index.errors import InvalidTenantError

# Lowercase only: on a case-insensitive filesystem "Acme" and "acme" would share a directory.
TENANT_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def validate_tenant(tenant: str) -> str:
    """Return ``tenant`` if it is a safe id, else refuse it (no path tricks can pass)."""
    if not isinstance(tenant, str) or not TENANT_ID.fullmatch(tenant):
        raise InvalidTenantError(
            f"invalid tenant id {tenant!r}: use 1-63 characters of lowercase letters, digits, "
            "'-' and '_', starting with a letter or digit"
        )
    return tenant


class TenantDirectory:
    """Maps tenant ids to shard directories under one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.root = self.data_dir / "tenants"

    def path_for(self, tenant: str) -> Path:
        path = (self.root / validate_tenant(tenant)).resolve()
        if path.parent != self.root.resolve():  # belt and braces: never outside the root
            raise InvalidTenantError(f"tenant id {tenant!r} resolves outside the data directory")
        return path

    def exists(self, tenant: str) -> bool:
        return (self.path_for(tenant) / "shard.sqlite3").is_file()

    def tenants(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if TENANT_ID.fullmatch(p.name) and p.is_dir()
        )
