import dataclasses
import pickle
import re

import pytest
from openai.types import VectorStore
from openai.types.vector_stores import VectorStoreFile, VectorStoreFileBatch

from index.access import OPERATOR
from index.errors import DocumentNotFoundError, InvalidRequestError
from index.pipeline import SourceFile
from index.service import IndexService
from index.store.collection_types import DAY, FileCounts, FileSpec, VectorStoreNotFoundError
from index.store.collections import VectorStoreCatalog

pytestmark = pytest.mark.unit

T0 = 1_700_000_000
STATIC = {"type": "static", "static": {"max_chunk_size_tokens": 400, "chunk_overlap_tokens": 100}}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def ingest(service: IndexService, tenant: str, files: dict[str, str]) -> dict[str, str]:
    """File name -> doc id."""
    sources = [SourceFile.from_bytes(text.encode(), name) for name, text in files.items()]
    return {r.file_name: r.doc_id for r in service.pipeline(tenant).ingest(sources)}


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def docs(fake_service):
    return ingest(
        fake_service,
        "acme",
        {
            "hr.txt": "Leave policy: 25 days of paid leave.",
            "eng.txt": "Pumps run at 3000 rpm and need oil monthly.",
            "ops.txt": "The night shift starts at ten.",
        },
    )


@pytest.fixture
def catalog(fake_service, docs, clock):
    return VectorStoreCatalog(fake_service.shard("acme"), OPERATOR, clock=clock)


def size(service, doc_id, tenant="acme"):
    return service.shard(tenant).get_document(doc_id).byte_count


def counts(completed=0, **others):
    total = completed + sum(others.values())
    return FileCounts(completed=completed, total=total, **others)


# -- stores ----------------------------------------------------------------------------------------


def test_create_get_update_delete_a_store(catalog, clock):
    created = catalog.create_store(
        "Policies", {"owner": "hr"}, {"anchor": "last_active_at", "days": 7}
    )
    assert re.fullmatch(r"vs_[0-9a-f]{24}", created.id)
    assert (created.name, created.metadata, created.status) == (
        "Policies",
        {"owner": "hr"},
        "completed",
    )
    assert (created.created_at, created.last_active_at, created.expires_at) == (
        T0,
        T0,
        T0 + 7 * DAY,
    )
    assert (created.file_counts, created.usage_bytes) == (FileCounts(), 0)
    assert catalog.get_store(created.id) == created

    clock.now += 10
    renamed = catalog.update_store(created.id, name="HR policies")
    assert (renamed.name, renamed.metadata, renamed.last_active_at) == (
        "HR policies",
        {"owner": "hr"},
        T0 + 10,
    )
    assert (
        renamed.expires_after == created.expires_after and renamed.expires_at == T0 + 10 + 7 * DAY
    )
    kept = catalog.update_store(created.id, name=None, metadata={"owner": "legal"})
    assert (kept.name, kept.metadata) == ("HR policies", {"owner": "legal"})
    cleared = catalog.update_store(created.id, metadata=None, expires_after=None)
    assert (cleared.metadata, cleared.expires_after, cleared.expires_at) == ({}, None, None)
    assert catalog.get_store(created.id) == cleared

    catalog.delete_store(created.id)
    with pytest.raises(VectorStoreNotFoundError, match=created.id) as caught:
        catalog.get_store(created.id)
    assert (caught.value.status, caught.value.param) == (404, "vector_store_id")
    with pytest.raises(VectorStoreNotFoundError):
        catalog.delete_store(created.id)
    with pytest.raises(VectorStoreNotFoundError):
        catalog.update_store(created.id, name="x")


def test_records_match_openais_objects_and_are_picklable(catalog, docs):
    store = catalog.create_store("s", file_ids=[docs["hr.txt"]], chunking_strategy=STATIC)
    [member] = catalog.list_store_files(store.id).data
    batch = catalog.create_batch(store.id, [docs["eng.txt"]], chunking_strategy=STATIC)
    VectorStore.model_validate(dataclasses.asdict(store) | {"object": "vector_store"})
    VectorStoreFile.model_validate(dataclasses.asdict(member) | {"object": "vector_store.file"})
    VectorStoreFileBatch.model_validate(
        dataclasses.asdict(batch) | {"object": "vector_store.files_batch"}
    )
    page = catalog.list_stores()
    assert pickle.loads(pickle.dumps(page)) == page
    assert pickle.loads(pickle.dumps(member)) == member


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata.k"),
        ({"metadata": {"k" * 65: "v"}}, "metadata." + "k" * 65),
        ({"metadata": {"n": 1}}, "metadata.n"),
        ({"expires_after": {"anchor": "created_at", "days": 1}}, "expires_after"),
        ({"expires_after": {"anchor": "last_active_at", "days": 0}}, "expires_after"),
        ({"expires_after": {"anchor": "last_active_at", "days": 366}}, "expires_after"),
        ({"name": 5}, "name"),
    ],
)
def test_bad_store_fields_are_refused_and_nothing_is_created(catalog, kwargs, param):
    with pytest.raises(InvalidRequestError) as caught:
        catalog.create_store(**{"name": "s", **kwargs})
    assert (caught.value.status, caught.value.param) == (400, param)
    assert catalog.list_stores().data == ()


# -- pagination ------------------------------------------------------------------------------------


def test_list_pages_in_both_orders_with_after_before_and_has_more(catalog):
    # All in the same second: the order is the creation order all the same.
    ids = [catalog.create_store(f"s{i}").id for i in range(25)]
    newest_first = ids[::-1]

    def listed(**kwargs):
        page = catalog.list_stores(**kwargs)
        assert (
            (page.first_id, page.last_id) == (page.data[0].id, page.data[-1].id)
            if page.data
            else (None, None)
        )
        return [s.id for s in page.data], page.has_more

    assert listed() == (newest_first[:20], True)
    assert listed(after=newest_first[19]) == (newest_first[20:], False)
    assert listed(order="asc", limit=10) == (ids[:10], True)
    assert listed(order="asc", limit=10, after=ids[9]) == (ids[10:20], True)
    assert listed(order="asc", limit=10, after=ids[19]) == (ids[20:], False)
    assert listed(order="asc", limit=5, before=ids[20]) == (ids[15:20], True)
    assert listed(order="asc", limit=5, before=ids[3]) == (ids[:3], False)
    assert listed(order="desc", limit=5, before=newest_first[10]) == (newest_first[5:10], True)
    assert listed(order="desc", limit=5, before=newest_first[2]) == (newest_first[:2], False)
    assert listed(order="asc", after=ids[4], before=ids[8]) == (ids[5:8], False)
    assert listed(order="asc", limit=100) == (ids, False)
    assert listed(order="asc", after=ids[-1]) == ([], False)


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"after": "vs_" + "0" * 24}, "after"),
        ({"before": "vs_unknown"}, "before"),
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"order": "newest"}, "order"),
    ],
)
def test_bad_list_parameters_are_refused(catalog, kwargs, param):
    catalog.create_store("s")
    with pytest.raises(InvalidRequestError) as caught:
        catalog.list_stores(**kwargs)
    assert (caught.value.status, caught.value.param) == (400, param)


def test_store_files_page_by_attachment_order(catalog, docs):
    store = catalog.create_store("s")
    order = [docs["ops.txt"], docs["hr.txt"], docs["eng.txt"]]
    for doc_id in order:
        catalog.attach(store.id, [doc_id])
    page = catalog.list_store_files(store.id, limit=2, order="asc")
    assert ([f.id for f in page.data], page.has_more) == (order[:2], True)
    page = catalog.list_store_files(store.id, limit=2, order="asc", after=page.last_id)
    assert ([f.id for f in page.data], page.has_more) == (order[2:], False)
    page = catalog.list_store_files(store.id, limit=2, before=order[0])
    assert ([f.id for f in page.data], page.has_more) == (order[:0:-1], False)
    with pytest.raises(InvalidRequestError) as caught:
        catalog.list_store_files(store.id, after="file-not-in-store")
    assert caught.value.param == "after"


# -- files -----------------------------------------------------------------------------------------


def test_attach_and_detach_keep_counts_and_usage_exact(fake_service, catalog, docs, clock):
    hr, eng, ops = docs["hr.txt"], docs["eng.txt"], docs["ops.txt"]
    store = catalog.create_store("s", file_ids=[hr], attributes={"team": "hr"})
    assert (store.file_counts, store.usage_bytes) == (counts(1), size(fake_service, hr))

    clock.now += 5
    attached = catalog.attach(store.id, [eng, ops], {"team": "eng", "year": 2024}, STATIC)
    assert [(f.id, f.status, f.attributes, f.chunking_strategy) for f in attached] == [
        (eng, "completed", {"team": "eng", "year": 2024}, STATIC),
        (ops, "completed", {"team": "eng", "year": 2024}, STATIC),
    ]
    assert [(f.usage_bytes, f.file_name, f.created_at) for f in attached] == [
        (size(fake_service, eng), "eng.txt", T0 + 5),
        (size(fake_service, ops), "ops.txt", T0 + 5),
    ]
    now = catalog.get_store(store.id)
    assert now.file_counts == counts(3) and now.last_active_at == T0 + 5
    assert now.usage_bytes == sum(size(fake_service, d) for d in (hr, eng, ops))

    catalog.detach(store.id, eng)
    after = catalog.get_store(store.id)
    assert after.file_counts == counts(2)
    assert after.usage_bytes == size(fake_service, hr) + size(fake_service, ops)
    assert {f.id for f in catalog.list_store_files(store.id).data} == {hr, ops}
    assert size(fake_service, eng) > 0  # the document itself stays
    with pytest.raises(DocumentNotFoundError, match="is not in vector store") as caught:
        catalog.detach(store.id, eng)
    assert caught.value.status == 404
    with pytest.raises(DocumentNotFoundError):
        catalog.get_store_file(store.id, eng)


def test_reattaching_updates_attributes_and_keeps_the_membership(catalog, docs, clock):
    hr = docs["hr.txt"]
    store = catalog.create_store("s", file_ids=[hr], attributes={"team": "hr"})
    clock.now += 60
    [again] = catalog.attach(store.id, [hr], {"team": "legal"})
    assert (again.attributes, again.created_at, again.chunking_strategy) == (
        {"team": "legal"},
        T0,
        {"type": "auto"},
    )
    assert catalog.get_store(store.id).file_counts == counts(1)
    updated = catalog.update_store_file_attributes(store.id, hr, {"team": "ops", "public": True})
    assert updated.attributes == {"team": "ops", "public": True}
    assert catalog.get_store_file(store.id, hr) == updated
    assert catalog.update_store_file_attributes(store.id, hr, None).attributes == {}


def test_attaching_an_unknown_file_attaches_nothing(catalog, docs):
    store = catalog.create_store("s")
    with pytest.raises(DocumentNotFoundError, match=r"'file-nope'.*nothing was attached") as caught:
        catalog.attach(store.id, [docs["hr.txt"], "file-nope", docs["eng.txt"]])
    assert (caught.value.status, caught.value.param) == (404, "file_id")
    assert catalog.get_store(store.id).file_counts == counts(0)
    assert catalog.list_store_files(store.id).data == ()
    with pytest.raises(DocumentNotFoundError, match="file-nope"):
        catalog.create_store("t", file_ids=[docs["hr.txt"], "file-nope"])
    assert [s.id for s in catalog.list_stores().data] == [store.id]
    with pytest.raises(VectorStoreNotFoundError):
        catalog.attach("vs_" + "0" * 24, [docs["hr.txt"]])


@pytest.mark.parametrize(
    ("attributes", "param"),
    [
        ({f"k{i}": i for i in range(17)}, "attributes"),
        ({"note": "x" * 600}, "attributes.note"),
        ({"k" * 65: 1}, "attributes." + "k" * 65),
        ({"tags": ["a", "b"]}, "attributes.tags"),
        ({"none": None}, "attributes.none"),
        ({"inf": float("inf")}, "attributes.inf"),
    ],
)
def test_attribute_limits_are_enforced_on_every_write(catalog, docs, attributes, param):
    hr = docs["hr.txt"]
    store = catalog.create_store("s", file_ids=[hr], attributes={"team": "hr"})
    for write in (
        lambda: catalog.attach(store.id, [docs["eng.txt"]], attributes),
        lambda: catalog.attach(store.id, [hr], attributes),
        lambda: catalog.create_batch(store.id, [docs["eng.txt"]], attributes),
        lambda: catalog.update_store_file_attributes(store.id, hr, attributes),
        lambda: catalog.create_store("t", file_ids=[hr], attributes=attributes),
    ):
        with pytest.raises(InvalidRequestError) as caught:
            write()
        assert (caught.value.status, caught.value.param) == (400, param)
    assert [(f.id, f.attributes) for f in catalog.list_store_files(store.id).data] == [
        (hr, {"team": "hr"})
    ]
    assert len(catalog.list_stores().data) == 1


def test_sixteen_attributes_of_512_characters_are_accepted(catalog, docs):
    attributes = {f"k{i}": "x" * 512 for i in range(16)}
    store = catalog.create_store("s")
    [member] = catalog.attach(store.id, [docs["hr.txt"]], attributes)
    assert member.attributes == attributes


@pytest.mark.parametrize(
    "strategy",
    [
        {"type": "static", "static": {"max_chunk_size_tokens": 99, "chunk_overlap_tokens": 0}},
        {"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 401}},
        {"type": "static"},
        {"type": "semantic"},
        {"type": "auto", "size": 1},
        "auto",
    ],
)
def test_bad_chunking_strategies_are_refused(catalog, docs, strategy):
    store = catalog.create_store("s")
    with pytest.raises(InvalidRequestError) as caught:
        catalog.attach(store.id, [docs["hr.txt"]], chunking_strategy=strategy)
    assert (caught.value.status, caught.value.param) == (400, "chunking_strategy")
    assert catalog.get_store(store.id).file_counts.total == 0


def test_deleting_a_document_removes_its_memberships(fake_service, catalog, docs):
    hr, eng = docs["hr.txt"], docs["eng.txt"]
    first = catalog.create_store("a", file_ids=[hr, eng])
    second = catalog.create_store("b", file_ids=[hr])
    fake_service.shard("acme").delete_document(hr)
    assert catalog.get_store(first.id).file_counts == counts(1)
    assert catalog.get_store(first.id).usage_bytes == size(fake_service, eng)
    assert catalog.get_store(second.id).file_counts == counts(0)
    assert [f.id for f in catalog.list_store_files(first.id).data] == [eng]
    assert catalog.matching_doc_ids([first.id, second.id]) == [eng]


def test_deleting_a_store_leaves_its_documents(fake_service, catalog, docs):
    store = catalog.create_store("s", file_ids=list(docs.values()))
    other = catalog.create_store("t", file_ids=[docs["hr.txt"]])
    catalog.delete_store(store.id)
    shard = fake_service.shard("acme")
    assert {d.doc_id for d in shard.list_documents()} == set(docs.values())
    assert shard.search_lexical("leave policy", 5)[0].doc_id == docs["hr.txt"]
    assert catalog.get_store(other.id).file_counts == counts(1)
    with shard.transaction() as db:
        assert db.execute("SELECT COUNT(*) FROM vector_store_files").fetchone()[0] == 1


def test_reingesting_a_changed_document_keeps_its_memberships(fake_service, catalog, docs):
    store = catalog.create_store("s", file_ids=[docs["hr.txt"]], attributes={"team": "hr"})
    again = ingest(fake_service, "acme", {"hr.txt": "Leave policy: 30 days of paid leave now."})
    assert again == {"hr.txt": docs["hr.txt"]}
    assert fake_service.shard("acme").get_document(docs["hr.txt"]).version == 2
    [member] = catalog.list_store_files(store.id).data
    assert (member.id, member.attributes) == (docs["hr.txt"], {"team": "hr"})
    assert catalog.get_store(store.id).usage_bytes == size(fake_service, docs["hr.txt"])


def test_status_filter_and_counts_follow_each_membership(fake_service, catalog, docs):
    store = catalog.create_store("s", file_ids=list(docs.values()))
    with fake_service.shard("acme").transaction(write=True) as db:  # as async ingestion would
        db.execute(
            "UPDATE vector_store_files SET status = 'failed', last_error = ? WHERE doc_id = ?",
            ('{"code": "invalid_file", "message": "unreadable"}', docs["ops.txt"]),
        )
        db.execute(
            "UPDATE vector_store_files SET status = 'in_progress' WHERE doc_id = ?",
            (docs["eng.txt"],),
        )
    now = catalog.get_store(store.id)
    assert now.file_counts == counts(1, failed=1, in_progress=1) and now.status == "in_progress"
    assert now.usage_bytes == sum(size(fake_service, d) for d in docs.values())
    [failed] = catalog.list_store_files(store.id, status="failed").data
    assert (failed.id, failed.last_error.code, failed.last_error.message) == (
        docs["ops.txt"],
        "invalid_file",
        "unreadable",
    )
    assert [f.id for f in catalog.list_store_files(store.id, status="completed").data] == [
        docs["hr.txt"]
    ]
    assert catalog.list_store_files(store.id, status="cancelled").data == ()
    assert catalog.matching_doc_ids([store.id]) == [docs["hr.txt"]]  # only completed files
    with pytest.raises(InvalidRequestError) as caught:
        catalog.list_store_files(store.id, status="done")
    assert caught.value.param == "filter"


def test_file_batches_attach_all_or_nothing_and_count_their_files(catalog, docs):
    hr, eng, ops = docs["hr.txt"], docs["eng.txt"], docs["ops.txt"]
    store = catalog.create_store("s", file_ids=[ops])
    batch = catalog.create_batch(
        store.id, [hr, FileSpec(eng, {"team": "eng"}, STATIC)], attributes={"team": "hr"}
    )
    assert re.fullmatch(r"vsfb_[0-9a-f]{24}", batch.id)
    assert (batch.vector_store_id, batch.status, batch.file_counts) == (
        store.id,
        "completed",
        counts(2),
    )
    assert catalog.get_batch(store.id, batch.id) == batch
    members = {f.id: f for f in catalog.list_store_files(store.id, batch_id=batch.id).data}
    assert set(members) == {hr, eng}
    assert (members[hr].attributes, members[hr].chunking_strategy) == (
        {"team": "hr"},
        {"type": "auto"},
    )
    assert (members[eng].attributes, members[eng].chunking_strategy) == ({"team": "eng"}, STATIC)
    assert members[hr].batch_id == batch.id
    assert catalog.get_store(store.id).file_counts == counts(3)
    [again] = catalog.attach(store.id, [hr])  # a plain re-attach keeps the file in its batch
    assert again.batch_id == batch.id
    assert catalog.get_batch(store.id, batch.id).file_counts == counts(2)

    with pytest.raises(DocumentNotFoundError, match="file-nope"):
        catalog.create_batch(store.id, [ops, "file-nope"])
    assert len(catalog.list_store_files(store.id).data) == 3
    other = catalog.create_store("t")
    for store_id, batch_id in ((other.id, batch.id), (store.id, "vsfb_" + "0" * 24)):
        with pytest.raises(VectorStoreNotFoundError) as caught:
            catalog.get_batch(store_id, batch_id)
        assert (caught.value.status, caught.value.param) == (404, "batch_id")


# -- search ----------------------------------------------------------------------------------------


def test_matching_doc_ids_unions_stores_and_filters_per_membership(catalog, docs):
    hr, eng, ops = docs["hr.txt"], docs["eng.txt"], docs["ops.txt"]
    policies = catalog.create_store("policies")
    catalog.attach(policies.id, [hr], {"team": "hr", "year": 2024})
    catalog.attach(policies.id, [ops], {"team": "ops", "year": 2021})
    manuals = catalog.create_store("manuals")
    catalog.attach(manuals.id, [eng], {"team": "eng", "year": 2023})
    catalog.attach(manuals.id, [ops], {"team": "eng", "year": 2024})  # other attributes here

    both = [policies.id, manuals.id]
    assert catalog.matching_doc_ids(both) == sorted([hr, eng, ops])
    assert catalog.matching_doc_ids([policies.id]) == sorted([hr, ops])
    recent = {"type": "gte", "key": "year", "value": 2024}
    assert catalog.matching_doc_ids([policies.id], recent) == [hr]
    assert catalog.matching_doc_ids(both, recent) == sorted([hr, ops])  # ops via manuals
    eng_or_old = {
        "type": "or",
        "filters": [
            {"type": "eq", "key": "team", "value": "eng"},
            {"type": "lt", "key": "year", "value": 2022},
        ],
    }
    assert catalog.matching_doc_ids([policies.id], eng_or_old) == [ops]
    assert catalog.matching_doc_ids([manuals.id], eng_or_old) == sorted([eng, ops])
    assert catalog.matching_doc_ids(both, {"type": "eq", "key": "region", "value": "eu"}) == []
    assert catalog.matching_doc_ids(both, {"type": "eq", "key": "year", "value": "2024"}) == []

    with pytest.raises(InvalidRequestError) as caught:
        catalog.matching_doc_ids(both, {"type": "gt", "key": "team", "value": "a"})
    assert caught.value.param == "filters.value"
    with pytest.raises(InvalidRequestError) as caught:
        catalog.matching_doc_ids([])
    assert caught.value.param == "vector_store_ids"
    with pytest.raises(VectorStoreNotFoundError, match="vs_missing"):
        catalog.matching_doc_ids([policies.id, "vs_missing"])


def test_expired_stores_read_as_expired_and_refuse_use_until_modified(catalog, docs, clock):
    store = catalog.create_store(
        "s", file_ids=[docs["hr.txt"]], expires_after={"anchor": "last_active_at", "days": 1}
    )
    clock.now = T0 + DAY - 100
    catalog.touch([store.id, "vs_unknown"])
    assert catalog.get_store(store.id).last_active_at == T0 + DAY - 100
    clock.now = T0 + 2 * DAY - 101  # one second before a day after the last activity
    assert catalog.get_store(store.id).status == "completed"
    clock.now = T0 + 2 * DAY - 100
    expired = catalog.get_store(store.id)
    assert (expired.status, expired.expires_at) == ("expired", T0 + 2 * DAY - 100)
    for use in (
        lambda: catalog.matching_doc_ids([store.id]),
        lambda: catalog.attach(store.id, [docs["eng.txt"]]),
        lambda: catalog.create_batch(store.id, [docs["eng.txt"]]),
    ):
        with pytest.raises(InvalidRequestError, match="expired") as caught:
            use()
        assert caught.value.param == "vector_store_id"
    revived = catalog.update_store(store.id, expires_after={"anchor": "last_active_at", "days": 30})
    assert (revived.status, revived.expires_at) == ("completed", clock.now + 30 * DAY)
    assert catalog.matching_doc_ids([store.id]) == [docs["hr.txt"]]


# -- tenants ---------------------------------------------------------------------------------------


def test_another_tenants_stores_are_simply_absent(fake_service, catalog, docs, clock):
    store = catalog.create_store("acme only", file_ids=[docs["hr.txt"]])
    batch = catalog.create_batch(store.id, [docs["eng.txt"]])
    ingest(fake_service, "globex", {"g.txt": "Globex handbook."})
    globex = VectorStoreCatalog(fake_service.shard("globex"), OPERATOR, clock=clock)
    assert globex.list_stores().data == ()

    never = "vs_" + "f" * 24
    for probe in (store.id, never):
        with pytest.raises(VectorStoreNotFoundError) as caught:
            globex.get_store(probe)
        assert (
            str(caught.value)
            == f"no vector store {probe!r}: GET /v1/vector_stores lists this tenant's stores"
        )
        for call in (
            lambda p=probe: globex.delete_store(p),
            lambda p=probe: globex.list_store_files(p),
            lambda p=probe: globex.matching_doc_ids([p]),
            lambda p=probe: globex.get_batch(p, batch.id),
            lambda p=probe: globex.attach(p, [docs["hr.txt"]]),
        ):
            with pytest.raises(VectorStoreNotFoundError):
                call()

    own = globex.create_store("globex")
    with pytest.raises(DocumentNotFoundError, match=docs["hr.txt"]):
        globex.attach(own.id, [docs["hr.txt"]])  # acme's file id is not a globex file
    with pytest.raises(InvalidRequestError):
        globex.list_stores(after=store.id)
    assert [s.id for s in globex.list_stores().data] == [own.id]
    assert [s.id for s in catalog.list_stores().data] == [store.id]
    assert catalog.get_store(store.id).file_counts == counts(2)
