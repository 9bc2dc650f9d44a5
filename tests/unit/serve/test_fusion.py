import pytest

from index.types import SearchHit
from serve.query.fusion import RRF_K, reciprocal_rank_fusion

pytestmark = pytest.mark.unit


def hit(chunk_id: str, dense: float | None = None, bm25: float | None = None) -> SearchHit:
    return SearchHit(chunk_id, "d", "f.txt", (), None, 0, 1, "x", dense, bm25)


def test_rrf_scores_by_reciprocal_ranks_and_merges_scores():
    dense = [hit("a", dense=0.9), hit("b", dense=0.8)]
    lexical = [hit("b", bm25=7.0), hit("c", bm25=3.0)]
    fused = reciprocal_rank_fusion([dense, lexical])
    assert [h.chunk_id for h, _ in fused] == ["b", "a", "c"]
    scores = {h.chunk_id: s for h, s in fused}
    assert scores["b"] == pytest.approx(1 / (RRF_K + 2) + 1 / (RRF_K + 1))
    assert scores["a"] == pytest.approx(1 / (RRF_K + 1))
    b = fused[0][0]
    assert (b.dense_score, b.bm25_score) == (0.8, 7.0)


def test_rrf_of_nothing_is_empty():
    assert reciprocal_rank_fusion([[], []]) == []


def test_weighted_fusion_combines_normalised_scores():
    from serve.query.fusion import weighted_fusion

    dense = [hit("a", dense=0.9), hit("b", dense=0.5), hit("c", dense=0.1)]
    lexical = [hit("c", bm25=10.0), hit("d", bm25=5.0)]
    fused = dict((h.chunk_id, s) for h, s in weighted_fusion(dense, lexical, dense_weight=0.7))
    assert fused["a"] == pytest.approx(0.7)
    assert fused["b"] == pytest.approx(0.7 * 0.5)
    assert fused["c"] == pytest.approx(0.3)  # bottom of dense (0), top of lexical (1)
    assert fused["d"] == pytest.approx(0.0)
    only_dense = weighted_fusion(dense, lexical, dense_weight=1.0)
    assert next(h.chunk_id for h, _ in only_dense) == "a"
    with pytest.raises(ValueError, match="dense_weight"):
        weighted_fusion(dense, lexical, dense_weight=1.5)
