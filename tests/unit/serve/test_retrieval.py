import pytest

from index.pipeline import SourceFile
from serve.query.retrieval import retrieve

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
