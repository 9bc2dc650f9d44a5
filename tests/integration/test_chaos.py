"""Chaos: replicas of the running appliance killed in the middle of requests.

What a client must see: a stream that was cut ends with an error event it can recognise (the
openai SDK raises it), a request that failed before anything was sent is a 503 with
Retry-After, never a hang or a bare 500; budget leases are settled (none left open); the
replica comes back by itself and the next requests succeed."""

from __future__ import annotations

import sqlite3
import time

import openai
import pytest
import ray

from tests.appliances import serving_handbook, tiny_appliance_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUESTION = [{"role": "user", "content": "How many days of annual leave do employees get?"}]
RECOVERY_S = 240


@pytest.fixture(scope="module")
def chaos(tmp_path_factory):
    config = tiny_appliance_config(tmp_path_factory.mktemp("chaos"))
    with serving_handbook(config, "acme") as (_, _, client):
        yield client, config


def kill_replica(deployment: str) -> None:
    """SIGKILL-like: the replica's actor dies at once; Serve's controller replaces it."""
    (actor,) = [a for a in ray.util.list_named_actors(all_namespaces=True)
                if "SERVE_REPLICA" in a["name"] and f"#{deployment}#" in a["name"]]  # fmt: skip
    ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)


def open_leases(config) -> int:
    with sqlite3.connect(config.data_dir / "usage.sqlite") as db:
        return db.execute("SELECT count(*) FROM leases").fetchone()[0]


def served_again(call) -> list[tuple[int, str | None]]:
    """Repeat ``call`` until it succeeds; every failure on the way must be a 503 with
    Retry-After. Returns those failures."""
    failures, deadline = [], time.monotonic() + RECOVERY_S
    while True:
        try:
            call()
            return failures
        except openai.APIStatusError as exc:
            failures.append((exc.status_code, exc.response.headers.get("retry-after")))
            assert exc.status_code == 503 and exc.response.headers.get("retry-after"), failures
        assert time.monotonic() < deadline, f"not served again in {RECOVERY_S} s: {failures}"
        time.sleep(2)


def test_a_generator_killed_mid_stream_ends_the_stream_with_an_error_event(chaos):
    client, config = chaos
    stream = client.chat.completions.create(
        model="grounded", messages=QUESTION, max_tokens=3000, stream=True
    )
    received = []
    with pytest.raises(openai.APIError, match="stopped before it was complete") as failed:
        for chunk in stream:
            received.append(chunk)
            if len(received) == 3:  # the answer is being written
                kill_replica("Generator")
    assert failed.value.body["type"] == "service_unavailable"
    assert not any(c.choices and c.choices[0].finish_reason for c in received)
    ask = lambda: client.chat.completions.create(  # noqa: E731
        model="grounded", messages=QUESTION, max_tokens=4
    )
    served_again(ask)
    assert ask().usage.completion_tokens > 0
    assert open_leases(config) == 0


@pytest.mark.parametrize("deployment", ["Shards", "Embedder"])
def test_a_killed_index_replica_gives_503_with_retry_after_until_it_is_back(chaos, deployment):
    client, config = chaos
    kill_replica(deployment)
    failures = served_again(
        lambda: client.chat.completions.create(model="grounded", messages=QUESTION, max_tokens=4)
    )
    served_again(lambda: client.embeddings.create(model="grounded", input=["annual leave"]))
    found = client.vector_stores.search("vs_acme", query="annual leave")
    assert found.data, "the shard answers searches again"
    assert open_leases(config) == 0
    print(deployment, "failures while it restarted:", failures)
