"""RemoteSearcher: the query pipeline's Searcher in the ingress: the Embedder deployment, then
the Shards replica holding the tenant (serve/shards/tenant.py), as the asker's reader."""

from __future__ import annotations

import time

from index.errors import EmbedderChangedError
from index.types import SearchHit
from serve.metrics import metrics
from serve.query.retrieval import SearchParams
from serve.shards.tenant import TenantShards


class RemoteSearcher:
    """The query pipeline's Searcher in the appliance: embedder deployment, then the shard
    deployment with the tenant as multiplexed id (serve/shards/tenant.py). A search names
    its reader (the pipeline's options carry it): there is none that means everything."""

    def __init__(self, embedder, shards) -> None:
        self.embedder, self.shards = embedder, shards
        self.models: dict[str, str] = {}  # tenant -> the model its shard was built with

    async def search(
        self, tenant: str, query: str, k: int, params: SearchParams
    ) -> list[tuple[SearchHit, float]]:
        reader = params.search_filter.readable_by if params.search_filter else None
        if reader is None:
            raise ValueError("a search of the appliance's shards names its reader")
        shards = TenantShards(self.shards, tenant)
        if params.mode == "lexical":
            return (await shards.search(reader, query, None, None, k, params))[1]
        if tenant not in self.models:
            self.models[tenant] = await shards.embedder_model()
        for _ in range(3):  # a reindex may move the shard to another model between the calls
            started = time.perf_counter()
            vector = await self.embedder.embed_query.remote(query, tenant, self.models[tenant])
            metrics().stage.observe(time.perf_counter() - started, tags={"stage": "embed"})
            model, hits = await shards.search(reader, query, vector, self.models[tenant], k,
                                              params)  # fmt: skip
            self.models[tenant] = model
            if hits is not None:
                return hits
        raise EmbedderChangedError(f"tenant {tenant!r} is being reindexed; retry shortly")
