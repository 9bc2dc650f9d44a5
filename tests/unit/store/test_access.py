"""Access lists inside a tenant (index/access.py): parsed, stored with the document, changed
without re-embedding, and applied before ranking."""

import pytest

from index.access import KEEP, OPERATOR, Reader, parse_access, principals_of
from index.errors import DocumentNotFoundError, InvalidRequestError
from index.pipeline import SourceFile
from serve.query.retrieval import SearchFilter, SearchParams, search_tenant

pytestmark = pytest.mark.unit

HR = ("group:hr",)
SALARY = b"The salary band for engineers is 70,000 to 90,000 euros a year."


def test_access_lists_are_parsed_strictly():
    assert parse_access("group:hr, user:alice@example.com") == (
        "group:hr",
        "user:alice@example.com",
    )
    assert parse_access(["user:bob", "user:bob"]) == ("user:bob",)
    assert parse_access("tenant") is None and parse_access(None) is None
    for bad in ("hr", "role:hr", "group:", "group:h r", "user:a;b"):
        with pytest.raises(InvalidRequestError, match="user:<name> or group:<name>"):
            parse_access(bad)


def test_who_may_read_what():
    alice = Reader("user:alice", principals_of("alice", ["hr"]))
    assert alice.principals == {"user:alice", "group:hr"}
    nobody, admin = Reader("key:k"), Reader("key:a", admin=True)
    assert nobody.may_read(None) and alice.may_read(HR) and admin.may_read(HR)
    bob = Reader("user:bob", principals_of("bob", ["sales"]))
    assert not bob.may_read(HR) and not nobody.may_read(HR)


def test_who_may_write_what():
    """Its owner while it reads it, or an admin: never another reader, whatever it reads."""
    alice = Reader("user:alice", principals_of("alice", ["hr"]))
    bob = Reader("user:bob", principals_of("bob", ["hr"]))
    assert alice.may_write(HR, "user:alice") and not bob.may_write(HR, "user:alice")
    assert not alice.may_write(("group:sales",), "user:alice")  # off its own list
    assert not alice.may_write(None, None)  # an operator's document
    assert Reader("key:a", admin=True).may_write(HR, None)


@pytest.mark.parametrize("empty", ["", "   ", ",", " , ", []])
def test_an_empty_access_list_is_refused_never_read_as_everyone(empty):
    with pytest.raises(InvalidRequestError, match="is empty"):
        parse_access(empty)


def ingest(service, tenant, name, data, access=KEEP):
    [result] = service.pipeline(tenant).ingest([SourceFile.from_bytes(data, name, access=access)])
    return result


def test_a_document_keeps_its_list_when_its_file_comes_again(fake_service):
    shard = fake_service.shard("acme", create=True)
    first = ingest(fake_service, "acme", "salaries.txt", SALARY, HR)
    assert shard.get_document(first.doc_id).access == HR
    ingest(fake_service, "acme", "salaries.txt", SALARY + b" Reviewed in May.")  # KEEP
    assert shard.get_document(first.doc_id).access == HR
    same = ingest(fake_service, "acme", "salaries.txt", SALARY + b" Reviewed in May.", None)
    assert same.status == "unchanged" and shard.get_document(first.doc_id).access is None
    version = shard.get_document(first.doc_id).version
    shard.set_access(first.doc_id, ("user:carol",))  # nothing embedded again
    assert shard.get_document(first.doc_id).access == ("user:carol",)
    assert shard.get_document(first.doc_id).version == version
    with pytest.raises(DocumentNotFoundError):
        shard.set_access("no-such-doc", HR)


def test_restricted_documents_are_filtered_before_ranking(fake_service):
    """The restricted document matches the question best; an identity that may not read it
    gets the full k others, not k minus it (no post-filtering of a fixed top k)."""
    ingest(fake_service, "acme", "salaries.txt", SALARY, HR)
    for n in range(6):
        ingest(
            fake_service, "acme", f"note-{n}.txt", f"Engineers note {n} about the salary.".encode()
        )
    question = "salary band for engineers euros"
    for mode in ("dense", "lexical", "hybrid"):
        params = SearchParams(mode=mode, search_filter=SearchFilter(readable_by=Reader("key:k")))
        outsider = search_tenant(fake_service, "acme", question, 5, params)
        assert len(outsider) == 5 and all(h.file_name != "salaries.txt" for h, _ in outsider)
        hr = SearchParams(
            mode=mode, search_filter=SearchFilter(readable_by=Reader("key:h", frozenset(HR)))
        )
        readable = search_tenant(fake_service, "acme", question, 5, hr)
        assert "salaries.txt" in {h.file_name for h, _ in readable}
        admin = SearchParams(mode=mode, search_filter=SearchFilter(readable_by=OPERATOR))
        assert "salaries.txt" in {h.file_name for h, _ in search_tenant(
            fake_service, "acme", question, 5, admin)}  # fmt: skip
    narrowed = SearchFilter(file_names=("salaries.txt",), readable_by=Reader("key:k"))
    assert (
        search_tenant(fake_service, "acme", question, 5, SearchParams(search_filter=narrowed)) == []
    )


@pytest.mark.parametrize(
    ("fraction", "ivf"),
    [(0.1, False), (0.3, False), (0.95, False), (0.05, True), (0.3, True), (0.95, True)],
)
def test_filtered_dense_search_is_exact_search_over_the_visible_chunks(tmp_path, fraction, ivf):
    """Every way the shard filters gives what brute force over the visible chunks gives: the
    index asked for more than the hidden chunks when they are few (0.95); the index scanning
    the visible ids only (a flat index; IVF from SELECTOR_MIN_SHARE of the shard); few visible
    chunks of an IVF index scored exactly (0.05). IVF visits every list here (nprobe), so
    that its own approximation is not what is measured."""
    from benchmarks.access_filter import build, measure

    settings = {"ivf_threshold": 2_000, "nprobe": 10_000} if ivf else {}
    shard, vectors, owners = build(tmp_path, 4_000, 40, **settings)
    try:
        assert shard.stats().index_kind.startswith("ivf") is ivf
        recall, _, _, _ = measure(shard, vectors, owners, fraction, queries=10)
    finally:
        shard.close()
    assert recall == 1.0


def test_an_asker_who_may_read_nothing_gets_no_dense_hits(tmp_path):
    from benchmarks.access_filter import build

    shard, vectors, _ = build(tmp_path, 400, 40)
    try:
        assert shard.search_dense(vectors[:1], 5, doc_ids=[], model_id=None) == []
    finally:
        shard.close()


def test_an_access_change_made_while_a_new_version_is_embedded_is_not_undone(tmp_path):
    """A new version uploaded without an access field keeps the list stored when it is
    written, not the one read when it was prepared: an access change that commits while the
    version is embedded stands, as a replay of the log (upload, then the change) gives it.
    Before, the new version wrote the old list back."""
    from index.config import IndexConfig
    from index.service import IndexService
    from index.testing import HashingEmbedder

    class ChangedMeanwhile(HashingEmbedder):
        """Embeds; the first time after ``arm``, an access change commits meanwhile."""

        change = None

        def embed_documents(self, texts):
            if self.change is not None:
                change, self.change = self.change, None
                change()
            return super().embed_documents(texts)

    embedder = ChangedMeanwhile()
    service = IndexService(IndexConfig(), tmp_path, embedder=embedder).start()
    shard = service.shard("acme", create=True)
    first = ingest(service, "acme", "salaries.txt", SALARY, HR)
    embedder.change = lambda: shard.set_access(first.doc_id, ("group:finance",))
    again = ingest(service, "acme", "salaries.txt", SALARY + b" Reviewed in May.")  # KEEP
    assert again.status == "replaced" and embedder.change is None
    assert shard.get_document(first.doc_id).access == ("group:finance",)
    service.close()
