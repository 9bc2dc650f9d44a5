import math

import pytest

from serve.eval.metrics import (
    answer_matches,
    first_occurrences,
    mean,
    ndcg_at,
    percentile,
    recall_at,
    reciprocal_rank,
)

pytestmark = pytest.mark.unit

RANKED = ["a", "b", "c", "d", "e"]


def test_first_occurrences_keeps_a_documents_best_rank():
    assert first_occurrences(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]


def test_recall_at_k():
    assert recall_at(RANKED, {"b", "x"}, 1) == 0.0
    assert recall_at(RANKED, {"b", "x"}, 5) == 0.5
    assert recall_at(RANKED, {"a", "e"}, 5) == 1.0
    assert recall_at(RANKED, set(), 5) == 0.0


def test_reciprocal_rank_within_the_cutoff():
    assert reciprocal_rank(RANKED, {"c"}) == pytest.approx(1 / 3)
    assert reciprocal_rank(RANKED, {"e", "b"}) == 0.5  # the first relevant counts
    assert reciprocal_rank(RANKED, {"e"}, k=4) == 0.0
    assert reciprocal_rank(RANKED, {"z"}) == 0.0


def test_ndcg_by_hand():
    # relevant at ranks 2 and 4 of two relevant: (1/log2 3 + 1/log2 5) / (1 + 1/log2 3)
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert ndcg_at(RANKED, {"b", "d"}) == pytest.approx(expected)
    assert ndcg_at(RANKED, {"a"}) == 1.0
    assert ndcg_at(RANKED, {"z"}) == 0.0
    # more relevant documents than the cutoff: the ideal has k hits
    assert ndcg_at(["a", "b"], {"a", "b", "c"}, k=2) == 1.0


def test_answer_match_ignores_case_accents_and_spacing():
    assert answer_matches("It is Léonard  de Vinci [1].", ["leonard de vinci"])
    assert not answer_matches("It is Raphael.", ["Léonard de Vinci", " "])


def test_mean_and_percentile():
    assert mean([]) is None and mean([1.0, 2.0]) == 1.5
    assert percentile([5, 1, 3, 2, 4], 0.5) == 3
    assert percentile([5, 1, 3, 2, 4], 0.95) == 5
    assert percentile([], 0.5) is None
