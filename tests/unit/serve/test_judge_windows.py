"""The judge's query windows: which part of a long passage it reads when a pair must be cut."""

import pytest

from serve.query.rerankers import query_weights, query_window

pytestmark = pytest.mark.unit


def test_a_token_in_every_candidate_weighs_little_and_a_rare_one_most():
    passages = [[1, 2, 3], [1, 4], [1, 5, 6]] * 7  # 21 candidates
    weights = query_weights([1, 2, 9], passages)
    assert 0 < weights[1] < 0.05  # in every candidate: tells almost nothing
    assert weights[9] > weights[2] > 10 * weights[1]  # in none, in a third, in all
    assert query_weights([1], [[1, 2]])[1] > 0  # one candidate: still a signal


def test_the_window_with_the_most_question_weight_is_chosen_with_its_matches_centred():
    tokens = [0] * 10 + [7, 8] + [0] * 10
    assert query_window(tokens, {7: 1.0, 8: 1.0}, 6) in (7, 8)  # 0 0 (0) 7 8 (0) 0 0


def test_the_window_stays_inside_the_passage():
    assert query_window([7, 0, 0, 0, 0, 0], {7: 1.0}, 4) == 0
    assert query_window([0, 0, 0, 0, 0, 7], {7: 1.0}, 4) == 2
    assert query_window([1, 2, 3, 4, 5], {9: 1.0}, 3) == 0  # nothing matches: the start
    assert query_window([1, 2, 3], {3: 1.0}, 3) == 0  # the whole passage is one window


def test_rarer_words_outweigh_a_run_of_common_ones():
    # Three occurrences of a common token (weight 0.1) against one rare token (weight 1.0).
    tokens = [4, 4, 4, 0, 0, 0, 0, 0, 9, 0]
    start = query_window(tokens, {4: 0.1, 9: 1.0}, 3)
    assert 9 in tokens[start : start + 3] and 4 not in tokens[start : start + 3]


def test_centring_keeps_every_match_of_a_window_they_fill():
    # Matches at both ends of the best 4-token window: centring must not cut the last one.
    tokens = [0, 0, 7, 0, 0, 8, 0, 0, 0]
    start = query_window(tokens, {7: 1.0, 8: 1.0}, 4)
    assert start == 2 and tokens[start : start + 4] == [7, 0, 0, 8]
