"""Replaying a tenant's logged writes on another copy of its shard (serve/state/shard_owners.py):
the same documents, access lists and vector stores, with the same ids and times; replaying an
entry twice changes nothing."""

from __future__ import annotations

import json

import pytest

from index.access import OPERATOR
from index.config import IndexConfig
from index.pipeline import SourceFile, doc_id_for
from index.service import IndexService
from index.store.collection_types import UNSET, FileSpec
from index.store.collections import VectorStoreCatalog
from index.testing import HashingEmbedder
from serve.state.shard_owners import LogEntry, apply_entry, catalog_entry, catalog_of, upload_entry

pytestmark = pytest.mark.unit
TENANT = "acme"


@pytest.fixture
def copies(tmp_path):
    """Two nodes' copies of the tenant's shard, and each one's ingestion of an upload."""
    made = []
    for node in ("a", "b"):
        service = IndexService(IndexConfig(), tmp_path / node, embedder=HashingEmbedder()).start()

        def ingest(file_name, data, access, owner=None, service=service):
            source = f"upload:{TENANT}:{file_name}"
            upload = SourceFile.from_bytes(data, file_name, source=source,
                                           doc_id=doc_id_for(source), access=access)  # fmt: skip
            [result] = service.pipeline(TENANT).ingest([upload])
            assert result.status in ("added", "unchanged")  # unchanged: replayed again

        made.append((service.shard(TENANT, create=True), ingest))
    yield made
    for shard, _ in made:
        shard.close()


def logged(seq: int, op: str, meta: dict, data: bytes | None = None) -> LogEntry:
    """An entry as the log gives it back: its meta through JSON."""
    return LogEntry(seq, op, json.loads(json.dumps(meta)), data)


def test_a_replayed_log_rebuilds_documents_access_and_vector_stores_exactly(copies):
    (a, ingest_a), (b, ingest_b) = copies
    entries = [
        logged(1, "upload", upload_entry("leave.txt", None), b"Annual leave is 27 days."),
        logged(2, "upload", upload_entry("pay.txt", ("group:hr",)), b"Pay day is the 25th."),
    ]
    for entry in entries:  # what the owner did: logged, then applied
        apply_entry(entry, ingest_a, a)
    leave, pay = (doc_id_for(f"upload:{TENANT}:{name}") for name in ("leave.txt", "pay.txt"))
    calls = [
        ("create_store", (), {"name": "handbook", "file_ids": [leave]}),
        ("attach", ("STORE", [FileSpec(pay, {"team": "hr"})]), {}),
        ("update_store", ("STORE",), {"name": "Handbook", "metadata": UNSET,
                                       "expires_after": {"anchor": "last_active_at", "days": 7}}),
        ("detach", ("STORE", leave), {}),
        ("delete_store", ("vs_missing",), {}),  # refused when it ran: refused on replay too
    ]  # fmt: skip
    store_id = None
    for seq, (method, args, kwargs) in enumerate(calls, start=3):
        args = tuple(store_id if a == "STORE" else a for a in args)
        meta = catalog_entry(method, OPERATOR, args, kwargs)
        catalog, call_args, call_kwargs = catalog_of(a, meta)
        try:
            result = getattr(catalog, method)(*call_args, **call_kwargs)
        except Exception as exc:
            assert method == "delete_store" and "vs_missing" in str(exc)
        store_id = store_id or result.id
        entries.append(logged(seq, "catalog", meta))
    entries.append(logged(8, "set_access", {"doc_id": leave, "access": ["user:ana"]}))
    apply_entry(entries[-1], ingest_a, a)

    for entry in entries + entries:  # the new owner replays all, twice: no change the 2nd time
        apply_entry(entry, ingest_b, b)

    def state(shard):
        catalog = VectorStoreCatalog(shard, OPERATOR)
        documents = {d.doc_id: (d.file_name, d.access) for d in shard.list_documents()}
        files = list(catalog.list_store_files(store_id).data)  # whole records: times too
        return documents, catalog.get_store(store_id), files

    assert state(b) == state(a)
    documents, store, files = state(b)
    assert documents[leave][1] == ("user:ana",) and documents[pay][1] == ("group:hr",)
    assert store.name == "Handbook" and [(f.id, f.attributes) for f in files] == [
        (pay, {"team": "hr"})
    ]


def test_only_changes_are_logged():
    with pytest.raises(ValueError, match="does not change the catalog"):
        catalog_entry("get_store", OPERATOR, ("vs_1",), {})


class Log:
    """The tenant's log as ShardOwners.entries gives it."""

    def __init__(self, entries: list[LogEntry]) -> None:
        self.logged = entries

    def entries(self, tenant: str, after: int = 0):
        return iter([e for e in self.logged if e.seq > after])


def test_a_replay_that_cannot_apply_an_entry_stops_before_it_and_skips_nothing(tmp_path):
    """The embedder down while a new owner replays (the replica's own ingestion of uploads,
    serve/shards/ingestion.py): the replay stops at that upload (503, retry), its position
    before it; the next try applies it and what follows. Before, the upload was marked
    "ingestion failed" and skipped for good."""
    from serve.shards.ingestion import UploadIngestion
    from serve.state.shard_owners import Replayed, ReplayStoppedError, replay

    class FlakyEmbedder(HashingEmbedder):
        down = True

        def embed_documents(self, texts):
            if self.down:
                raise ConnectionError("the embedder is unreachable")
            return super().embed_documents(texts)

    embedder = FlakyEmbedder()
    service = IndexService(IndexConfig(), tmp_path, embedder=embedder).start()
    shard = service.shard(TENANT, create=True)
    ingest = UploadIngestion(lambda: service).replayed(shard, TENANT)
    log = Log([logged(1, "upload", upload_entry("leave.txt"), b"Leave: 27 days."),
               logged(2, "upload", upload_entry("pay.txt"), b"Pay day: the 25th.")])  # fmt: skip
    position = Replayed(shard.directory)
    with pytest.raises(ReplayStoppedError, match=r"upload #1 .*the embedder is unreachable"):
        replay(log, TENANT, position, ingest, shard)
    assert position.get() == 0 and shard.list_documents() == []
    embedder.down = False
    assert replay(log, TENANT, position, ingest, shard) == 2
    assert sorted(d.file_name for d in shard.list_documents()) == ["leave.txt", "pay.txt"]
    service.close()
