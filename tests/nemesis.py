"""A randomized run of several replicas under faults (issue 65), through the HTTP API.

Three replicas (tests/integration/nemesis_replica.py: the HTTP app over a ShardHost, each
on its own node folder) share one real PostgreSQL, each replica's shard host through a proxy
of its own (tests/faults.py; its keys and audit directly, as an ingress elsewhere would).
Clients upload files (each restricted to HR or to engineering), change
their access lists and delete them, each client on files of its own, one operation at a time;
an HR reader lists the files it may read, again and again. A request goes to a random replica,
and to another when one answers that it does not own the tenant (what Serve's routing does).
Meanwhile a nemesis freezes a replica's link to PostgreSQL past the lease, or pauses a replica
(SIGSTOP, then SIGCONT), one fault at a time.

Afterwards (every fault healed), the checks:
- the owner's state (what an admin lists) is, for every file, a state its history allows: the
  result of its last acknowledged write, or of a later write whose outcome its client never
  learned (a timeout, or the ``outcome_unknown`` 503);
- a fresh replay (a new node taking the tenant over from the snapshot and the log) holds exactly
  the owner's files and access lists: every write answered with an error is in both or neither;
- no read that began after an acknowledged revocation (the file moved from HR to engineering,
  or deleted) returned the file to the HR reader, unless a later grant of it had begun.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.faults import FreezingProxy

TENANT = "nemesis"
RETRY = {"shard_owned_elsewhere", "shard_lease_lost", "state_unavailable", None}
HR, ENG = "group:hr", "group:eng"


@dataclass
class Op:
    client: int
    kind: str  # upload, access, delete, read
    file: str | None
    value: tuple | list | None  # the access list written; a read's file ids
    start: float
    end: float = 0.0
    outcome: str = ""  # ok, error, unknown


@dataclass
class Report:
    seconds: float
    ops: dict[str, dict[str, int]] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    owner_changes: int = 0
    files: int = 0
    stale_reads: list = field(default_factory=list)
    disallowed: list = field(default_factory=list)
    replay_differs: dict = field(default_factory=dict)
    reads_checked: int = 0

    @property
    def passed(self) -> bool:
        return not (self.stale_reads or self.disallowed or self.replay_differs)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """The replicas, their proxies and the keys."""

    def __init__(self, postgres, root: Path, replicas: int = 3, lease_s: float = 3.0) -> None:
        from serve.identity.keys import KeyStore
        from serve.state.database import StateConfig

        self.postgres, self.root, self.lease_s = postgres, root, lease_s
        keys = KeyStore(root, StateConfig(url=postgres.url))
        self.admin = keys.create(TENANT, ["admin"])[1]
        self.reader = keys.create(TENANT, ["query"], user="hana", groups=["hr"])[1]
        self.editors = [keys.create(TENANT, ["query", "ingest"], user=f"ed{i}")[1]
                        for i in range(8)]  # fmt: skip
        keys.close()
        self.proxies, self.processes, self.ports = [], [], []
        for n in range(replicas):
            proxy = FreezingProxy(("127.0.0.1", postgres.port))
            url = postgres.url.replace(f":{postgres.port}/", f":{proxy.port}/")
            port = _port()
            with open(root / f"replica-{n}.log", "wb") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "tests.integration.nemesis_replica", postgres.url,
                     url, str(root), f"n{n}", str(port), str(lease_s)],
                    stdout=subprocess.DEVNULL, stderr=log,
                )  # fmt: skip
            self.proxies.append(proxy)
            self.processes.append(process)
            self.ports.append(port)
        for port in self.ports:
            self._wait(port)

    def _wait(self, port: int) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"replica on port {port} did not start (see {self.root}/replica-*.log)")

    def request(self, method: str, path: str, secret: str, timeout: float = 10.0, **kwargs):
        """(outcome, status, body): ok (2xx), error (an answer that is not), unknown (no
        answer in time, or the outcome_unknown 503). Retried on another replica while a
        replica answers that it does not own the tenant (or cannot reach the state)."""
        replicas = list(range(len(self.ports)))
        random.shuffle(replicas)
        for attempt in range(12):
            port = self.ports[replicas[attempt % len(replicas)]]
            try:
                response = httpx.request(method, f"http://127.0.0.1:{port}{path}", timeout=timeout,
                                         headers={"Authorization": f"Bearer {secret}"},
                                         **kwargs)  # fmt: skip
            except httpx.TimeoutException:
                return "unknown", None, None
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            body = response.json() if response.content else {}
            if response.is_success:
                return "ok", response.status_code, body
            code = (body.get("error") or {}).get("code") if isinstance(body, dict) else None
            if code == "outcome_unknown":
                return "unknown", response.status_code, body
            if response.status_code == 503 and code in RETRY:
                time.sleep(0.2 + 0.1 * attempt)
                continue
            return "error", response.status_code, body
        return "error", 503, None

    def close(self) -> None:
        for process in self.processes:
            with _suppress():
                os.kill(process.pid, signal.SIGCONT)
            process.kill()
            process.wait()
        for proxy in self.proxies:
            proxy.thaw()
            proxy.close()


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], OSError)


def run(postgres, root: Path, seconds: float, seed: int = 0, clients: int = 6) -> Report:
    random.seed(seed)
    cluster = Cluster(postgres, root)
    history: list[Op] = []
    lock, stop = threading.Lock(), threading.Event()
    report = Report(seconds)

    def record(op: Op) -> None:
        with lock:
            history.append(op)

    def client(n: int) -> None:
        from serve.shards.ingestion import upload_id

        rng, mine, made = random.Random(seed * 100 + n), [], 0
        secret, user = cluster.editors[n], f"user:ed{n}"
        while not stop.is_set():
            roll = rng.random()
            if roll < 0.4 or not mine:
                name, made = f"c{n}-{made}.txt", made + 1
                access = (rng.choice([HR, ENG]), user)
                op = Op(n, "upload", upload_id(TENANT, user, name), access, time.monotonic())
                op.outcome, _, _ = cluster.request(
                    "POST", "/v1/files", secret, files={"file": (name, f"Note {name}.".encode())},
                    data={"purpose": "assistants", "access": ",".join(access)},
                )  # fmt: skip
                mine.append(op.file)
            elif roll < 0.85:
                file = rng.choice(mine)
                access = (rng.choice([HR, ENG]), user)
                op = Op(n, "access", file, access, time.monotonic())
                op.outcome, _, _ = cluster.request("POST", f"/v1/files/{file}/access", secret,
                                                   json={"access": list(access)})  # fmt: skip
            else:
                file = mine.pop(rng.randrange(len(mine)))
                op = Op(n, "delete", file, None, time.monotonic())
                op.outcome, _, _ = cluster.request("DELETE", f"/v1/files/{file}", secret)
            op.end = time.monotonic()
            record(op)

    def reader() -> None:
        while not stop.is_set():
            op = Op(-1, "read", None, None, time.monotonic())
            op.outcome, _, body = cluster.request("GET", "/v1/files?limit=10000", cluster.reader)
            op.end = time.monotonic()
            if op.outcome == "ok":
                op.value = [f["id"] for f in body["data"]]
                record(op)

    def nemesis() -> None:
        rng = random.Random(seed)
        while not stop.wait(rng.uniform(1.0, 3.0)):
            victim = rng.randrange(len(cluster.ports))
            hold = rng.uniform(0.5, 3.0) * cluster.lease_s
            if rng.random() < 0.5:
                report.faults["link frozen"] = report.faults.get("link frozen", 0) + 1
                cluster.proxies[victim].freeze()
                stop.wait(hold)
                cluster.proxies[victim].thaw()
            else:
                report.faults["replica paused"] = report.faults.get("replica paused", 0) + 1
                os.kill(cluster.processes[victim].pid, signal.SIGSTOP)
                stop.wait(hold)
                os.kill(cluster.processes[victim].pid, signal.SIGCONT)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    threads += [threading.Thread(target=reader) for _ in range(4)]
    threads.append(threading.Thread(target=nemesis))
    try:
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        stop.set()
        for thread in threads:
            thread.join()
        time.sleep(cluster.lease_s)  # requests answered late by a paused replica land now
        owner = _settled(cluster)
    finally:
        cluster.close()
    fresh = asyncio.run(_fresh_replay(postgres, root))
    _check(report, history, owner, fresh)
    report.owner_changes = _owner_token(postgres) - 1
    return report


def _settled(cluster: Cluster) -> dict[str, tuple]:
    """The owner's files and access lists, once no upload is still being ingested."""
    deadline = time.monotonic() + 60
    while True:
        outcome, _, body = cluster.request("GET", "/v1/files?limit=10000", cluster.admin)
        if outcome == "ok" and all(f["status"] != "uploaded" for f in body["data"]):
            return {f["id"]: tuple(sorted(f["grounded"]["access"] or ()))
                    for f in body["data"] if f["status"] == "processed"}  # fmt: skip
        if time.monotonic() > deadline:
            raise RuntimeError(f"the owner's state did not settle: {outcome} {body}")
        time.sleep(0.5)


async def _fresh_replay(postgres, root: Path) -> dict[str, tuple]:
    """A new node (an empty folder) takes the tenant over: its files and access lists."""
    from index.access import OPERATOR
    from index.service import IndexService
    from index.testing import HashingEmbedder
    from serve.config import load_config
    from serve.shards.host import ShardHost
    from serve.state.shard_owners import ShardOwnedElsewhereError
    from serve.testing import FixedPlacement

    config = load_config(None, data_dir=str(root), state={"url": postgres.url})
    host = ShardHost(config, lambda r: IndexService(config.index, r,
                                                    embedder=HashingEmbedder()).start(),
                     FixedPlacement("fresh"))  # fmt: skip
    while True:
        try:
            files = await host.files(TENANT, OPERATOR)
            break
        except ShardOwnedElsewhereError as exc:  # the killed replicas' leases run out
            await asyncio.sleep(min(exc.retry_after, 0.5))
    for task in list(host.uploads.ingesting.values()):
        await task
    files = await host.files(TENANT, OPERATOR)
    host.close()
    host.service.close()
    return {f.doc_id: tuple(sorted(f.access or ())) for f in files
            if not hasattr(f, "status")}  # fmt: skip


def _owner_token(postgres) -> int:
    from serve.state.database import StateConfig
    from serve.state.shard_owners import ShardOwners

    owners = ShardOwners(StateConfig(url=postgres.url))
    with owners.db.read() as db:
        row = db.execute("SELECT token FROM shard_owners WHERE tenant = ?", (TENANT,)).fetchone()
    owners.close()
    return row[0] if row else 0


def _check(report: Report, history: list[Op], owner: dict, fresh: dict) -> None:
    for op in history:
        counts = report.ops.setdefault(op.kind, {})
        counts[op.outcome] = counts.get(op.outcome, 0) + 1
    writes: dict[str, list[Op]] = {}
    for op in sorted((o for o in history if o.kind != "read"), key=lambda o: o.start):
        writes.setdefault(op.file, []).append(op)
    report.files = len(writes)
    for file, ops in writes.items():  # the states each file's history allows
        allowed = {None}
        for op in ops:
            result = None if op.kind == "delete" else tuple(sorted(op.value))
            # unknown, or an error: applied or not (the replay must agree with the owner)
            allowed = {result} if op.outcome == "ok" else allowed | {result}
        state = owner.get(file)
        if state not in allowed:
            report.disallowed.append((file, state, allowed, [(o.kind, o.outcome) for o in ops]))
    if owner != fresh:
        report.replay_differs = {f: (owner.get(f), fresh.get(f))
                                 for f in owner.keys() | fresh.keys()
                                 if owner.get(f) != fresh.get(f)}  # fmt: skip
    for read in (o for o in history if o.kind == "read"):
        report.reads_checked += 1
        for file in read.value:
            ops = writes.get(file, [])
            revoked = [o for o in ops if o.outcome == "ok" and o.end < read.start
                       and (o.kind == "delete" or HR not in o.value)]  # fmt: skip
            if not revoked:
                continue
            last = max(revoked, key=lambda o: o.end)
            granted = any(o.start > last.end and o.start < read.end and o.kind != "delete"
                          and HR in o.value for o in ops)  # fmt: skip
            late = any(o.outcome == "unknown" and o.kind != "delete" and HR in o.value
                       and o.start < read.end for o in ops)  # fmt: skip
            if not granted and not late:
                report.stale_reads.append((file, read.start, last.kind, last.end))
