"""ShardHost (serve/shards/host.py) called directly, as the Shards deployment calls it: every
operation takes the caller's Reader, and nothing a request carries widens it."""

from __future__ import annotations

import asyncio

import pytest

from index.access import OPERATOR, Reader
from index.config import IndexConfig
from index.errors import DocumentNotFoundError
from index.service import IndexService
from index.testing import HashingEmbedder
from serve.config import load_config
from serve.query.retrieval import SearchFilter, SearchParams
from serve.shards.host import ShardHost

pytestmark = pytest.mark.unit
TENANT = "acme"
HANA = Reader("user:hana", frozenset({"user:hana", "group:hr"}))
ELI = Reader("user:eli", frozenset({"user:eli", "group:eng"}))
SALARY = b"The salary band for engineers is 70,000 to 90,000 euros a year."


@pytest.fixture
def host(tmp_path):
    service = IndexService(IndexConfig(), tmp_path, embedder=HashingEmbedder()).start()
    yield ShardHost(load_config(None, data_dir=tmp_path), lambda root: service)
    service.close()


def run(coroutine):
    return asyncio.run(coroutine)


def test_a_search_is_as_its_reader_whatever_the_filter_it_carries(host):
    async def scenario():
        result, _ = await host.upload(TENANT, HANA, "salaries.txt", SALARY, 30, ("group:hr",))
        vector = HashingEmbedder().embed_queries(["salary band engineers"])[0]
        model = await host.embedder_model(TENANT)
        widened = SearchParams(search_filter=SearchFilter(readable_by=OPERATOR))
        found = {}
        for who in (HANA, ELI):
            _, hits = await host.search(TENANT, who, "salary band", vector, model, 5, widened)
            found[who.identity] = {hit.doc_id for hit, _ in hits}
        return result.doc_id, found

    salaries, found = run(scenario())
    assert found == {"user:hana": {salaries}, "user:eli": set()}


def test_reads_of_a_hidden_file_are_those_of_an_absent_one(host):
    async def scenario():
        result, _ = await host.upload(TENANT, HANA, "salaries.txt", SALARY, 30, ("group:hr",))
        listed = [f.doc_id for f in await host.files(TENANT, ELI)]
        errors = []
        for doc_id in (result.doc_id, "doc-" + "0" * 20):
            for read in (host.file(TENANT, ELI, doc_id), host.text(TENANT, ELI, doc_id),
                         host.content(TENANT, ELI, doc_id, False)):  # fmt: skip
                with pytest.raises(DocumentNotFoundError) as refused:
                    await read
                errors.append(refused.value.message.replace(doc_id, "ID"))
        readable = await host.readable(TENANT, ELI, [result.doc_id])
        return listed, errors, readable

    listed, errors, readable = run(scenario())
    assert listed == [] and readable == set()
    assert set(errors) == {"no such file: ID"}


def test_the_same_name_from_two_identities_is_two_documents(host):
    async def scenario():
        first, _ = await host.upload(TENANT, HANA, "plan.txt", b"The HR plan.", 30, ("group:hr",))
        other, _ = await host.upload(TENANT, ELI, "plan.txt", b"Eli's plan.", 30)
        again, _ = await host.upload(TENANT, HANA, "plan.txt", b"The HR plan, v2.", 30)
        return first, other, again

    first, other, again = run(scenario())
    assert first.doc_id == again.doc_id != other.doc_id
    assert (again.status, again.version) == ("replaced", 2)


def test_a_search_through_the_deployment_names_its_reader():
    from serve.deployments.searcher import RemoteSearcher

    with pytest.raises(ValueError, match="names its reader"):
        run(RemoteSearcher(None, None).search(TENANT, "q", 5, SearchParams()))


def test_an_owner_off_its_own_list_neither_reads_nor_replaces_its_file(host):
    """It took itself off the list: its file is 404 to it, and uploading the name again is a
    403 saying an admin may give it back (never a silent new version)."""
    from index.errors import PermissionDeniedError

    async def scenario():
        first, _ = await host.upload(TENANT, HANA, "plan.txt", b"The HR plan.", 30)
        await host.set_access(TENANT, HANA, first.doc_id, ("group:finance",))
        with pytest.raises(DocumentNotFoundError):
            await host.file(TENANT, HANA, first.doc_id)
        with pytest.raises(PermissionDeniedError, match="an admin may give it back"):
            await host.upload(TENANT, HANA, "plan.txt", b"Another plan.", 30)
        return await host.file(TENANT, OPERATOR, first.doc_id)

    kept = run(scenario())
    assert (kept.version, kept.access) == (1, ("group:finance",))


def test_the_index_service_starts_once_for_callers_that_come_while_it_starts(tmp_path):
    """The sources' scheduler and a first request may both need the service: one start (two
    at once raced importing transformers: a 500 in the chaos test); a failed start is tried
    again by the next caller."""
    import time

    starts, service = [], IndexService(IndexConfig(), tmp_path, embedder=HashingEmbedder())

    def start(root):
        starts.append(root)
        time.sleep(0.2)
        if len(starts) == 1:
            raise OSError("the first start fails")
        return service.start()

    host = ShardHost(load_config(None, data_dir=tmp_path), start)

    async def scenario():
        first = await asyncio.gather(*(host.index_service() for _ in range(3)),
                                     return_exceptions=True)  # fmt: skip
        assert [type(r) for r in first] == [OSError] * 3 and len(starts) == 1
        started = await asyncio.gather(*(host.index_service() for _ in range(3)))
        assert started == [service] * 3 and len(starts) == 2

    run(scenario())
    service.close()
