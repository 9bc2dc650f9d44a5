"""One replica of the nemesis run (tests/nemesis.py): Grounded's HTTP app (serve/http/app.py,
keys on the state server) over a ShardHost of its own, as a Shards replica on its own node
(``<data dir>/nodes/<node>``). Its shard host reaches PostgreSQL through SHARDS_URL (the
parent's fault-injecting proxy), the rest (keys, audit) through STATE_URL: as in the appliance,
where the ingress and a Shards replica are separate processes, often on separate nodes, and
a Shards replica may lose the state server while the ingress still reaches it. No Ray: the
parent routes each request to a replica, and retries on another when a replica answers that
it does not own the tenant.

    python -m tests.integration.nemesis_replica STATE_URL SHARDS_URL DATA_DIR NODE PORT LEASE_S
"""

from __future__ import annotations

import sys
from functools import partial

import numpy as np
import uvicorn
from pydantic import SecretStr

from index.service import IndexService
from index.testing import HashingEmbedder
from serve.config import load_config
from serve.deployments.searcher import RemoteSearcher
from serve.http.app import create_app
from serve.http.gateway import Gateway
from serve.http.guard import RequestGuard
from serve.identity.keys import KeyStore
from serve.identity.oidc import Authenticator
from serve.query.pipeline import QueryPipeline
from serve.shards.host import ShardHost
from serve.shards.tenant import TenantShards
from serve.testing import FixedPlacement, LocalShards, ScriptedGenerator


class Embedder:
    """The Embedder deployment's handle, in this process."""

    def __init__(self) -> None:
        self.model = HashingEmbedder()

        class Method:
            @staticmethod
            async def remote(text: str, tenant: str, model_id: str) -> np.ndarray:
                return self.model.embed_query(text)

        self.embed_query = Method


def main() -> None:
    url, shards_url, data_dir, node, port, lease_s = sys.argv[1:7]
    config = load_config(None, data_dir=data_dir, query={"min_dense_score": 0.0},
                         state={"url": url, "shard_lease_s": float(lease_s),
                                "snapshot_every": 25, "connect_timeout_s": 3,
                                "statement_timeout_s": 5, "lock_timeout_s": 5})  # fmt: skip
    embedder = HashingEmbedder()
    linked = config.model_copy(update={"state": config.state.model_copy(
        update={"url": SecretStr(shards_url)})})  # fmt: skip
    start = lambda root: IndexService(config.index, root, embedder=embedder).start()  # noqa: E731
    host = ShardHost(linked, start, FixedPlacement(node))
    shards = LocalShards(host)
    pipeline = QueryPipeline(RemoteSearcher(Embedder(), shards), ScriptedGenerator("No."),
                             config.query)  # fmt: skip
    who = Authenticator(KeyStore(config.data_dir, config.state), None)

    async def embed(texts: list[str]):
        return embedder.embed_documents(texts), sum(len(t.split()) for t in texts)

    gateway = Gateway(config, who, pipeline, pipeline.generator, embed,
                      partial(TenantShards, shards))  # fmt: skip
    app = create_app(gateway, RequestGuard(who, config.index.limits.max_bytes))
    uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning")


if __name__ == "__main__":
    main()
