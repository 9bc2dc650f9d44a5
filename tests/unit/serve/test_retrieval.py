import pytest

from index.pipeline import SourceFile
from serve.query.retrieval import SearchFilter, retrieve

pytestmark = pytest.mark.unit

FILES = {
    "pump.txt": "The pump needs oil every month.",
    "contract.txt": "Contract 44-A/2024 covers the loading docks.",
    "badge.txt": "Badges are worn on site.",
}


@pytest.fixture
def shard(fake_service):
    sources = [SourceFile.from_bytes(t.encode(), n) for n, t in FILES.items()]
    list(fake_service.pipeline("acme").ingest(sources))
    return fake_service.shard("acme")


def test_modes_score_with_their_own_measure(fake_service, shard):
    dense = retrieve(shard, fake_service.embedder, "pump oil", 2, "dense")
    lexical = retrieve(shard, fake_service.embedder, "pump oil", 2, "lexical")
    assert dense[0][0].file_name == "pump.txt"
    assert all(score == hit.dense_score for hit, score in dense)
    assert [(h.file_name, s == h.bm25_score) for h, s in lexical] == [("pump.txt", True)]


def test_hybrid_fuses_both_sides_and_respects_k(fake_service, shard):
    fused = retrieve(shard, fake_service.embedder, "44-A/2024 pump", 2, "hybrid")
    assert len(fused) == 2
    assert {h.file_name for h, _ in fused} == {"pump.txt", "contract.txt"}
    scores = [score for _, score in fused]
    assert scores == sorted(scores, reverse=True)
    contract = next(h for h, _ in fused if h.file_name == "contract.txt")
    assert contract.bm25_score is not None and contract.dense_score is not None


def test_filters_narrow_by_file_name_doc_id_and_attribute(fake_service):
    pipeline = fake_service.pipeline("acme")
    list(pipeline.ingest([
        SourceFile.from_bytes(b"oil the pump monthly", "a.txt", attributes={"site": "lyon"}),
        SourceFile.from_bytes(b"oil the pump weekly", "b.txt", attributes={"site": "lille"}),
    ]))  # fmt: skip
    shard, embedder = fake_service.shard("acme"), fake_service.embedder

    def files(search_filter, mode="hybrid"):
        found = retrieve(shard, embedder, "oil pump", 5, mode, search_filter=search_filter)
        return sorted(h.file_name for h, _ in found)

    assert files(None) == ["a.txt", "b.txt"]
    for mode in ("dense", "lexical", "hybrid"):
        assert files(SearchFilter(file_names=("b.txt",)), mode) == ["b.txt"]
        assert files(SearchFilter(attributes={"site": "lyon"}), mode) == ["a.txt"]
    b_id = shard.matching_doc_ids(file_names=["b.txt"])[0]
    assert files(SearchFilter(doc_ids=(b_id,))) == ["b.txt"]
    assert files(SearchFilter(doc_ids=("doc-of-another-tenant",))) == []
    assert files(SearchFilter(attributes={"site": "paris"})) == []


def test_near_duplicates_keep_the_best_ranked_copy(fake_service):
    text = "The quarterly safety inspection covers ladders, forklifts and fire doors."
    list(fake_service.pipeline("acme").ingest([
        SourceFile.from_bytes(text.encode(), "v1.txt"),
        SourceFile.from_bytes((text + " ").encode(), "v2.txt"),  # same words, other bytes
        SourceFile.from_bytes(b"Fire doors are checked by the quarterly safety inspection team.",
                              "other.txt"),
    ]))  # fmt: skip
    found = retrieve(fake_service.shard("acme"), fake_service.embedder, "safety inspection", 5)
    names = [h.file_name for h, _ in found]
    assert len({"v1.txt", "v2.txt"} & set(names)) == 1 and "other.txt" in names


def test_score_threshold_applies_to_the_returned_score(fake_service, shard):
    everything = retrieve(shard, fake_service.embedder, "pump oil", 5, "dense")
    cut = everything[0][1] - 1e-6
    kept = retrieve(shard, fake_service.embedder, "pump oil", 5, "dense", score_threshold=cut)
    assert [h.chunk_id for h, _ in kept] == [everything[0][0].chunk_id]
