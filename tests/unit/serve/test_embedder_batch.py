"""The appliance's Embedder deployment: query embeddings of several models batched together."""

import asyncio

import pytest
from ray.serve import batching

from index.errors import EmbedderMismatchError
from index.service import Embedders
from index.testing import HashingEmbedder
from serve.config import load_config
from serve.deployments.embedder import Embedder

pytestmark = pytest.mark.unit


def embedder_deployment() -> Embedder:
    """The deployment's class, constructed without Ray Serve, its models injected (fakes)."""
    config = load_config(None, index={"embedders": {"multilingual": {"model": "unused-here"}}})
    fakes = {
        "default": HashingEmbedder(64, "fake/en"),
        "multilingual": HashingEmbedder(48, "fake/fr"),
    }
    deployment = Embedder(config, Embedders(config.index, given=fakes))
    deployment._embed_batch.set_batch_wait_timeout_s(0.2)  # every call below joins one batch
    return deployment


def test_a_query_for_an_unknown_model_fails_alone_not_its_whole_batch(monkeypatch):
    # @serve.batch outside a replica: only its check against the replica's max_ongoing_requests
    # needs Serve's replica context.
    monkeypatch.setattr(
        batching._BatchQueue, "_warn_if_max_batch_size_exceeds_max_ongoing_requests", lambda _: None
    )
    deployment = embedder_deployment()

    async def ask():
        return await asyncio.gather(
            deployment.embed_query("pump oil", "acme", "fake/en"),
            deployment.embed_query("huile", "acme-fr", "fake/fr"),
            deployment.embed_query("pump", "acme", "no/such-model"),
            return_exceptions=True,
        )

    english, french, unknown = asyncio.run(ask())
    assert english.shape == (64,) and french.shape == (48,)
    assert isinstance(unknown, EmbedderMismatchError)
