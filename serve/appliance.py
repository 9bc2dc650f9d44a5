"""The appliance: build_app binds the deployments of serve/deployments/ (plain classes) with
``serve.deployment`` into one Serve application.

    Ingress (FastAPI: the app of serve/http/app.py over the Gateway, serve/http/gateway.py: keys,
             budgets, fair admission, accounting, the token budget and prompt)
      -> Embedder   (query embeddings: @serve.batch + LRU cache; document embeddings)
      -> Shards     (tenant shards multiplexed by tenant id, LRU; search, uploads and their
                     ingestion, files, the vector-store catalog)
      -> Generator  (vLLM AsyncLLM, prefix caching, streaming, yes/no judge for reranking;
                     one deployment per model of generator.models: generator-<name>)
      -> Reranker   (the relevance judge, when query.rerank.backend is cross-encoder)

The ingress holds the generator's tokenizer (not its engine), so budgets and prompts are
computed in front of the generator (DESIGN.md decision 10). The tenant comes from the API key
alone; every shard call carries it as the multiplexed model id.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ray import serve

from serve.config import AppConfig
from serve.deployments.embedder import Embedder
from serve.deployments.generator import Generator
from serve.deployments.ingress import Ingress
from serve.deployments.reranker import Reranker
from serve.deployments.resources import deployment_options, generator_deployments
from serve.deployments.shards import Shards
from serve.engine.models import resolve_model

log = logging.getLogger("grounded")


# --- The application --------------------------------------------------------------------


def generator_env(config: AppConfig) -> dict[str, str]:
    threads = config.serve.generator_threads or os.cpu_count() or 1
    env = {
        "OMP_NUM_THREADS": str(threads),  # Ray sets 1 for fractional num_cpus
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    for name in ("VLLM_LOGGING_LEVEL", "VLLM_CACHE_ROOT", "VLLM_RPC_BASE_PATH",
                 "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_OMP_THREADS_BIND"):  # fmt: skip
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def build_app(config: AppConfig | dict | None = None):
    """The Serve application (also the import path of configs/serve.yaml: its args are the
    config file's fields, or {"config": PATH})."""
    from serve.config import load_config

    if config is None or isinstance(config, dict):
        args = dict(config or {})
        path = args.pop("config", None) or os.environ.get("GROUNDED_CONFIG")
        config = load_config(Path(path) if path else None, **args)
    env = {"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}}

    def options(name: str, runtime_env=env) -> dict[str, Any]:
        return deployment_options(config, name, runtime_env=runtime_env)

    embedder = serve.deployment(Embedder).options(**options("embedder")).bind(config)
    shards = serve.deployment(Shards).options(**options("shards")).bind(config, embedder)
    generators = {}  # model name -> (its folder, its deployment)
    for model, (deployment, generator, _) in generator_deployments(config).items():
        folder = resolve_model(generator.model, config.data_dir)
        engine_env = {"env_vars": generator_env(config)}
        generators[model] = (folder, serve.deployment(Generator).options(
            name=deployment,
            **deployment_options(config, deployment, model=model, runtime_env=engine_env),
        ).bind(config, folder, name=model))  # fmt: skip
    reranker = None
    if config.query.rerank.backend == "cross-encoder":  # the generator judges in its own replica
        reranker = serve.deployment(Reranker).options(**options("reranker")).bind(config)
    ingress = serve.deployment(serve.ingress()(Ingress))
    return ingress.options(**options("ingress")).bind(
        config, embedder, shards, generators, reranker
    )
