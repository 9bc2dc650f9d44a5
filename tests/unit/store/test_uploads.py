"""Uploads kept before they are ingested: their states, their originals, and the vector-store
memberships that follow them."""

import pytest

from index.access import OPERATOR
from index.errors import DocumentNotFoundError
from index.pipeline import SourceFile
from index.store.collections import VectorStoreCatalog
from index.store.uploads import Uploads

pytestmark = pytest.mark.unit

TEXT = b"# Leave\n\nEvery employee receives 27 days of paid annual leave."


def ingest(service, doc_id: str, data: bytes = TEXT):
    source = SourceFile.from_bytes(data, "leave.md", source="upload:acme:leave.md", doc_id=doc_id)
    [result] = list(service.pipeline("acme").ingest([source]))
    return result


def member(shard, store_id: str, doc_id: str):
    return VectorStoreCatalog(shard, OPERATOR).get_store_file(store_id, doc_id)


def test_a_first_upload_is_in_progress_until_written_and_its_memberships_follow(fake_service):
    shard = fake_service.shard("acme", create=True)
    uploads, catalog = Uploads(shard), VectorStoreCatalog(shard, OPERATOR)
    stored = uploads.store("doc-1", "leave.md", TEXT)
    assert (stored.status, stored.byte_count) == ("in_progress", len(TEXT))
    store = catalog.create_store(name="hr", file_ids=["doc-1"])
    assert member(shard, store.id, "doc-1").status == "in_progress"
    assert catalog.get_store(store.id).file_counts.in_progress == 1
    assert catalog.matching_doc_ids([store.id]) == []  # not searchable yet
    assert ingest(fake_service, "doc-1").status == "added"
    uploads.finish("doc-1")
    assert member(shard, store.id, "doc-1").status == "completed"
    assert catalog.matching_doc_ids([store.id]) == ["doc-1"]
    assert uploads.bytes_of("doc-1") == ("leave.md", TEXT)  # the original, as uploaded
    assert uploads.unfinished() == []


def test_a_refused_upload_keeps_its_reason_and_fails_its_memberships(fake_service):
    shard = fake_service.shard("acme", create=True)
    uploads, catalog = Uploads(shard), VectorStoreCatalog(shard, OPERATOR)
    uploads.store("doc-2", "scan.pdf", b"%PDF-broken")
    store = catalog.create_store(file_ids=["doc-2"])
    uploads.finish("doc-2", "scan.pdf: not a readable PDF")
    [refused] = uploads.unfinished()
    assert (refused.status, refused.error) == ("error", "scan.pdf: not a readable PDF")
    failed = member(shard, store.id, "doc-2")
    assert failed.status == "failed" and failed.last_error.message == refused.error
    assert (
        VectorStoreCatalog(shard, OPERATOR).create_store(file_ids=["doc-2"]).file_counts.failed == 1
    )


def test_a_new_version_leaves_the_stored_one_completed_and_a_refusal_forgets_only_itself(
    fake_service,
):
    shard = fake_service.shard("acme", create=True)
    uploads, catalog = Uploads(shard), VectorStoreCatalog(shard, OPERATOR)
    uploads.store("doc-3", "leave.md", TEXT)
    ingest(fake_service, "doc-3")
    uploads.finish("doc-3")
    store = catalog.create_store(file_ids=["doc-3"])
    uploads.store("doc-3", "leave.md", b"garbage \x00")
    assert member(shard, store.id, "doc-3").status == "completed"  # the stored one is searched
    uploads.forget("doc-3")
    assert member(shard, store.id, "doc-3").status == "completed"
    assert uploads.bytes_of("doc-3") == ("leave.md", TEXT)
    uploads.store("doc-4", "new.md", TEXT)
    catalog.attach(store.id, ["doc-4"])
    uploads.forget("doc-4")  # a first upload refused at once: gone, with its membership
    assert {f.id for f in catalog.list_store_files(store.id).data} == {"doc-3"}


def test_deleting_a_file_removes_its_upload_original_and_memberships(fake_service):
    shard = fake_service.shard("acme", create=True)
    uploads, catalog = Uploads(shard), VectorStoreCatalog(shard, OPERATOR)
    uploads.store("doc-5", "leave.md", TEXT)
    ingest(fake_service, "doc-5")
    uploads.finish("doc-5")
    uploads.store("doc-6", "pending.md", TEXT)  # still being ingested
    store = catalog.create_store(file_ids=["doc-5", "doc-6"])
    shard.delete_document("doc-5")
    shard.delete_document("doc-6")
    assert uploads.bytes_of("doc-5") is None and uploads.unfinished() == []
    assert catalog.get_store(store.id).file_counts.total == 0
    with pytest.raises(DocumentNotFoundError):
        shard.delete_document("doc-6")


def test_an_upload_keeps_who_will_read_it_until_its_document_is_written(fake_service):
    from index.access import KEEP

    shard = fake_service.shard("acme", create=True)
    uploads = Uploads(shard)
    assert uploads.store("doc-1", "leave.md", TEXT, ("group:hr",)).access == ("group:hr",)
    assert uploads.access("doc-1") == ("group:hr",)
    assert uploads.store("doc-2", "other.md", TEXT).access is None  # a new file: the tenant's
    assert uploads.access("doc-2") == KEEP and uploads.access("no-such") == KEEP
    assert uploads.store("doc-3", "open.md", TEXT, None).access is None
    assert uploads.access("doc-3") is None  # given: the whole tenant
    assert {u.doc_id: u.access for u in uploads.unfinished()} == {
        "doc-1": ("group:hr",), "doc-2": None, "doc-3": None}  # fmt: skip


def test_a_restricted_upload_still_being_ingested_is_hidden_in_a_store_like_its_document(
    fake_service,
):
    """Before it is a document, an upload's own list decides who sees it as a store member:
    its name, counts, size, cursors and searches."""
    from index.access import Reader

    shard = fake_service.shard("acme", create=True)
    Uploads(shard).store("doc-1", "salaries.md", TEXT, ("group:hr",), "user:hana")
    store = VectorStoreCatalog(shard, OPERATOR).create_store(name="hr", file_ids=["doc-1"])
    hana = VectorStoreCatalog(shard, Reader("user:hana", frozenset({"group:hr"})))
    eli = VectorStoreCatalog(shard, Reader("user:eli", frozenset({"group:eng"})))
    assert [(f.id, f.status) for f in hana.list_store_files(store.id).data] == [
        ("doc-1", "in_progress")]  # fmt: skip
    assert eli.list_store_files(store.id).data == ()
    seen = eli.get_store(store.id)
    assert (seen.file_counts.total, seen.usage_bytes) == (0, 0)
    with pytest.raises(DocumentNotFoundError):
        eli.get_store_file(store.id, "doc-1")
    with pytest.raises(DocumentNotFoundError, match="nothing was attached"):
        eli.create_store(name="mine", file_ids=["doc-1"])
