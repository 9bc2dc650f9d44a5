"""The Ingress deployment: the HTTP app of serve/http/app.py over one Gateway built in the replica
from the other deployments' handles."""

from __future__ import annotations

import logging
from functools import partial

from serve.config import AppConfig
from serve.deployments.generator import RemoteGenerator
from serve.deployments.reranker import RemoteReranker
from serve.deployments.searcher import RemoteSearcher
from serve.http.app import create_app
from serve.http.gateway import Gateway
from serve.http.guard import RequestGuard
from serve.identity.keys import key_store
from serve.identity.oidc import Authenticator
from serve.query.generation import ChatTokenizer
from serve.query.pipeline import QueryPipeline
from serve.shards.tenant import TenantShards
from serve.tracing import setup_tracing

log = logging.getLogger("grounded")


class Ingress:
    """The HTTP entry: the app of serve/http/app.py over one Gateway (keys, budgets, fair
    admission, accounting) built here from the other deployments' handles."""

    def __init__(self, config: AppConfig, embedder, shards, generators: dict, reranker=None):
        """``generators``: model name -> (its model folder, its deployment's handle)."""
        setup_tracing(config.serve.tracing)
        keys = Authenticator(key_store(config), config.auth.oidc)
        settings = config.generator.configs()
        remote = {
            name: RemoteGenerator(ChatTokenizer.from_folder(folder), handle,
                                  settings[name].max_model_len)
            for name, (folder, handle) in generators.items()
        }  # fmt: skip
        judge = RemoteReranker(reranker) if reranker is not None else None
        pipeline = QueryPipeline(RemoteSearcher(embedder, shards), remote, config.query, judge,
                                 config.generator.route,
                                 config.generator.check_thresholds())  # fmt: skip
        gateway = Gateway(
            config, keys, pipeline, pipeline.generator,
            embed=lambda texts: embedder.embed.remote(texts),
            tenant_shards=partial(TenantShards, shards),
        )  # fmt: skip
        self.http = create_app(gateway, RequestGuard(keys, config.index.limits.max_bytes))

    def __serve_build_asgi_app__(self):  # Serve asks for the app once the replica is built
        return self.http
