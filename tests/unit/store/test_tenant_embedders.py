"""Embedders chosen per tenant (index.embedders, index.tenant_embedders) and `reindex` from one
to the other while readers keep searching."""

import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from index.config import EmbedderConfig, IndexConfig
from index.errors import EmbedderChangedError, EmbedderMismatchError
from index.pipeline import SourceFile
from index.service import Embedders, IndexService
from index.testing import HashingEmbedder
from serve.query.retrieval import SearchParams, search_tenant

pytestmark = pytest.mark.unit

EN, FR = HashingEmbedder(64, "fake/english"), HashingEmbedder(48, "fake/multilingual")


def service(data_dir: Path, tenants: dict[str, str] | None = None, **given) -> IndexService:
    config = IndexConfig(
        embedders={"multilingual": EmbedderConfig(model="unused-here", dense_weight=0.0)},
        tenant_embedders=tenants or {},
    )
    embedders = Embedders(config, given={"default": EN, "multilingual": FR, **given})
    return IndexService(config, data_dir, embedders=embedders).start()


def ingest(index: IndexService, tenant: str, files: dict[str, str]) -> None:
    sources = [SourceFile.from_bytes(text.encode(), name) for name, text in files.items()]
    assert all(r.status != "refused" for r in index.pipeline(tenant).ingest(sources))


def top(index: IndexService, tenant: str, query: str) -> str:
    return search_tenant(index, tenant, query, 3, SearchParams(mode="dense"))[0][0].file_name


def test_each_tenant_is_built_and_searched_with_its_own_embedder(tmp_path):
    index = service(tmp_path, {"acme-fr": "multilingual"})
    ingest(index, "acme-en", {"a.txt": "pump oil", "b.txt": "valve seal"})
    ingest(index, "acme-fr", {"a.txt": "huile pompe", "b.txt": "joint vanne"})
    assert index.shard("acme-en").manifest.embedder_model_id == "fake/english"
    assert index.shard("acme-fr").manifest.embedder_model_id == "fake/multilingual"
    assert index.shard("acme-fr").stats().manifest.dimension == 48
    assert top(index, "acme-en", "valve") == "b.txt"
    assert top(index, "acme-fr", "vanne") == "b.txt"


def test_a_tenant_moved_in_the_config_is_served_as_built_until_reindexed(tmp_path):
    ingest(service(tmp_path), "acme", {"a.txt": "pump oil", "b.txt": "valve seal"})
    moved = service(tmp_path, {"acme": "multilingual"})
    assert moved.shard("acme").manifest.embedder_model_id == "fake/english"
    assert top(moved, "acme", "valve") == "b.txt"
    ingest(moved, "acme", {"c.txt": "gasket ring"})  # still written with the model it has
    assert moved.reindex("acme") == ("fake/english", "fake/multilingual", 3)
    assert moved.shard("acme").manifest.embedder_model_id == "fake/multilingual"
    assert top(moved, "acme", "gasket") == "c.txt"
    moved.close()
    assert service(tmp_path, {"acme": "multilingual"}).shard("acme").stats().vectors == 3


def test_a_shard_whose_model_is_no_longer_configured_is_refused_with_the_fix(tmp_path):
    ingest(service(tmp_path), "acme", {"a.txt": "pump oil"})
    gone = service(tmp_path, default=HashingEmbedder(32, "fake/newer"))
    with pytest.raises(EmbedderMismatchError, match=r"fake/english.*grounded reindex --tenant"):
        gone.shard("acme")
    assert gone.reindex("acme")[1] == "fake/newer"  # its stored text is enough to move it
    assert top(gone, "acme", "pump") == "a.txt"


class SlowEmbedder(HashingEmbedder):
    """Embeds documents slowly, so that a reindex lasts long enough to be read during."""

    def __init__(self, *args, started: threading.Event) -> None:
        super().__init__(*args)
        self.started = started

    def embed_documents(self, texts):
        self.started.set()
        time.sleep(0.05)
        return super().embed_documents(texts)


def test_readers_and_writers_go_on_during_a_reindex(tmp_path):
    files = {f"{i}.txt": f"topic{i} words" for i in range(40)}
    before = service(tmp_path)
    ingest(before, "acme", files)
    answers = {top(before, "acme", "topic7")}  # the old model's, then the new one's (below)
    started = threading.Event()
    slow = SlowEmbedder(48, "fake/multilingual", started=started)
    index = service(tmp_path, {"acme": "multilingual"}, multilingual=slow)
    result: list = []
    worker = threading.Thread(target=lambda: result.append(index.reindex("acme")))
    worker.start()
    assert started.wait(10)
    found, delays = [], []
    ingest(index, "acme", {"new.txt": "written during the reindex"})  # old model, then moved
    while worker.is_alive():
        began = time.perf_counter()
        found.append(top(index, "acme", "topic7"))
        delays.append(time.perf_counter() - began)
    worker.join()
    assert result == [("fake/english", "fake/multilingual", 41)]
    answers.add(top(index, "acme", "topic7"))
    assert len(found) > 10 and set(found) <= answers  # every search answered by one model
    assert sorted(delays)[len(delays) // 2] < 0.5  # not held behind the re-embedding
    assert top(index, "acme", "written during") == "new.txt"  # re-embedded with the new one


def test_a_reader_in_another_process_follows_the_reindex(tmp_path):
    ingest(service(tmp_path), "acme", {"a.txt": "pump oil", "b.txt": "valve seal"})
    reader = service(tmp_path)  # e.g. the appliance's shard replica, open before the move
    assert reader.shard("acme").manifest.dimension == 64
    service(tmp_path, {"acme": "multilingual"}).reindex("acme")  # e.g. `grounded reindex`
    shard = reader.shard("acme")
    hits = shard.search_dense(FR.embed_queries(["valve"]), 1)  # syncs with the new generation
    assert shard.manifest.embedder_model_id == "fake/multilingual"
    assert hits[0].file_name == "b.txt"


def test_embedder_names_are_checked():
    with pytest.raises(ValidationError, match="no embedder named 'french'"):
        IndexConfig(tenant_embedders={"acme": "french"})
    with pytest.raises(ValidationError, match=r"'default' is the name of index\.embedder"):
        IndexConfig(embedders={"default": EmbedderConfig()})
    with pytest.raises(ValidationError, match=r"model 'x' is already configured as 'm'"):
        IndexConfig(embedders={"m": EmbedderConfig(model="x"), "n": EmbedderConfig(model="x")})
    config = IndexConfig(embedders={"m": EmbedderConfig(model="x")}, tenant_embedders={"a": "m"})
    assert (config.embedder_name("a"), config.embedder_name("b")) == ("m", "default")


class SlowStart(HashingEmbedder):
    def __init__(self, *args, release: threading.Event) -> None:
        super().__init__(*args)
        self.release = release

    def start(self) -> HashingEmbedder:
        assert self.release.wait(10)
        return self


def test_a_model_loading_does_not_hold_up_the_others():
    release = threading.Event()
    config = IndexConfig(embedders={"multilingual": EmbedderConfig(model="unused-here")})
    embedders = Embedders(
        config, given={"default": EN, "multilingual": SlowStart(48, "fake/slow", release=release)}
    )
    embedders.get("default")
    loading = threading.Thread(target=embedders.get, args=("multilingual",))
    loading.start()
    time.sleep(0.1)  # the multilingual model is now loading
    began = time.monotonic()
    assert embedders.get("default")[0] is EN
    assert time.monotonic() - began < 1.0
    release.set()
    loading.join(10)
    assert embedders.get("multilingual")[0].model_id == "fake/slow"


def test_a_tenant_moved_to_an_embedder_not_installed_is_served_as_built(tmp_path):
    ingest(service(tmp_path), "acme", {"a.txt": "pump oil", "b.txt": "valve seal"})
    config = IndexConfig(embedders={"multilingual": EmbedderConfig(model=str(tmp_path / "no"))},
                         tenant_embedders={"acme": "multilingual"})  # fmt: skip
    index = IndexService(config, tmp_path, embedder=EN).start()
    assert top(index, "acme", "valve") == "b.txt"  # the missing model is not needed for this
    with pytest.raises(Exception, match="grounded models fetch"):
        index.reindex("acme")  # only the move needs it


def test_an_embedder_not_installed_is_only_an_error_where_it_is_used(tmp_path):
    config = IndexConfig(embedders={"multilingual": EmbedderConfig(model=str(tmp_path / "no"))},
                         tenant_embedders={"acme-fr": "multilingual"})  # fmt: skip
    index = IndexService(config, tmp_path, embedder=EN).start()
    ingest(index, "acme-en", {"a.txt": "pump oil"})  # the English tenant is unaffected
    with pytest.raises(Exception, match="grounded models fetch"):
        index.pipeline("acme-fr")


def test_the_embedders_own_fusion_weight_applies_to_its_tenants(tmp_path):
    index = service(tmp_path, {"acme-fr": "multilingual"})  # multilingual: dense_weight 0.0
    files = {"a.txt": "joint joint", "b.txt": "vidange rare",
             "c.txt": "joint vidange pompe huile filtre moteur"}  # fmt: skip
    ingest(index, "acme-en", files)
    ingest(index, "acme-fr", files)
    assert index.dense_weight(index.shard("acme-fr")) == 0.0
    assert index.dense_weight(index.shard("acme-en")) is None  # query.dense_weight applies

    def order(tenant: str, params: SearchParams) -> list[str]:
        return [h.file_name for h, _ in search_tenant(index, tenant, "joint vidange", 3, params)]

    hybrid = SearchParams(mode="hybrid", fusion="weighted", dense_weight=1.0)
    dense, lexical = SearchParams("dense"), SearchParams("lexical")
    assert order("acme-en", dense) != order("acme-en", lexical)  # the weight decides
    assert order("acme-en", hybrid) == order("acme-en", dense)  # the query's weight, 1.0
    assert order("acme-fr", hybrid) == order("acme-fr", lexical)  # the embedder's, 0.0


def test_a_writer_that_embedded_with_the_old_model_is_refused_after_a_reindex(tmp_path):
    ingest(service(tmp_path), "acme", {"a.txt": "pump oil"})
    writer = service(tmp_path)  # e.g. a `grounded ingest` or the appliance, open before the move
    pipeline = writer.pipeline("acme")  # embeds with the old model
    service(tmp_path, {"acme": "multilingual"}).reindex("acme")
    with pytest.raises(EmbedderChangedError, match="now indexed with fake/multilingual"):
        list(pipeline.ingest([SourceFile.from_bytes(b"valve seal", "b.txt")]))
    assert writer.shard("acme").stats().documents == 1  # nothing written with the old model
    ingest(writer, "acme", {"b.txt": "valve seal"})  # a new pipeline takes the new model
    assert top(writer, "acme", "valve") == "b.txt"


def test_a_document_deleted_and_uploaded_again_during_a_reindex_keeps_its_new_text(tmp_path):
    ingest(service(tmp_path), "acme", {f"{i}.txt": f"topic{i} words" for i in range(20)})
    started = threading.Event()
    slow = SlowEmbedder(48, "fake/multilingual", started=started)
    index = service(tmp_path, {"acme": "multilingual"}, multilingual=slow)
    worker = threading.Thread(target=index.reindex, args=("acme",))
    worker.start()
    assert started.wait(10)
    doc_id = index.shard("acme").list_documents()[0].doc_id
    name = index.shard("acme").get_document(doc_id).file_name
    index.shard("acme").delete_document(doc_id)
    ingest(index, "acme", {name: "gearbox replaced entirely"})  # the same id, version 1 again
    worker.join()
    [chunk] = [h for h, _ in search_tenant(index, "acme", "gearbox", 5, SearchParams("lexical"))]
    assert chunk.doc_id == doc_id and chunk.text == "gearbox replaced entirely"
    assert not search_tenant(index, "acme", f"topic{name[:-4]}", 5, SearchParams("lexical"))
