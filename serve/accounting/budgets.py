"""Per-tenant and per-key token budgets, and the usage ledger behind them and `grounded usage`.

Budgets (``budgets`` in the config, adjustable per key with `grounded keys budget`):
  - per request: prompt tokens (sources are trimmed to fit) and completion tokens;
  - per fixed UTC window: tokens per minute and per day (prompt + completion, counted with the
    generator's tokenizer);
  - generations in flight at once.
A tenant's limits cap the tenant's total; a key's limits cap that key alone; both apply.

Admission reserves ``prompt + max_tokens`` in the current minute and day windows before the
request reaches the generator, so an admitted request is never cut off by a budget; when it
ends, the reservation is replaced by the tokens actually used. A request that would overflow a
window is refused with 429 and a Retry-After that points at the window's end.

All state is in the ``usage`` store (serve/state/database.py: ``<data_dir>/usage.sqlite`` on one
node,
the ``usage`` schema of the PostgreSQL server of several), one transaction per decision, a
tenant's admissions serialised on its lock, so budgets survive a restart and hold across every
ingress replica. Leases of generations in flight expire after ``lease_s``, so a replica that dies
mid-request cannot hold a tenant's concurrency forever.
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

from index.errors import GroundedError, InvalidRequestError, RateLimitError
from index.store.tenants import validate_tenant
from serve.state.database import StateConfig, open_database

if TYPE_CHECKING:
    from serve.query.admission import Usage

WINDOWS = {"minute": 60, "day": 86_400}
LIMIT_FIELDS = (
    "max_prompt_tokens",
    "max_completion_tokens",
    "tokens_per_minute",
    "tokens_per_day",
    "max_concurrent",
)


class BudgetTooSmallError(InvalidRequestError):
    """A single request larger than a whole budget: waiting would not help (400, not 429)."""

    def __init__(self, message: str, *, reason: str, param: str = "max_tokens") -> None:
        super().__init__(message, param=param)
        self.reason = reason


class Budget(BaseModel):
    """Limits of one tenant or key; None means unlimited."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_prompt_tokens: int | None = Field(None, gt=0, description="Per request.")
    max_completion_tokens: int | None = Field(None, gt=0, description="Per request.")
    tokens_per_minute: int | None = Field(None, gt=0, description="Prompt + completion.")
    tokens_per_day: int | None = Field(None, gt=0, description="Prompt + completion, UTC day.")
    max_concurrent: int | None = Field(None, gt=0, description="Generations in flight.")

    def window_limit(self, window: str) -> int | None:
        return self.tokens_per_minute if window == "minute" else self.tokens_per_day


class Prices(BaseModel):
    """Per-token prices for the cost estimate, per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: str = "USD"
    prompt_per_million: float = Field(0.0, ge=0)
    cached_prompt_per_million: float = Field(0.0, ge=0)
    completion_per_million: float = Field(0.0, ge=0)

    def cost(self, prompt: int, cached: int, completion: int) -> float:
        return (
            (prompt - cached) * self.prompt_per_million
            + cached * self.cached_prompt_per_million
            + completion * self.completion_per_million
        ) / 1_000_000


class BudgetsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    default: Budget = Budget()
    tenants: dict[str, Budget] = Field(default_factory=dict, description="Per tenant id.")
    prices: Prices = Prices()
    lease_s: float = Field(900.0, gt=0, description="An in-flight lease expires after this.")

    @field_validator("tenants")
    @classmethod
    def _tenant_ids(cls, value: dict[str, Budget]) -> dict[str, Budget]:
        for tenant in value:
            try:
                validate_tenant(tenant)
            except GroundedError as exc:  # pydantic reports ValueErrors with the field's path
                raise ValueError(str(exc)) from None
        return value

    def for_tenant(self, tenant: str) -> Budget:
        return self.tenants.get(tenant, self.default)


def request_caps(*budgets: Budget) -> tuple[int | None, int | None]:
    """The per-request prompt and completion caps: the smallest of the budgets that set one."""

    def smallest(values):
        values = [v for v in values if v is not None]
        return min(values) if values else None

    return (
        smallest(b.max_prompt_tokens for b in budgets),
        smallest(b.max_completion_tokens for b in budgets),
    )


def window_start(now: float, window: str) -> int:
    return int(now // WINDOWS[window]) * WINDOWS[window]


@dataclass(frozen=True, slots=True)
class Lease:
    """Tokens reserved for one admitted generation, in the windows current at admission."""

    id: str
    tenant: str
    key_id: str
    reserved: int
    windows: tuple[tuple[str, int], ...]  # (window, start)


@dataclass(frozen=True, slots=True)
class UsageRow:
    tenant: str
    key_id: str
    requests: int
    answered: int
    abstained: int
    cancelled: int
    refused: dict[str, int]
    embedded: int  # /v1/embeddings requests (their tokens are in prompt_tokens)
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cost: float
    # By model (generator.models; "grounded" where there is one): tokens and cost of each.
    models: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)


# The store's migrations (serve/state/database.py), each applied once. The first creates what a
# ledger written before migrations were counted already has (IF NOT EXISTS), so it adopts those too.
MIGRATIONS = (
    """
CREATE TABLE IF NOT EXISTS windows (
    subject TEXT NOT NULL, "window" TEXT NOT NULL, start BIGINT NOT NULL, tokens BIGINT NOT NULL,
    PRIMARY KEY (subject, "window", start)
);
CREATE TABLE IF NOT EXISTS leases (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, key_id TEXT NOT NULL,
    expires DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS requests (
    ts DOUBLE PRECISION NOT NULL, tenant TEXT NOT NULL, key_id TEXT NOT NULL,
    outcome TEXT NOT NULL, reason TEXT, prompt BIGINT NOT NULL DEFAULT 0,
    cached BIGINT NOT NULL DEFAULT 0, completion BIGINT NOT NULL DEFAULT 0,
    cost DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS requests_by_time ON requests (ts);
CREATE TABLE IF NOT EXISTS model_usage (
    ts DOUBLE PRECISION NOT NULL, tenant TEXT NOT NULL, key_id TEXT NOT NULL,
    model TEXT NOT NULL, prompt BIGINT NOT NULL, cached BIGINT NOT NULL,
    completion BIGINT NOT NULL, cost DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS model_usage_by_time ON model_usage (ts)
""",
)
# PostgreSQL sums BIGINTs as NUMERIC: cast back, so both stores return ints.
TOKEN_SUMS = ", ".join(f"CAST(sum({c}) AS BIGINT)" for c in ("prompt", "cached", "completion"))
OUTCOMES = ("answered", "abstained", "cancelled", "refused", "embedded")


class Ledger:
    """Budgets and usage accounting in the ``usage`` store (serve/state/database.py); ``clock`` is
    injectable."""

    def __init__(
        self,
        data_dir: Path,
        config: BudgetsConfig,
        clock: Callable[[], float] = time.time,
        model_prices: Mapping[str, Prices] | None = None,
        state: StateConfig | None = None,
    ) -> None:
        """``model_prices``: a model's own prices, where they are not ``config.prices``;
        ``state``: where the store is (default: ``<data_dir>/usage.sqlite``)."""
        self.config, self.clock = config, clock
        self.model_prices = dict(model_prices or {})
        self.db = open_database(state or StateConfig(), data_dir, "usage", MIGRATIONS)

    def close(self) -> None:
        self.db.close()

    def reserve(self, tenant: str, key_id: str, key_budget: Budget, tokens: int) -> Lease:
        """Admit a generation of up to ``tokens`` tokens, or raise RateLimitError (429, with
        retry_after) or InvalidRequestError (400: larger than a whole window's budget)."""
        now = self.clock()
        subjects = (
            ("tenant", tenant, self.config.for_tenant(tenant)),
            ("key", key_id, key_budget),
        )
        windows = tuple((w, window_start(now, w)) for w in WINDOWS)
        # The tenant's lock: its admissions, on every replica, decide one after another (each
        # statement reads what the one before it committed: PostgreSQL's read committed).
        with self.db.transaction(lock=f"tenant:{tenant}") as db:
            db.execute("DELETE FROM leases WHERE expires <= ?", (now,))
            for kind, subject, budget in subjects:
                self._check(db, kind, subject, budget, tokens, windows, now)
            lease = Lease(uuid.uuid4().hex, tenant, key_id, tokens, windows)
            db.execute(
                "INSERT INTO leases VALUES (?, ?, ?, ?)",
                (lease.id, tenant, key_id, now + self.config.lease_s),
            )
            for kind, subject, _ in subjects:
                for window, start in windows:
                    self._add(db, f"{kind}:{subject}", window, start, tokens)
        return lease

    def _check(self, db, kind, subject, budget: Budget, tokens, windows, now) -> None:
        who = f"{kind} {subject!r}"
        if budget.max_concurrent is not None:
            column = "tenant" if kind == "tenant" else "key_id"
            (running,) = db.execute(
                f"SELECT count(*) FROM leases WHERE {column} = ?", (subject,)
            ).fetchone()
            if running >= budget.max_concurrent:
                raise RateLimitError(
                    f"the {who} already has {running} generations in flight, its limit "
                    f"(max_concurrent) is {budget.max_concurrent}; retry when one finishes",
                    retry_after=1,
                    reason="max_concurrent",
                )
        for window, start in windows:
            limit = budget.window_limit(window)
            if limit is None:
                continue
            name = f"tokens_per_{window}"
            if tokens > limit:
                raise BudgetTooSmallError(
                    f"this request may use {tokens} tokens (prompt + max_tokens), more than the "
                    f"{who}'s whole budget {name} = {limit}; lower max_tokens or shorten the "
                    "question, or ask the operator to raise the budget",
                    reason=name,
                )
            used = self._used(db, f"{kind}:{subject}", window, start)
            if used + tokens > limit:
                retry = max(1, math.ceil(start + WINDOWS[window] - now))
                raise RateLimitError(
                    f"the {who} has used {used} of its {name} budget of {limit} tokens in this "
                    f"{window} (UTC); this request may use {tokens} more; retry in {retry} s",
                    retry_after=retry,
                    reason=name,
                )

    @staticmethod
    def _used(db, subject: str, window: str, start: int) -> int:
        row = db.execute(
            'SELECT tokens FROM windows WHERE subject = ? AND "window" = ? AND start = ?',
            (subject, window, start),
        ).fetchone()
        return row[0] if row else 0

    @staticmethod
    def _add(db, subject: str, window: str, start: int, tokens: int) -> None:
        db.execute(
            'INSERT INTO windows VALUES (?, ?, ?, ?) ON CONFLICT (subject, "window", start) '
            "DO UPDATE SET tokens = CASE WHEN windows.tokens + excluded.tokens < 0 THEN 0 "
            "ELSE windows.tokens + excluded.tokens END",
            (subject, window, start, tokens),
        )

    def settle(self, lease: Lease, used_tokens: int) -> None:
        """The generation ended: charge what it used instead of what it reserved (in the
        windows it was admitted in), and free its concurrency slot."""
        with self.db.transaction() as db:  # adding to a row is atomic: no lock needed
            db.execute("DELETE FROM leases WHERE id = ?", (lease.id,))
            for subject in (f"tenant:{lease.tenant}", f"key:{lease.key_id}"):
                for window, start in lease.windows:
                    self._add(db, subject, window, start, used_tokens - lease.reserved)
            horizon = window_start(self.clock(), "day") - WINDOWS["day"]
            db.execute("DELETE FROM windows WHERE start < ?", (horizon,))

    def used(self, subject: str, window: str) -> int:
        """Tokens charged to ``tenant:<id>`` or ``key:<id>`` in the current window."""
        with self.db.read() as db:
            return self._used(db, subject, window, window_start(self.clock(), window))

    def record(
        self,
        tenant: str,
        key_id: str,
        outcome: str,
        *,
        reason: str | None = None,
        prompt: int = 0,
        cached: int = 0,
        completion: int = 0,
        models: Mapping[str, Usage] | None = None,
    ) -> float:
        """Account one request; returns its estimated cost. ``models``: the generator tokens
        of each model that worked on it (then the request's tokens are their sum)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; one of {OUTCOMES}")
        models = dict(models or {})
        if models:
            prompt = sum(u.prompt_tokens for u in models.values())
            cached = sum(u.cached_tokens for u in models.values())
            completion = sum(u.completion_tokens for u in models.values())
        costs = {model: self.cost(usage, model) for model, usage in models.items()}
        default = self.config.prices.cost(prompt, cached, completion)
        cost = sum(costs.values()) if models else default
        now = self.clock()
        with self.db.transaction() as db:
            db.execute(
                "INSERT INTO requests VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (now, tenant, key_id, outcome, reason, prompt, cached, completion, cost),
            )
            db.executemany(
                "INSERT INTO model_usage VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(now, tenant, key_id, model, u.prompt_tokens, u.cached_tokens,
                  u.completion_tokens, costs[model]) for model, u in models.items()],
            )  # fmt: skip
        return cost

    def cost(self, usage: Usage, model: str) -> float:
        """The estimated cost of ``usage`` on ``model`` (its own prices, else the default)."""
        prices = self.model_prices.get(model, self.config.prices)
        return prices.cost(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens)

    def usage(self, tenant: str | None = None, since: float | None = None) -> list[UsageRow]:
        """Per tenant and key, since ``since`` (epoch seconds) or ever."""
        where, args = ["ts >= ?"], [since or 0.0]
        if tenant is not None:
            where.append("tenant = ?")
            args.append(tenant)
        with self.db.read() as db:
            rows = db.execute(
                f"SELECT tenant, key_id, outcome, reason, count(*), {TOKEN_SUMS}, sum(cost) "
                f"FROM requests WHERE {' AND '.join(where)} "
                "GROUP BY tenant, key_id, outcome, reason ORDER BY tenant, key_id",
                args,
            ).fetchall()
            by_model = db.execute(
                f"SELECT tenant, key_id, model, {TOKEN_SUMS}, sum(cost) "
                f"FROM model_usage WHERE {' AND '.join(where)} "
                "GROUP BY tenant, key_id, model ORDER BY model",
                args,
            ).fetchall()
        totals: dict[tuple[str, str], dict] = {}
        for tenant_id, key_id, outcome, reason, count, prompt, cached, completion, cost in rows:
            t = totals.setdefault(
                (tenant_id, key_id),
                {"requests": 0, "answered": 0, "abstained": 0, "cancelled": 0, "refused": {},
                 "embedded": 0,
                 "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "cost": 0.0},
            )  # fmt: skip
            t["requests"] += count
            if outcome == "refused":
                t["refused"][reason or "other"] = t["refused"].get(reason or "other", 0) + count
            else:
                t[outcome] += count
            t["prompt_tokens"] += prompt
            t["cached_tokens"] += cached
            t["completion_tokens"] += completion
            t["cost"] += cost
        for tenant_id, key_id, model, prompt, cached, completion, cost in by_model:
            if (tenant_id, key_id) in totals:
                totals[tenant_id, key_id].setdefault("models", {})[model] = {
                    "prompt_tokens": prompt, "cached_tokens": cached,
                    "completion_tokens": completion, "cost": cost,
                }  # fmt: skip
        return [UsageRow(tenant_id, key_id, **t) for (tenant_id, key_id), t in totals.items()]
