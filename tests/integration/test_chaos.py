"""Chaos: replicas of the running appliance killed in the middle of requests.

What a client must see: a stream that was cut ends with an error event it can recognise (the
openai SDK raises it), a request that failed before anything was sent is a 503 with
Retry-After, never a hang or a bare 500; budget leases are settled (none left open); the
replica comes back by itself and the next requests succeed."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable

import openai
import pytest
import ray

from tests.appliances import with_handbook
from tests.conftest import CORPUS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUESTION = [{"role": "user", "content": "How many days of annual leave do employees get?"}]
RECOVERY_S = 240


@pytest.fixture(scope="module")
def chaos(shared_appliance):
    """The shared appliance (this module runs last on it) and a tenant of its own."""
    running, config = shared_appliance
    _, client = with_handbook(running, config, "chaos")
    return client, config


def kill_replica(deployment: str) -> None:
    """SIGKILL-like: the replica's actor dies at once; Serve's controller replaces it."""
    (actor,) = [a for a in ray.util.list_named_actors(all_namespaces=True)
                if "SERVE_REPLICA" in a["name"] and f"#{deployment}#" in a["name"]]  # fmt: skip
    ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)


def open_leases(config) -> int:
    with sqlite3.connect(config.data_dir / "usage.sqlite") as db:
        return db.execute("SELECT count(*) FROM leases").fetchone()[0]


def admitted_for(config, seconds: float) -> Callable[[], bool]:
    """A ``started`` for killed_during: a request was admitted (its budget lease is open) at
    least ``seconds`` ago, time for it to have reached the replica and be running there."""
    admitted_at: list[float] = []

    def started() -> bool:
        if not admitted_at and open_leases(config):
            admitted_at.append(time.monotonic())
        return bool(admitted_at) and time.monotonic() - admitted_at[0] > seconds

    return started


def killed_during(call: Callable[[], object], deployment: str, started: Callable[[], bool]):
    """Run ``call`` in a thread, kill ``deployment``'s replica once ``started()`` holds while
    the call is still running, and return what the call raised (None if it succeeded)."""
    outcome: list[BaseException | None] = []

    def run():
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not started():
        assert thread.is_alive() and time.monotonic() < deadline, "the call never got going"
        time.sleep(0.05)
    assert thread.is_alive(), "the call ended before the replica could be killed"
    kill_replica(deployment)
    thread.join(RECOVERY_S)
    assert not thread.is_alive(), "the client hung after the replica died"
    return outcome[0]


def unavailable(failure: BaseException | None) -> None:
    """What a client must get when a replica dies under its request: 503 with Retry-After."""
    assert isinstance(failure, openai.APIStatusError), failure
    assert failure.status_code == 503, failure
    assert failure.response.headers.get("retry-after"), failure.response.headers
    assert failure.body["type"] == "service_unavailable", failure.body


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


def ask(client, max_tokens: int = 4):
    return client.chat.completions.create(
        model="grounded", messages=QUESTION, max_tokens=max_tokens
    )


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
    served_again(lambda: ask(client))
    assert ask(client).usage.completion_tokens > 0
    assert open_leases(config) == 0


def test_a_generator_killed_during_a_plain_request_gives_503_with_retry_after(chaos):
    client, config = chaos
    unavailable(killed_during(lambda: ask(client, 3000), "Generator", admitted_for(config, 1.0)))
    assert open_leases(config) == 0, "the killed request's reservation was settled"
    served_again(lambda: ask(client))
    assert ask(client).usage.completion_tokens > 0


def test_an_embedder_killed_during_an_embeddings_request_gives_503(chaos):
    """Until the replacement replica is up, questions and embeddings are 503 with Retry-After
    too (the embedder embeds every question)."""
    client, config = chaos
    texts = [f"passage {i}: " + "annual leave is accrued monthly and carried over " * 12
             for i in range(2048)]  # fmt: skip
    embed = lambda inputs: client.embeddings.create(model="grounded", input=inputs)  # noqa: E731
    # A kill between admission and dispatch is not this test's case: Serve's router then hands
    # the request to the replacement replica and it succeeds.
    unavailable(killed_during(lambda: embed(texts), "Embedder", admitted_for(config, 1.5)))
    assert open_leases(config) == 0
    print("failures while the embedder restarted:", served_again(lambda: ask(client)))
    served_again(lambda: embed(["annual leave"]))
    assert len(embed(texts[:4]).data) == 4
    assert open_leases(config) == 0


def test_shards_killed_during_an_upload_leave_no_half_written_file(chaos):
    """The replica dies while it chunks and embeds the upload: the client gets 503, questions
    are 503 with Retry-After until the replacement is up, no file is half-written (the upload
    was stored before its ingestion: the new replica resumes it, or it is not listed at all),
    and the same upload then goes through whole."""
    client, config = chaos
    before = {f.filename for f in client.files.list().data}
    words = (CORPUS / "acme" / "employee-handbook.md").read_text().split()
    rng = random.Random(14)
    # 251 chunks: 8.8 s and 17 CPU-s of ingestion in-process on an idle machine here, well past
    # the kill 2 s after sending (1,500 paragraphs took 27 s and 50 CPU-s, and are ingested
    # again when the new replica resumes the upload)
    text = "\n\n".join(" ".join(rng.choices(words, k=60)) + "." for _ in range(500))
    upload = lambda: client.files.create(  # noqa: E731
        file=("large-notes.md", text.encode()), purpose="assistants"
    )
    sent_at = time.monotonic()
    unavailable(killed_during(upload, "Shards", lambda: time.monotonic() - sent_at > 2.0))
    print("failures while the shards restarted:", served_again(lambda: ask(client)))
    assert client.vector_stores.search("vs_chaos", query="annual leave").data
    assert open_leases(config) == 0
    after = {f.filename: f.status for f in client.files.list().data}
    assert set(after) - before <= {"large-notes.md"}, after
    assert after.get("large-notes.md", "uploaded") in ("uploaded", "processed"), after
    stored = upload()
    deadline = time.monotonic() + RECOVERY_S  # the resumed ingestion may still be running
    while stored.status == "uploaded" and time.monotonic() < deadline:
        time.sleep(2)
        stored = client.files.retrieve(stored.id)
    assert stored.status == "processed", stored
    assert {f.filename for f in client.files.list().data} == before | {"large-notes.md"}
    assert client.files.content(stored.id).content == text.encode()  # the whole upload
    paragraphs = text.split("\n\n")
    content = client.files.content(stored.id, extra_query={"format": "text"}).text
    assert content.count(paragraphs[-1]) == content.count(paragraphs[0]) == 1, "once, whole"
