"""The Shards deployment: tenant shards multiplexed by tenant id (LRU) in Ray Serve replicas,
over serve/shards/host.py's ShardHost, which holds the logic (reads and writes as the caller,
uploads and their ingestion, leases, the log and its replay)."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

from ray import serve

from serve.config import AppConfig
from serve.deployments.embedder import HandleEmbedder
from serve.shards.host import ShardHost


class ReplicaPlacement:
    """Where a replica runs: its node (GROUNDED_NODE_NAME, set to something that outlives a
    restart with the node's disk, e.g. the Kubernetes node; else the Ray node id, new at each
    start), and its replica id (the holder of its leases)."""

    def node(self) -> str:
        import ray

        name = os.environ.get("GROUNDED_NODE_NAME", "")
        if name and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", name):
            raise ValueError(f"GROUNDED_NODE_NAME={name!r}: letters, digits, '.', '_', '-'")
        return name or ray.get_runtime_context().get_node_id()

    def holder(self) -> str:
        return serve.get_replica_context().replica_id.unique_id


class Shards:
    """ShardHost in a Serve replica: each call names its tenant as the multiplexed model id
    (serve/shards/tenant.py), so the replica that holds the tenant's shard serves it."""

    def __init__(self, config: AppConfig, embedder) -> None:
        def start_service(root: Path):
            from index.service import Embedders, IndexService
            from serve.query.instruction_judge import instruction_judge

            remote = Embedders(config.index, lambda c: HandleEmbedder(embedder, c))
            judge = instruction_judge(config.index.screen, config.query.rerank)
            return IndexService(config.index, root, embedders=remote,
                                instruction_judge=judge).start()  # fmt: skip

        self.host = ShardHost(config, start_service, ReplicaPlacement())
        self._watching: asyncio.Task | None = None

        async def load(tenant: str):  # Serve marks the function it wraps
            return await self.host.load_shard(tenant)

        self.host.get_shard = serve.multiplexed(
            max_num_models_per_replica=config.serve.shards_per_replica
        )(load)

    def __getattr__(self, name: str):
        """ShardHost's operations, for the tenant this request is routed for."""
        operation = getattr(ShardHost, name, None)
        if name.startswith("_") or name not in OPERATIONS or operation is None:
            raise AttributeError(name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            tenant = serve.get_multiplexed_model_id()
            return await getattr(self.host, name)(tenant, *args, **kwargs)

        return call

    def __del__(self) -> None:
        """Serve stops the replica (scaled down, upgraded, its node drained): its leases given
        back (serve/shards/host.py ``close``)."""
        if hasattr(self, "host"):
            self.host.close()

    async def check_health(self) -> None:
        """Serve asks every few seconds; a replica that holds leases without renewing them is
        restarted. The first call starts the sources' scheduler (serve/shards/sources.py)."""
        if self._watching is None:
            self._watching = asyncio.create_task(self.host.sources.watch())
        ownership = self.host.ownership
        if ownership is not None and not ownership.healthy():
            raise RuntimeError("this replica holds tenant leases but no longer renews them")

    async def placement(self) -> dict[str, Any]:
        """Where the calling tenant's shard is served: this replica's Ray node and the tenants
        it holds open (for operators and the multi-node test)."""
        await self.host.shard(serve.get_multiplexed_model_id())
        where = self.host.placement
        return {"node_id": where.node(), "replica": where.holder(),
                "tenants": sorted(self.host.loaded)}  # fmt: skip


# What the ingress calls (serve/shards/tenant.py), each with the tenant first.
OPERATIONS = frozenset({"embedder_model", "search", "upload", "files", "file", "readable", "text",
                        "content", "set_access", "delete", "attributes", "catalog",
                        "source"})  # fmt: skip
