"""Shared state on a real PostgreSQL server (serve/state/database.py): the usage ledger of several
ingress replicas, each its own process, deciding against one tenant's budget."""

from __future__ import annotations

import multiprocessing
import random
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from index.errors import RateLimitError
from serve.accounting.budgets import Budget, BudgetsConfig, Ledger
from serve.state.database import StateConfig, StateUnavailableError
from serve.testing import FixedPlacement

pytestmark = pytest.mark.integration

NOW = 1_800_000_030.0  # one fixed minute: every request lands in the same window
LIMIT = 10_000  # tokens per minute per tenant: far less than the requests ask for
TENANTS = [f"budgeted-{n}" for n in range(4)]  # four budgets, four races at the limit


def _replica(url: str, replica: int, requests: int, threads: int) -> list:
    """One ingress replica: ``requests`` requests at once (``threads`` in flight), each
    reserving, then settling and recording what it used, or recording its refusal."""
    config = BudgetsConfig(tenants={tenant: Budget(tokens_per_minute=LIMIT) for tenant in TENANTS})
    ledger = Ledger("/nonexistent", config, clock=lambda: NOW, state=StateConfig(url=url))
    rng = random.Random(replica)
    rounds = len(TENANTS)  # one tenant after another: both replicas at its limit together
    asks = [(TENANTS[n * rounds // requests], rng.randint(50, 400)) for n in range(requests)]

    def one(ask: tuple[str, int]) -> tuple[str, str, int]:
        tenant, tokens = ask
        try:
            lease = ledger.reserve(tenant, f"key-{replica}", Budget(), tokens)
        except RateLimitError as exc:
            ledger.record(tenant, f"key-{replica}", "refused", reason=exc.reason)
            return tenant, "refused", 0
        time.sleep(0.002)  # generating
        ledger.settle(lease, tokens)  # the worst case: it used all it reserved
        ledger.record(tenant, f"key-{replica}", "answered", prompt=tokens - 10, completion=10)
        return tenant, "answered", tokens

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(one, asks))
    ledger.close()
    return results


def test_two_replicas_never_overspend_a_budget_and_lose_no_record(postgres):
    """Each replica its own process and connection. Without the tenant's lock in
    Ledger.reserve, 4 runs of 6 overspent a budget here (by 41 to 364 tokens of 10,000)."""
    spawn = multiprocessing.get_context("spawn")
    with spawn.Pool(2) as pool:
        runs = pool.starmap(_replica, [(postgres.url, r, 500, 16) for r in (0, 1)])
    results = [r for run in runs for r in run]
    assert len(results) == 1_000
    ledger = Ledger("/nonexistent", BudgetsConfig(), clock=lambda: NOW,
                    state=StateConfig(url=postgres.url))  # fmt: skip
    for tenant in TENANTS:
        mine = [(outcome, used) for t, outcome, used in results if t == tenant]
        spent = sum(used for _, used in mine)
        answered = sum(outcome == "answered" for outcome, _ in mine)
        rows = ledger.usage(tenant)
        assert sum(row.requests for row in rows) == len(mine)  # no record lost
        assert sum(row.answered for row in rows) == answered
        assert sum(row.prompt_tokens + row.completion_tokens for row in rows) == spent
        assert ledger.used(f"tenant:{tenant}", "minute") == spent  # the window: what was used
        assert spent <= LIMIT, tenant  # never over, across both replicas
        assert answered < len(mine) and spent > LIMIT * 0.9  # the budget bit, and was spent
    ledger.close()


def test_the_ledger_says_503_while_the_server_is_down_and_reconnects(postgres):
    ledger = Ledger("/nonexistent", BudgetsConfig(), state=StateConfig(url=postgres.url))
    ledger.record("outage", "k", "answered", prompt=5)
    postgres.stop("immediate")
    try:
        with pytest.raises(StateUnavailableError) as caught:
            ledger.record("outage", "k", "answered", prompt=7)
        assert caught.value.status == 503 and "127.0.0.1" in caught.value.message
    finally:
        postgres.start()
    ledger.record("outage", "k", "answered", prompt=11)
    (row,) = ledger.usage("outage")
    assert (row.requests, row.prompt_tokens) == (2, 16)  # the refused write left nothing
    try:  # lost in the middle of a transaction: a 503 too, and its first write is undone
        with pytest.raises(StateUnavailableError), ledger.db.transaction() as db:
            db.execute("INSERT INTO requests (ts, tenant, key_id, outcome) "
                       "VALUES (1, 'outage', 'k', 'answered')")  # fmt: skip
            postgres.stop("immediate")
            db.execute("SELECT 1")
    finally:
        postgres.start()
    assert ledger.usage("outage")[0].requests == 2
    ledger.close()


def test_a_ledger_written_before_migrations_is_adopted(tmp_path):
    old = sqlite3.connect(tmp_path / "usage.sqlite")
    old.executescript(
        "CREATE TABLE windows (subject TEXT NOT NULL, window TEXT NOT NULL, "
        "start INTEGER NOT NULL, tokens INTEGER NOT NULL, PRIMARY KEY (subject, window, start));"
        "CREATE TABLE requests (ts REAL NOT NULL, tenant TEXT NOT NULL, key_id TEXT NOT NULL, "
        "outcome TEXT NOT NULL, reason TEXT, prompt INTEGER NOT NULL DEFAULT 0, "
        "cached INTEGER NOT NULL DEFAULT 0, completion INTEGER NOT NULL DEFAULT 0, "
        "cost REAL NOT NULL DEFAULT 0);"
        f"INSERT INTO requests VALUES ({NOW}, 'acme', 'k', 'answered', NULL, 40, 0, 2, 0);"
        f"INSERT INTO windows VALUES ('tenant:acme', 'minute', {int(NOW // 60 * 60)}, 42);"
    )
    old.commit()
    old.close()
    budgets = BudgetsConfig(tenants={"acme": Budget(tokens_per_minute=100)})
    ledger = Ledger(tmp_path, budgets, clock=lambda: NOW)
    (row,) = ledger.usage("acme")
    assert (row.requests, row.prompt_tokens, row.completion_tokens) == (1, 40, 2)
    with pytest.raises(RateLimitError):
        ledger.reserve("acme", "k", Budget(), 59)  # 42 already used of 100
    ledger.settle(ledger.reserve("acme", "k", Budget(), 58), 58)
    assert ledger.used("tenant:acme", "minute") == 100
    ledger.close()


def test_stored_responses_are_shared_by_replicas_and_kept_per_tenant(postgres):
    from serve.state.response_store import ResponseNotFoundError, ResponseStore

    state = StateConfig(url=postgres.url)
    one, two = ResponseStore("/nonexistent", state), ResponseStore("/nonexistent", state)
    body = {"id": "resp_1", "created_at": 1_800_000_000, "output_text": "27 days [1]"}
    one.save("acme", body, [{"id": "in_1"}], [("user", "Leave?"), ("assistant", "27")], "key:a")
    assert two.read("acme", "key:a", "resp_1", "body")[0] == body  # saved on one, read on another
    history, _ = two.read("acme", None, "resp_1", "history")
    assert history == [["user", "Leave?"], ["assistant", "27"]]
    for tenant, owner in (("other", None), ("acme", "key:b")):  # another tenant, another key
        with pytest.raises(ResponseNotFoundError):
            two.read(tenant, owner, "resp_1", "body")[0]
    two.delete("acme", "key:a", "resp_1")
    with pytest.raises(ResponseNotFoundError):
        one.read("acme", None, "resp_1", "body")[0]
    one.close()
    two.close()


def test_keys_created_on_one_node_authenticate_on_another_until_revoked(postgres, tmp_path):
    from index.errors import AuthenticationError, InvalidRequestError
    from serve.config import AppConfig
    from serve.identity.keys import key_store

    config = AppConfig(data_dir=tmp_path, state=StateConfig(url=postgres.url))
    cli, node = key_store(config), key_store(config)
    assert cli.db.dialect == "postgresql"
    key, secret = cli.create("keyed", ["query"], name="ci", user="ana", groups=["hr"])
    assert node.authenticate(f"Bearer {secret}") == key  # every field, through JSON and back
    assert cli.set_budget(key.id, Budget(tokens_per_day=500)).limits.tokens_per_day == 500
    assert node.authenticate(f"Bearer {secret}").limits.tokens_per_day == 500
    assert [k.id for k in node.list() if k.tenant == "keyed"] == [key.id]  # the server's are all
    assert cli.revoke(key.id).revoked_at is not None
    with pytest.raises(AuthenticationError):
        node.authenticate(f"Bearer {secret}")  # revoked everywhere, at once
    with pytest.raises(InvalidRequestError, match="no API key with id 'key_nope'"):
        cli.revoke("key_nope")
    assert not (tmp_path / "keys.sqlite").exists()  # nothing of it on the node's disk


def test_the_audit_trail_of_every_node_is_one_and_filters_by_document(postgres):
    from serve.identity.audit import AuditConfig, AuditEntry, AuditLog

    state, now = StateConfig(url=postgres.url), [NOW]
    one = AuditLog("/nonexistent", AuditConfig(), clock=lambda: now[0], state=state)
    two = AuditLog("/nonexistent", AuditConfig(), clock=lambda: now[0], state=state)
    one.append(AuditEntry("audited", "user:ana", "k1", ("hr",), "chat", "Leave?",
                          ("doc_a", "doc_b"), ("doc_a",), False))  # fmt: skip
    now[0] += 1
    two.append(AuditEntry("audited", "key:k2", "k2", (), "files", retrieved=("doc_c",)))
    trail = list(one.entries(tenant="audited"))
    assert [e["identity"] for e in trail] == ["user:ana", "key:k2"]  # both nodes, in order
    assert trail[0]["groups"] == ["hr"] and trail[0]["abstained"] is False
    assert [e["key_id"] for e in two.entries(tenant="audited", document="doc_a")] == ["k1"]
    assert [e["key_id"] for e in two.entries(tenant="audited", document="doc_c")] == ["k2"]
    assert [e["key_id"] for e in two.entries(user="ana", since=NOW, until=NOW + 1)] == ["k1"]
    one.close()
    two.close()


# --- each tenant shard owned by one writer: leases, fenced writes, takeover (shard_owners.py)


def ingester(service, tenant: str):
    """An upload's ingestion into a local copy, as the Shards replica does it."""
    from index.pipeline import SourceFile
    from serve.shards.ingestion import upload_id

    def ingest(file_name: str, data: bytes, access, owner=None) -> None:
        source, doc_id = f"upload:{tenant}:{file_name}", upload_id(tenant, owner, file_name)
        upload = SourceFile.from_bytes(data, file_name, source=source, doc_id=doc_id,
                                       access=access, owner=owner)  # fmt: skip
        [result] = service.pipeline(tenant).ingest([upload])
        assert result.status in ("added", "replaced", "unchanged"), result

    return ingest


def test_one_owner_at_a_time_and_a_former_owners_writes_are_fenced(postgres):
    from serve.state.shard_owners import LeaseLostError, ShardOwnedElsewhereError, ShardOwners

    owners = ShardOwners(StateConfig(url=postgres.url), lease_s=1.0)
    a = owners.acquire("fenced", "replica-a", "node-a")
    with pytest.raises(ShardOwnedElsewhereError) as refused:
        owners.acquire("fenced", "replica-b", "node-b")
    assert refused.value.status == 503 and "replica-a on node-a" in refused.value.message
    a = owners.renew(a)
    first = owners.append(a, "upload", {"file_name": "a.txt", "access": None}, b"from a")
    time.sleep(1.2)  # a pauses past its lease (a long GC, a frozen VM, a partition)
    b = owners.acquire("fenced", "replica-b", "node-b")
    assert b.token == a.token + 1
    with pytest.raises(LeaseLostError):
        owners.append(a, "delete", {"doc_id": "x"})  # refused by the server: nothing logged
    with pytest.raises(LeaseLostError):
        owners.renew(a)
    owners.append(b, "set_access", {"doc_id": "x", "access": ["user:ana"]})
    log = list(owners.entries("fenced"))
    assert [(e.op, e.data) for e in log] == [("upload", b"from a"), ("set_access", None)]
    assert log[0].seq == first and log[1].meta["access"] == ["user:ana"]
    owners.release(b)
    assert owners.acquire("fenced", "replica-c", "node-c").token == b.token + 1  # no wait
    owners.close()


def test_an_owner_killed_mid_ingest_loses_no_acknowledged_upload(postgres, tmp_path):
    """Node A owns the tenant and is killed (SIGKILL) midway through its uploads; node B,
    with its own data directory, takes the shard over once A's lease ends and replays the
    log: every upload A acknowledged is a searchable document on B."""
    import os
    import signal
    import subprocess
    import sys

    from index.config import IndexConfig
    from index.service import IndexService
    from index.testing import HashingEmbedder
    from serve.query.retrieval import SearchParams, search_tenant
    from serve.state.shard_owners import Replayed, ShardOwnedElsewhereError, ShardOwners, replay

    tenant, lease_s = "takeover", 2.0
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.shard_owner_worker", postgres.url,
         str(tmp_path / "node-a"), tenant, "400", str(lease_s)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    acknowledged = []
    assert worker.stdout.readline().strip() == "owner"
    while len(acknowledged) < 25:
        acknowledged.append(worker.stdout.readline().strip())
    os.kill(worker.pid, signal.SIGKILL)
    killed = time.monotonic()
    acknowledged += [line.strip() for line in worker.stdout if line.strip()]  # sent before
    worker.wait()

    owners = ShardOwners(StateConfig(url=postgres.url), lease_s=lease_s)
    while True:
        try:
            owners.acquire(tenant, "replica-b", "node-b")
            break
        except ShardOwnedElsewhereError as exc:
            time.sleep(min(exc.retry_after, 0.2))
    owned = time.monotonic()
    service = IndexService(IndexConfig(), tmp_path / "node-b", embedder=HashingEmbedder()).start()
    shard = service.shard(tenant, create=True)
    applied = replay(owners, tenant, Replayed(shard.directory), ingester(service, tenant), shard)
    recovered = time.monotonic()
    names = {record.file_name for record in shard.list_documents()}
    assert set(acknowledged) <= names  # recovery point: the last acknowledged upload
    lexical = SearchParams(mode="lexical")
    for name in acknowledged:  # each one found by its own words on the new owner
        marker = name.removeprefix("doc").removesuffix(".txt")
        hits = search_tenant(service, tenant, f"marker{marker}", 1, lexical)
        assert [hit.file_name for hit, _ in hits] == [name]
    assert applied >= len(acknowledged)
    print(
        f"takeover: {len(acknowledged)} acknowledged, {applied} replayed; lease free "
        f"{owned - killed:.2f} s after the kill, replayed in {recovered - owned:.2f} s"
    )
    assert owned - killed <= lease_s + 1.0
    service.close()
    owners.close()


def test_a_replica_cut_off_from_the_state_server_stops_serving_before_a_takeover(
    postgres, tmp_path
):
    """Reads are fenced (DESIGN.md decision 17), with the fault outside the code: replica A
    reaches PostgreSQL through a TCP proxy, which freezes (the connection stays open, nothing
    arrives). Past A's local deadline, B takes the tenant over and takes group:hr off a file;
    A, still cut off, never answers HR from its copy with the old list: it tries to take the
    lease again (held by the frozen link) and, once the link thaws, is refused because B
    holds it. Before the fence, A served the tenant for as long as its lease table held it."""
    import asyncio

    from index.access import OPERATOR, Reader
    from index.config import IndexConfig
    from index.errors import DocumentNotFoundError
    from index.service import IndexService
    from index.testing import HashingEmbedder
    from serve.config import load_config
    from serve.shards.host import ShardHost
    from serve.state.shard_owners import LeaseLostError, ShardOwnedElsewhereError
    from tests.faults import FreezingProxy

    proxy = FreezingProxy(("127.0.0.1", postgres.port))
    lease_s, tenant = 2.0, "fenced"
    hana = Reader("user:hana", frozenset({"user:hana", "group:hr"}))

    def replica(node: str, url: str) -> ShardHost:
        config = load_config(None, data_dir=str(tmp_path),
                             state={"url": url, "shard_lease_s": lease_s})  # fmt: skip
        start = lambda root: IndexService(IndexConfig(), root, embedder=HashingEmbedder()).start()  # noqa: E731
        return ShardHost(config, start, FixedPlacement(node))

    a = replica("a", postgres.url.replace(f":{postgres.port}/", f":{proxy.port}/"))
    b = replica("b", postgres.url)
    salary = b"The salary band for engineers is 70,000 to 90,000 euros a year."

    async def scenario():
        result, _ = await a.upload(tenant, hana, "salaries.txt", salary, 30, ("group:hr",))
        assert (await a.file(tenant, hana, result.doc_id)).access == ("group:hr",)
        proxy.freeze()
        await asyncio.sleep(lease_s + 0.5)  # A's renewals are held by the proxy
        await b.shard(tenant)  # the lease ran out on the server: B takes over, replays
        await b.set_access(tenant, OPERATOR, result.doc_id, ("group:finance",))
        read = asyncio.ensure_future(a.file(tenant, hana, result.doc_id))
        await asyncio.wait({read}, timeout=1.0)
        assert not read.done(), "A answered from its copy while cut off"
        proxy.thaw()
        with pytest.raises((ShardOwnedElsewhereError, LeaseLostError)):
            await asyncio.wait_for(read, 30)
        with pytest.raises(ShardOwnedElsewhereError):  # B holds it: the ingress resends
            await a.file(tenant, hana, result.doc_id)
        with pytest.raises(DocumentNotFoundError):  # B answers: HR no longer reads it
            await b.file(tenant, hana, result.doc_id)
        for host in (a, b):
            host.ownership.stop()

    try:
        asyncio.run(scenario())
    finally:
        proxy.close()
        for host in (a, b):
            if host.service is not None:
                host.service.close()


def test_a_stalled_state_server_leaves_health_and_the_processs_other_work_answering(
    postgres, tmp_path
):
    """Calls that wait on the state server run off the event loop, in threads of their own
    (serve/state/database.py ``off_loop``): with the server's link frozen (the TCP proxy of
    tests/faults.py) and 24 requests stalled in their key lookups, /health answers within 1 s
    (20 probes), and so does work the process runs in the default executor (the relevance
    judge, shard calls: here a stand-in). Before, the lookup ran on the event loop (/health
    waited), then in the default executor, where 24 stalled lookups held every thread."""
    import asyncio

    import httpx

    from serve.http.app import create_app
    from serve.http.guard import RequestGuard
    from serve.identity.keys import KeyStore
    from tests.faults import FreezingProxy

    proxy = FreezingProxy(("127.0.0.1", postgres.port))
    url = postgres.url.replace(f":{postgres.port}/", f":{proxy.port}/")
    keys = KeyStore(tmp_path, StateConfig(url=url))
    app = create_app(None, RequestGuard(keys, 1000))

    async def timed(call) -> float:
        started = time.monotonic()
        await asyncio.wait_for(call, 5.0)
        return time.monotonic() - started

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ingress") as client:
            proxy.freeze()
            stalled = [asyncio.ensure_future(  # keys looked up on the frozen link
                client.get("/v1/models", headers={"authorization": f"Bearer gk-not-{n}"}))
                for n in range(24)]  # fmt: skip
            await asyncio.sleep(0.5)
            health = [await timed(client.get("/health")) for _ in range(20)]
            other = [await timed(asyncio.to_thread(time.sleep, 0.01)) for _ in range(20)]
            assert max(health) < 1.0 and max(other) < 1.0, (health, other)
            assert not any(task.done() for task in stalled)  # still stalled meanwhile
            proxy.thaw()
            answers = await asyncio.wait_for(asyncio.gather(*stalled), 60)
            assert {r.status_code for r in answers} <= {401, 503}

    try:
        asyncio.run(scenario())
    finally:
        proxy.close()
        keys.close()


def test_a_process_that_vanished_holding_a_lock_neither_blocks_others_nor_keeps_it(
    postgres, tmp_path
):
    """The server's own timeouts (state.lock_timeout_s, idle_in_transaction_timeout_s): a
    process holding a tenant's lock inside a transaction vanishes (its link to PostgreSQL
    frozen by the proxy of tests/faults.py). Another waiting for the lock is refused with a
    503 after lock_timeout_s instead of waiting for TCP keepalive (hours), and the server ends
    the vanished session once it has idled in its transaction past the timeout: the lock is
    free again."""
    import threading
    from contextlib import suppress

    from serve.state.database import StateUnavailableError, open_database
    from tests.faults import FreezingProxy

    proxy = FreezingProxy(("127.0.0.1", postgres.port))
    timeouts = {"lock_timeout_s": 0.5, "idle_in_transaction_timeout_s": 1.5}
    via_proxy = StateConfig(url=postgres.url.replace(f":{postgres.port}/", f":{proxy.port}/"),
                            **timeouts)  # fmt: skip
    vanishing = open_database(via_proxy, tmp_path, "held", ())
    other = open_database(StateConfig(url=postgres.url, **timeouts), tmp_path, "held", ())
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with suppress(StateUnavailableError), vanishing.transaction(lock="tenant:acme"):
            inside.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(10)
        proxy.freeze()
        started = time.monotonic()
        refused = pytest.raises(StateUnavailableError, match="55P03")
        with refused, other.transaction(lock="tenant:acme"):
            pass
        assert time.monotonic() - started < 3 and refused.excinfo.value.status == 503
        time.sleep(1.5)  # past the vanished session's idle timeout: the server ended it
        with other.transaction(lock="tenant:acme") as db:
            assert db.execute("SELECT 1").fetchone()[0] == 1
            # and a vanished client outside a transaction: the server's keepalives find it
            assert db.execute("SHOW tcp_keepalives_idle").fetchone()[0] in ("30", "30s")
    finally:
        proxy.thaw()
        release.set()
        holder.join(30)
        proxy.close()
        other.close()


def test_an_append_committing_during_a_takeover_is_seen_by_the_new_owners_replay(postgres):
    """The fence holds at commit, not only when the INSERT ran: the old owner's append has run
    on the server, and its COMMIT is held by the proxy (tests/faults.py) past the lease. The
    takeover waits for that transaction (the append share-locks the owner row), so once the
    COMMIT lands and the append is acknowledged, the new owner's replay holds it. Before, the
    takeover went ahead at once and the acknowledged entry was behind its replay."""
    import threading

    from serve.state.shard_owners import ShardOwnedElsewhereError, ShardOwners
    from tests.faults import FreezingProxy

    proxy = FreezingProxy(("127.0.0.1", postgres.port))
    tenant, lease_s = "committing", 1.0
    via_proxy = postgres.url.replace(f":{postgres.port}/", f":{proxy.port}/")
    old = ShardOwners(StateConfig(url=via_proxy), lease_s)
    new = ShardOwners(StateConfig(url=postgres.url), lease_s)
    lease = old.acquire(tenant, "replica-old", "node-old")
    appended, taken = {}, {}

    def append() -> None:
        appended["seq"] = old.append(lease, "delete", {"doc_id": "doc-1"})

    def take_over() -> None:
        while True:
            try:
                taken["lease"] = new.acquire(tenant, "replica-new", "node-new")
                taken["log"] = [entry.seq for entry in new.entries(tenant)]
                return
            except ShardOwnedElsewhereError:
                time.sleep(0.1)

    writer, taker = threading.Thread(target=append), threading.Thread(target=take_over)
    try:
        proxy.freeze_on(b"COMMIT")
        writer.start()
        time.sleep(lease_s + 0.5)  # the INSERT ran; its COMMIT is held; the lease ran out
        taker.start()
        taker.join(1.5)
        assert taker.is_alive(), "the takeover did not wait for the append under way"
        proxy.thaw()
        writer.join(30)
        taker.join(30)
        assert appended["seq"] in taken["log"]  # acknowledged, and replayed by the new owner
    finally:
        proxy.thaw()
        proxy.close()
        old.close()
        new.close()


def test_a_write_whose_commit_reply_was_lost_is_applied_before_the_next_one(postgres, tmp_path):
    """The server commits an access change and the reply is lost (the proxy of tests/faults.py
    cuts the link as the COMMIT's reply comes back): its client gets a 503 saying the outcome is
    unknown (not the "nothing was done" of a lost link before a COMMIT), the entry is in
    the log, the owner never applied it. The owner's next write brings its copy up to the log
    first, so the owner, and any replica that replays the log, agree. Before, the owner's
    next write moved its position past the entry: the owner kept the old list."""
    import asyncio

    from index.access import OPERATOR
    from index.config import IndexConfig
    from index.service import IndexService
    from index.testing import HashingEmbedder
    from serve.config import load_config
    from serve.shards.host import ShardHost
    from serve.state.database import OutcomeUnknownError
    from tests.faults import FreezingProxy

    proxy = FreezingProxy(("127.0.0.1", postgres.port))
    config = load_config(None, data_dir=str(tmp_path), state={
        "url": postgres.url.replace(f":{postgres.port}/", f":{proxy.port}/")})  # fmt: skip
    start = lambda root: IndexService(IndexConfig(), root, embedder=HashingEmbedder()).start()  # noqa: E731
    host, tenant = ShardHost(config, start, FixedPlacement("a")), "unknown-outcome"

    async def scenario():
        first, _ = await host.upload(tenant, OPERATOR, "leave.txt", b"Leave: 27 days.", 30)
        proxy.cut_on_reply(b"COMMIT\x00", after=b"INSERT INTO shard_log")
        with pytest.raises(OutcomeUnknownError, match="may or may not have been made") as lost:
            await host.set_access(tenant, OPERATOR, first.doc_id, ("group:hr",))
        assert lost.value.status == 503 and lost.value.code == "outcome_unknown"
        assert (await host.file(tenant, OPERATOR, first.doc_id)).access is None  # not applied
        await host.upload(tenant, OPERATOR, "pay.txt", b"Pay day: the 25th.", 30)
        assert (await host.file(tenant, OPERATOR, first.doc_id)).access == ("group:hr",)
        host.ownership.stop()

    try:
        asyncio.run(scenario())
    finally:
        proxy.close()
        if host.service is not None:
            host.service.close()


def _certificates(folder, name: str):
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca.pem, cert, key)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def certificate(subject, issuer, key, signer, *, ca: bool):
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca, None), critical=True))  # fmt: skip
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)  # fmt: skip
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    ca = certificate(ca_name, ca_name, ca_key, ca_key, ca=True)
    server = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    cert = certificate(server, ca_name, key, ca_key, ca=False)
    pem = serialization.Encoding.PEM
    files = {f"{name}-ca.pem": ca.public_bytes(pem), f"{name}.crt": cert.public_bytes(pem),
             f"{name}.key": key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption())}  # fmt: skip
    for file_name, data in files.items():
        (folder / file_name).write_bytes(data)
    return tuple(folder / f for f in files)


def test_tls_to_the_state_server_follows_the_urls_sslmode(postgres, tmp_path):
    """sslmode (libpq's names) in state.url: verify-full checks the server's certificate
    against sslrootcert and its name; disable connects in clear; a certificate from another
    authority is refused; an unknown sslmode is a configuration error. Before, the URL's
    query was ignored (TLS only when the server offered it, never verified)."""
    import os
    import shutil

    from pydantic import ValidationError

    from serve.state.database import StateUnavailableError, open_database

    ca, cert, key = _certificates(postgres.root, "server")
    other_ca, _, _ = _certificates(tmp_path, "other")
    for path in (cert, key):
        if os.geteuid() == 0:
            shutil.chown(path, "postgres", "postgres")
        path.chmod(0o600)
    admin = open_database(StateConfig(url=postgres.url), tmp_path, "tls_admin", ())

    def server(*statements: str) -> None:
        with admin.transaction() as db:
            db.execute("COMMIT")  # ALTER SYSTEM runs outside a transaction block
            for statement in statements:
                db.execute(statement)
            db.execute("BEGIN")

    def uses_tls(query: str) -> bool:
        db = open_database(StateConfig(url=f"{postgres.url}?{query}"), tmp_path, "tls", ())
        try:
            with db.read() as cursor:
                mine = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
                return cursor.execute(mine).fetchone()[0]
        finally:
            db.close()

    server(f"ALTER SYSTEM SET ssl_cert_file = '{cert}'", f"ALTER SYSTEM SET ssl_key_file = '{key}'",
           "ALTER SYSTEM SET ssl = on", "SELECT pg_reload_conf()")  # fmt: skip
    try:
        time.sleep(0.5)  # the server reloads its configuration
        assert uses_tls(f"sslmode=verify-full&sslrootcert={ca}") is True
        assert uses_tls("sslmode=require") is True
        assert uses_tls("sslmode=disable") is False
        with pytest.raises(StateUnavailableError, match="certificate verify failed"):
            uses_tls(f"sslmode=verify-full&sslrootcert={other_ca}")
        with pytest.raises(ValidationError, match="sslmode='sometimes'"):
            StateConfig(url=f"{postgres.url}?sslmode=sometimes")
    finally:
        server("ALTER SYSTEM RESET ssl", "ALTER SYSTEM RESET ssl_cert_file",
               "ALTER SYSTEM RESET ssl_key_file", "SELECT pg_reload_conf()")  # fmt: skip
        admin.close()


def test_one_statement_renews_a_holders_leases_and_leaves_out_those_it_lost(postgres):
    """renew_all: every lease of a replica renewed at once (on its own connection); one taken
    over since is missing from the answer, its new owner's lease untouched; one run out is
    missing too (it must be taken again, with a replay)."""
    from serve.state.shard_owners import ShardOwners

    owners = ShardOwners(StateConfig(url=postgres.url), lease_s=5.0)
    mine = [owners.acquire(t, "replica-a", "node-a") for t in ("renew-1", "renew-2", "renew-3")]
    owners.release(mine[1])  # given up; another replica takes it over
    taken = owners.acquire("renew-2", "replica-b", "node-b")
    with owners.db.transaction() as db:  # the third ran out on the server's clock
        db.execute("UPDATE shard_owners SET expires = 0 WHERE tenant = 'renew-3'")
    renewed = owners.renew_all(mine)
    assert sorted(renewed) == ["renew-1"]
    assert renewed["renew-1"].token == mine[0].token
    assert renewed["renew-1"].expires > mine[0].expires
    assert owners.renew(taken).holder == "replica-b"  # the new owner's lease stands
    owners.close()


def test_a_takeover_starts_from_the_snapshot_and_replays_only_the_log_after_it(postgres, tmp_path):
    """Hole 7 (recovery grows with history): the owner snapshots the tenant every 5 writes,
    storing it on the state server and deleting the log below it. A new node (an empty
    folder) takes over from the snapshot plus the tail: the same files, access lists and
    vector stores, and it replays at most the tail. The first node's copy comes back later:
    adopted as it is while it follows the log, replaced by the snapshot once the log moved
    past it, and replaced when the log is another one (the state server rebuilt). A replica
    that stops gives its leases back (the next owner waits for nothing). Before: no
    snapshot, the log kept every upload's bytes, and each new folder replayed it all."""
    import asyncio

    from index.access import OPERATOR
    from index.config import IndexConfig
    from index.service import IndexService
    from index.store.collections import VectorStoreCatalog
    from index.testing import HashingEmbedder
    from serve.config import load_config
    from serve.shards.host import ShardHost
    from serve.state.shard_owners import ShardOwners
    from serve.state.shard_snapshots import ShardSnapshots

    tenant = "snapshotted"
    config = load_config(None, data_dir=str(tmp_path), state={
        "url": postgres.url, "snapshot_every": 5, "shard_lease_s": 30})  # fmt: skip
    start = lambda root: IndexService(IndexConfig(), root, embedder=HashingEmbedder()).start()  # noqa: E731
    owners = ShardOwners(StateConfig(url=postgres.url))
    snapshots = ShardSnapshots(owners)

    took = []  # per takeover: (log entries replayed, whether the snapshot was fetched)

    def host(name: str) -> ShardHost:
        made = ShardHost(config, start, FixedPlacement(name))
        catch_up, fetch, fetched = made.snapshots.catch_up, made.snapshots.store.fetch, []

        async def counted(*args):
            applied = await catch_up(*args)
            took.append((applied, bool(fetched)))
            return applied

        def fetching(*args):
            fetched.append(args)
            return fetch(*args)

        made.snapshots.catch_up, made.snapshots.store.fetch = counted, fetching
        return made

    async def seen(h: ShardHost) -> tuple:
        files = sorted((f.file_name, f.access) for f in await h.files(tenant, OPERATOR))
        stores = await h.catalog(tenant, OPERATOR, VectorStoreCatalog.list_stores)
        return files, [s.name for s in stores.data]

    async def snapshotted(h: ShardHost) -> None:
        while h.snapshots.taking:  # one that ends may start the next
            await asyncio.wait(list(h.snapshots.taking.values()))

    async def stop(h: ShardHost) -> None:
        await snapshotted(h)
        h.close()
        h.service.close()

    async def scenario():
        a = host("a")
        for i in range(12):
            await a.upload(tenant, OPERATOR, f"doc{i}.txt", f"Marker{i} text.".encode(), 30)
        doc0 = (await a.files(tenant, OPERATOR))[0].doc_id
        await a.set_access(tenant, OPERATOR, doc0, ("group:hr",))
        await a.catalog(tenant, OPERATOR, VectorStoreCatalog.create_store, name="handbook")
        await snapshotted(a)
        state = snapshots.state(tenant)
        assert state.snapshot is not None and state.snapshot.seq > 0
        assert state.entries < 5  # the log holds only what came after the snapshot
        expected = await seen(a)
        await stop(a)  # gives its lease back: b takes it at once

        b = host("b")  # an empty folder: the snapshot, then the tail
        assert await seen(b) == expected
        assert took[-1] == (state.entries, True)
        await stop(b)

        again = host("a")  # a's copy follows the log (the same log, at its end): adopted
        assert await seen(again) == expected and took[-1] == (0, False)
        for i in range(6):  # the log moves on: two more snapshots, past b's position
            await again.upload(tenant, OPERATOR, f"more{i}.txt", f"Marker more{i}.".encode(), 30)
        expected = await seen(again)
        await stop(again)
        state = snapshots.state(tenant)

        b = host("b")  # b's copy is now behind the snapshot: replaced by it
        assert await seen(b) == expected and took[-1] == (state.entries, True)
        await stop(b)
        return expected

    expected = asyncio.run(scenario())

    with owners.db.transaction() as db:  # the state server rebuilt: another log, same seqs
        db.execute("UPDATE shard_owners SET log_id = 'another-log' WHERE tenant = ?", (tenant,))

    async def elsewhere():
        c = host("a")  # a's copy follows a log that is no longer there: replaced
        assert await seen(c) == expected
        assert took[-1][1]
        await stop(c)

    asyncio.run(elsewhere())
    snapshots.close()
    owners.close()


def test_a_randomized_run_under_faults_keeps_every_acknowledged_write_and_fences_reads(
    postgres, tmp_path
):
    """Issue 65's randomized run (tests/nemesis.py), 20 seconds of it: three replicas over this
    PostgreSQL, clients writing and an HR reader reading through the HTTP API while a nemesis
    freezes replicas' links to the server and pauses replicas. The owner's state is what each
    file's history allows, a fresh replay equals it, and no read after an acknowledged
    revocation returned the file. (With the read fence removed, the 90-second run found 6
    such reads: RESULTS.md. The 3-minute run: `python -m benchmarks.nemesis`.)"""
    from tests.nemesis import run

    report = run(postgres, tmp_path, 20, seed=5)
    print(report)
    assert sum(report.faults.values()) >= 3
    assert report.ops["upload"].get("ok", 0) >= 5 and report.reads_checked >= 5
    assert report.disallowed == [] and report.replay_differs == {} and report.stale_reads == []


def test_a_sources_runs_are_logged_and_a_new_owner_holds_them_as_the_old_one_did(
    postgres, tmp_path
):
    """Issue 66 with several nodes: a source declared and run at the tenant's owner (node a),
    then a vector store made of its documents and one document's list changed; node b, an
    empty folder, takes the tenant over from the log alone (no snapshot): the same files,
    lists, store and source records, so that its next run finds every file unchanged and then
    follows the source's changes. A replica that does not own the tenant leaves its sources to
    the owner. Before: sources refused several nodes (409)."""
    import asyncio

    from index.access import OPERATOR, Reader
    from index.config import IndexConfig
    from index.service import IndexService
    from index.store.collections import VectorStoreCatalog
    from index.testing import HashingEmbedder
    from serve.config import load_config
    from serve.shards.host import ShardHost
    from serve.shards.sources import SourceFields

    tenant, share = "sourced", tmp_path / "share"
    (share / "hr").mkdir(parents=True)
    (share / "hr" / "pay.md").write_text("# Pay\n\nPay day is the 25th.")
    (share / "leave.md").write_text("# Leave\n\nAnnual leave is 27 days.")
    (share / "travel.md").write_text("# Travel\n\nTrains in second class.")
    config = load_config(None, data_dir=str(tmp_path / "data"), state={
        "url": postgres.url, "snapshot_every": 1000, "shard_lease_s": 30},
        sources={"allowed_locations": [f"folder:{share}"]})  # fmt: skip
    start = lambda root: IndexService(IndexConfig(), root, embedder=HashingEmbedder()).start()  # noqa: E731
    admin = Reader("key:ops", admin=True)
    fields = SourceFields(name="share", source=f"folder:{share}", rules=["hr/**=group:hr"],
                          every="1s")  # fmt: skip

    class BesideA(FixedPlacement):  # a second replica on node a: a's folder, its own leases
        def holder(self) -> str:
            return "replica-a2"

    async def seen(h: ShardHost) -> tuple:
        files = sorted((f.file_name, f.access) for f in await h.files(tenant, OPERATOR))
        stores = await h.catalog(tenant, OPERATOR, VectorStoreCatalog.list_stores)
        listed = await h.catalog(tenant, OPERATOR, VectorStoreCatalog.list_store_files,
                                 stores.data[0].id)  # fmt: skip
        return files, [s.name for s in stores.data], len(listed.data)

    async def scenario():
        a = ShardHost(config, start, FixedPlacement("a"))
        await a.sources.declare(tenant, admin, fields)
        first = await a.sources.run(tenant, "share", False, admin.identity)
        assert (first.added, first.error) == (3, None)
        ids = [f.doc_id for f in await a.files(tenant, OPERATOR)]
        await a.catalog(tenant, OPERATOR, VectorStoreCatalog.create_store, name="policies",
                        file_ids=ids)  # fmt: skip
        travel = next(f for f in await a.files(tenant, OPERATOR) if f.file_name == "travel.md")
        await a.set_access(tenant, OPERATOR, travel.doc_id, ("group:travel",))
        expected = await seen(a)
        assert expected[0] == [("leave.md", None), ("pay.md", ("group:hr",)),
                               ("travel.md", ("group:travel",))]  # fmt: skip
        other = ShardHost(config, start, BesideA("a"))  # sees the source due, not the owner
        await asyncio.sleep(1.1)
        assert await other.sources.run_due() == []
        assert (await a.sources.listed(tenant, admin))[0]["last_run"]["added"] == 3
        a.close()  # gives its lease back
        a.service.close()

        b = ShardHost(config, start, FixedPlacement("b"))  # an empty folder: the log alone
        assert await seen(b) == expected
        [source] = await b.sources.listed(tenant, admin)
        assert source["files"] == 3 and source["last_run"]["added"] == 3
        again = await b.sources.run(tenant, "share", False, admin.identity)
        assert (again.unchanged, again.added, again.changed) == (3, 0, 0)
        (share / "leave.md").unlink()
        (share / "hr" / "pay.md").rename(share / "pay.md")  # out of HR
        moved = await b.sources.run(tenant, "share", False, admin.identity)
        assert (moved.deleted, moved.moved) == (1, 1)
        kept = sorted((f.file_name, f.access) for f in await b.files(tenant, OPERATOR))
        assert kept == [("pay.md", None), ("travel.md", ("group:travel",))]  # its own list
        b.close()
        b.service.close()
        other.service.close()

    asyncio.run(scenario())
