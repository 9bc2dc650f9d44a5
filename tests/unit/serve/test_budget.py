import pytest
from hypothesis import given
from hypothesis import strategies as st

from index.errors import InvalidRequestError
from serve.query.budget import ContextLengthError, plan_budget

pytestmark = pytest.mark.unit


def test_sources_admitted_by_rank_until_spent():
    plan = plan_budget(
        window=1000,
        max_tokens=200,
        system_tokens=100,
        question_tokens=50,
        source_tokens=[300, 300, 300],
    )
    assert plan.sources == (0, 1)
    assert plan.prompt_tokens == 100 + 50 + 600
    assert plan.max_tokens == 200


def test_history_trimmed_oldest_first_within_its_share():
    plan = plan_budget(
        window=1000,
        max_tokens=100,
        system_tokens=100,
        question_tokens=0,
        source_tokens=[],
        history_tokens=[100, 80, 60, 50],
        history_share=0.25,
    )
    assert plan.history == (1, 2, 3)  # 200 tokens allowed: 50 + 60 + 80, not the oldest 100


def test_request_that_cannot_fit_states_both_numbers():
    with pytest.raises(
        ContextLengthError, match=r"maximum context length is 512 tokens.*needs 600"
    ):
        plan_budget(
            window=512, max_tokens=300, system_tokens=100, question_tokens=200, source_tokens=[10]
        )


def test_non_positive_max_tokens_is_refused():
    with pytest.raises(InvalidRequestError, match="max_tokens must be positive"):
        plan_budget(window=512, max_tokens=0, system_tokens=1, question_tokens=1, source_tokens=[])


@given(
    window=st.integers(100, 5000),
    max_tokens=st.integers(1, 500),
    system=st.integers(0, 300),
    question=st.integers(1, 300),
    sources=st.lists(st.integers(1, 800), max_size=20),
    history=st.lists(st.integers(1, 400), max_size=10),
)
def test_plan_always_fits_the_window(window, max_tokens, system, question, sources, history):
    try:
        plan = plan_budget(
            window=window,
            max_tokens=max_tokens,
            system_tokens=system,
            question_tokens=question,
            source_tokens=sources,
            history_tokens=history,
        )
    except ContextLengthError:
        assert system + question + max_tokens > window
        return
    used = sum(sources[i] for i in plan.sources) + sum(history[i] for i in plan.history)
    assert plan.prompt_tokens == system + question + used
    assert plan.prompt_tokens + plan.max_tokens <= window
    assert list(plan.sources) == list(range(len(plan.sources)))  # a prefix of the ranking
    assert list(plan.history) == list(range(len(history) - len(plan.history), len(history)))
