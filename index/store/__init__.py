"""Tenant shards: SQLite (source of truth) + FTS5 + FAISS (derived)."""

from index.store.rows import Manifest, PreparedDocument, ShardStats
from index.store.shard import TenantShard
from index.store.tenants import TenantDirectory, validate_tenant

__all__ = [
    "Manifest",
    "PreparedDocument",
    "ShardStats",
    "TenantDirectory",
    "TenantShard",
    "validate_tenant",
]
