"""Budget arithmetic of the usage ledger, with an injected clock (fixed UTC windows)."""

from __future__ import annotations

import pytest

from index.errors import RateLimitError
from serve.accounting.budgets import (
    Budget,
    BudgetsConfig,
    BudgetTooSmallError,
    Ledger,
    Prices,
    request_caps,
    window_start,
)
from serve.config import load_config

pytestmark = pytest.mark.unit

NONE = Budget()
DAY = 86_400


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def ledger(tmp_path, clock, default=NONE, tenants=None, prices=None) -> Ledger:
    config = BudgetsConfig(default=default, tenants=tenants or {}, prices=prices or Prices())
    return Ledger(tmp_path, config, clock)


def test_window_starts_are_utc_minutes_and_days():
    assert window_start(1_000_000_000.5, "minute") == 999_999_960
    assert window_start(1_000_000_000.5, "day") == 999_993_600  # 2001-09-09T00:00Z


def test_a_request_within_the_minute_budget_is_admitted_and_settled_to_what_it_used(tmp_path):
    clock = Clock(20 * DAY + 10)
    book = ledger(tmp_path, clock, Budget(tokens_per_minute=1000))
    lease = book.reserve("acme", "key_a", NONE, 600)  # prompt + max_tokens
    assert book.used("tenant:acme", "minute") == 600
    book.settle(lease, 250)  # it stopped early
    assert book.used("tenant:acme", "minute") == 250
    assert book.used("key:key_a", "minute") == 250


def test_over_the_minute_budget_is_429_with_retry_after_to_the_window_end(tmp_path):
    clock = Clock(20 * DAY + 45.2)  # 45.2 s into a minute
    book = ledger(tmp_path, clock, Budget(tokens_per_minute=1000))
    book.settle(book.reserve("acme", "key_a", NONE, 700), 700)
    with pytest.raises(RateLimitError) as refused:
        book.reserve("acme", "key_a", NONE, 400)
    assert refused.value.retry_after == 15  # ceil(60 - 45.2)
    assert refused.value.reason == "tokens_per_minute"
    assert "700 of its tokens_per_minute budget of 1000" in refused.value.message
    # a refusal reserves nothing, and a smaller request still fits
    assert book.used("tenant:acme", "minute") == 700
    book.reserve("acme", "key_a", NONE, 300)


def test_the_minute_window_rolls_over_but_the_day_keeps_counting(tmp_path):
    clock = Clock(20 * DAY + 59)
    book = ledger(tmp_path, clock, Budget(tokens_per_minute=1000, tokens_per_day=1500))
    book.settle(book.reserve("acme", "k", NONE, 900), 900)
    with pytest.raises(RateLimitError):
        book.reserve("acme", "k", NONE, 200)
    clock.now += 1  # the next minute
    assert book.used("tenant:acme", "minute") == 0
    book.settle(book.reserve("acme", "k", NONE, 500), 500)
    with pytest.raises(RateLimitError) as refused:
        book.reserve("acme", "k", NONE, 200)  # minute 500 + 200 fits; the day (1400 + 200) not
    assert refused.value.reason == "tokens_per_day"
    assert refused.value.retry_after == DAY - 60
    clock.now = 21 * DAY  # midnight UTC
    book.reserve("acme", "k", NONE, 1000)


def test_a_settlement_after_the_rollover_corrects_the_window_it_was_reserved_in(tmp_path):
    clock = Clock(20 * DAY + 50)
    book = ledger(tmp_path, clock, Budget(tokens_per_minute=1000))
    lease = book.reserve("acme", "k", NONE, 800)
    clock.now += 30  # the generation ran into the next minute
    book.settle(lease, 300)
    assert book.used("tenant:acme", "minute") == 0  # the new minute is untouched
    clock.now -= 30
    assert book.used("tenant:acme", "minute") == 300


def test_a_request_larger_than_a_whole_window_is_400_not_429(tmp_path):
    book = ledger(tmp_path, Clock(5.0), Budget(tokens_per_minute=500))
    with pytest.raises(BudgetTooSmallError, match="more than the tenant 'acme'") as refused:
        book.reserve("acme", "k", NONE, 501)
    assert refused.value.status == 400 and refused.value.reason == "tokens_per_minute"


def test_concurrency_counts_leases_until_settled_and_expires_them(tmp_path):
    clock = Clock(100.0)
    book = ledger(tmp_path, clock, Budget(max_concurrent=2))
    first = book.reserve("acme", "k1", NONE, 10)
    book.reserve("acme", "k2", NONE, 10)  # a lease its replica never settles
    with pytest.raises(RateLimitError, match="2 generations in flight") as refused:
        book.reserve("acme", "k1", NONE, 10)
    assert refused.value.reason == "max_concurrent"
    book.reserve("globex", "k3", NONE, 10)  # another tenant is not affected
    book.settle(first, 10)
    third = book.reserve("acme", "k1", NONE, 10)
    with pytest.raises(RateLimitError):
        book.reserve("acme", "k1", NONE, 10)
    clock.now += book.config.lease_s  # the unsettled lease expires
    book.settle(third, 10)
    book.reserve("acme", "k1", NONE, 10)
    book.reserve("acme", "k1", NONE, 10)


def test_a_keys_own_budget_caps_the_key_and_the_tenants_caps_all_its_keys(tmp_path):
    clock = Clock(30 * DAY)
    book = ledger(tmp_path, clock, tenants={"acme": Budget(tokens_per_minute=1000)})
    small = Budget(tokens_per_minute=300)
    book.settle(book.reserve("acme", "batch", small, 300), 300)
    with pytest.raises(RateLimitError, match="key 'batch'"):
        book.reserve("acme", "batch", small, 1)
    book.settle(book.reserve("acme", "app", NONE, 700), 700)  # the tenant's other key
    with pytest.raises(RateLimitError, match="tenant 'acme'"):
        book.reserve("acme", "app", NONE, 1)
    book.reserve("globex", "other", NONE, 10_000)  # the default budget: unlimited


def test_budgets_survive_a_new_ledger_on_the_same_data_dir(tmp_path):
    clock = Clock(40 * DAY + 1)
    budget = Budget(tokens_per_minute=100, max_concurrent=1)
    first = ledger(tmp_path, clock, budget)
    first.reserve("acme", "k", NONE, 80)
    first.close()
    restarted = ledger(tmp_path, clock, budget)  # a restart, or another ingress replica
    assert restarted.used("tenant:acme", "minute") == 80
    with pytest.raises(RateLimitError, match="max_concurrent"):
        restarted.reserve("acme", "k", NONE, 10)


def test_request_caps_take_the_smallest_that_is_set():
    tenant = Budget(max_prompt_tokens=2000, max_completion_tokens=256)
    key = Budget(max_completion_tokens=64)
    assert request_caps(tenant, key) == (2000, 64)
    assert request_caps(NONE, NONE) == (None, None)


def test_usage_sums_requests_tokens_refusals_and_cost_per_tenant_and_key(tmp_path):
    clock = Clock(50 * DAY)
    prices = Prices(prompt_per_million=1.0, cached_prompt_per_million=0.5,
                    completion_per_million=2.0)  # fmt: skip
    book = ledger(tmp_path, clock, prices=prices)
    cost = book.record("acme", "k1", "answered", prompt=1000, cached=400, completion=100)
    assert cost == pytest.approx((600 * 1.0 + 400 * 0.5 + 100 * 2.0) / 1e6)
    book.record("acme", "k1", "abstained")
    book.record("acme", "k1", "refused", reason="tokens_per_minute")
    book.record("acme", "k1", "refused", reason="tokens_per_minute")
    clock.now += 3600
    book.record("acme", "k2", "answered", prompt=10, completion=5)
    book.record("globex", "k3", "cancelled", prompt=7, completion=1)
    rows = {(r.tenant, r.key_id): r for r in book.usage()}
    k1 = rows[("acme", "k1")]
    assert (k1.requests, k1.answered, k1.abstained) == (4, 1, 1)
    assert k1.refused == {"tokens_per_minute": 2}
    assert (k1.prompt_tokens, k1.cached_tokens, k1.completion_tokens) == (1000, 400, 100)
    assert k1.cost == pytest.approx(cost)
    assert rows[("globex", "k3")].cancelled == 1
    assert {r.key_id for r in book.usage(tenant="acme")} == {"k1", "k2"}
    recent = book.usage(since=clock.now - 60)
    assert {(r.tenant, r.key_id) for r in recent} == {("acme", "k2"), ("globex", "k3")}


@pytest.mark.parametrize(
    ("budgets", "message"),
    [
        (
            "default: {tokens_per_minute: 0}",
            r"budgets\.default\.tokens_per_minute: .*greater than 0",
        ),
        ("tenants: {Acme Corp: {}}", r"budgets\.tenants: invalid tenant id 'Acme Corp'"),
        ("default: {tokens_per_hour: 5}", r"budgets\.default\.tokens_per_hour: unknown field"),
    ],
)
def test_budget_config_errors_name_the_field(tmp_path, budgets, message):
    from index.errors import ConfigError

    path = tmp_path / "grounded.yaml"
    path.write_text(f"budgets:\n  {budgets}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)
