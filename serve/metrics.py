"""Every Prometheus series of the appliance, declared in one place.

They are Ray metrics (ray.util.metrics): each replica records its own, and Ray's metrics agent
exports them, with Ray's and Serve's own series, at http://<host>:<metrics_port>/metrics (the
URL `grounded up` prints). Created on first use inside a replica (they need a running Ray).
"""

from __future__ import annotations

from functools import cache

STAGE_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120]


class Metrics:
    def __init__(self) -> None:
        from ray.util.metrics import Counter, Gauge, Histogram

        self.requests = Counter(
            "grounded_requests_total", "HTTP requests by route and status.", ("route", "status")
        )
        self.latency = Histogram(
            "grounded_request_seconds", "HTTP request latency by route.",
            boundaries=STAGE_BUCKETS, tag_keys=("route",),
        )  # fmt: skip
        self.stage = Histogram(
            "grounded_stage_seconds",
            "Query path latency per stage (condense, embed, retrieve, rerank, prompt, "
            "admission, first_token, first_text, check, cascade, generate, total).",
            boundaries=STAGE_BUCKETS, tag_keys=("stage",),
        )  # fmt: skip
        self.tokens = Counter(
            "grounded_tokens_total", "Tokens in and out of each generator.", ("kind", "model")
        )
        self.routes = Counter(
            "grounded_routes_total",
            "Answers by the model that wrote them and how it was chosen (asked by name, routed, "
            "cascaded after the small model's answer failed its check), with the router's reason "
            "(not_found_low_score: a small model's 'not found' kept without a cascade).",
            ("model", "decision", "reason"),
        )
        self.abstentions = Counter(
            "grounded_abstentions_total", "Answers that were 'not found in the sources'.", ("by",)
        )
        self.invalid_citations = Counter(
            "grounded_invalid_citations_removed_total", "[n] citations removed by the check."
        )
        self.embed_cache = Counter(
            "grounded_query_embedding_cache_total", "Query embedding cache lookups.", ("result",)
        )
        self.kv_cache_usage = Gauge(
            "grounded_vllm_kv_cache_usage", "vLLM KV-cache use, 0..1, per model.", ("model",)
        )
        self.prefix_queries = Counter(
            "grounded_vllm_prefix_cache_queries_total", "Prompt tokens looked up in the cache.",
            ("model",),
        )  # fmt: skip
        self.prefix_hits = Counter(
            "grounded_vllm_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
            ("model",),
        )  # fmt: skip
        self.running = Gauge(
            "grounded_vllm_requests", "vLLM requests by model and state.", ("model", "state")
        )
        self.shard_chunks = Gauge(
            "grounded_shard_chunks", "Chunks in each loaded tenant shard.", ("tenant",)
        )
        self.shards_loaded = Gauge("grounded_shards_loaded", "Tenant shards open in a replica.")
        self.shard_leases = Gauge(
            "grounded_shard_leases", "Tenant shards a Shards replica owns (several nodes)."
        )
        self.lease_renewals = Counter(
            "grounded_shard_lease_renewals_total",
            "Lease renewals by outcome: renewed; failed (the state server erred: the local "
            "deadline decides); lost (taken over, or run out on the server); expired (the local "
            "deadline passed before a renewal succeeded).",
            ("outcome",),
        )
        self.takeovers = Counter(
            "grounded_shard_takeovers_total", "Tenant shards owned after taking their lease."
        )
        self.replayed_entries = Counter(
            "grounded_shard_replayed_entries_total", "Log entries applied to a node's copy."
        )
        self.replay_seconds = Histogram(
            "grounded_shard_replay_seconds", "Bringing a copy up to the log when taking it over.",
            boundaries=STAGE_BUCKETS,
        )  # fmt: skip
        self.snapshots = Counter(
            "grounded_shard_snapshots_total",
            "Snapshots of tenant shards by outcome: stored (the log truncated below it); "
            "failed (kept the log; tried again after the next write); restored (a takeover "
            "started from one: this node's copy did not follow the log).",
            ("outcome",),
        )
        self.shard_log = Gauge(
            "grounded_shard_log", "A tenant's log after its last snapshot: entries and bytes "
            "(what a takeover replays), as its owner sees them.", ("tenant", "unit"),
        )  # fmt: skip
        self.state_errors = Counter(
            "grounded_state_errors_total",
            "The state server could not do a store's work (a 503 to retry): by store (its "
            "schema: keys, usage, responses, audit, shards) and SQLSTATE (lost: the link; "
            "unknown: lost while committing).",
            ("store", "code"),
        )
        self.source_runs = Counter(
            "grounded_source_runs_total", "Source runs by outcome (done, failed).",
            ("tenant", "source", "outcome"),
        )  # fmt: skip
        self.source_files = Counter(
            "grounded_source_files_total",
            "Files a source's runs handled, by change (added, changed, moved, access, deleted, "
            "failed).", ("tenant", "source", "change"),
        )  # fmt: skip
        self.source_documents = Gauge(
            "grounded_source_documents", "Files a source holds after its last run.",
            ("tenant", "source"),
        )  # fmt: skip
        self.source_last_success = Gauge(
            "grounded_source_last_success_timestamp_seconds",
            "When a source's last successful run ended (its lag: time() minus this).",
            ("tenant", "source"),
        )
        self.tenant_requests = Counter(
            "grounded_tenant_requests_total",
            "Chat requests per tenant and key by outcome (answered, abstained, cancelled, "
            "refused) and refusal reason (the budget or the queue).",
            ("tenant", "key", "outcome", "reason"),
        )
        self.tenant_tokens = Counter(
            "grounded_tenant_tokens_total", "Generator tokens per tenant, key and model.",
            ("tenant", "key", "kind", "model"),
        )  # fmt: skip
        self.tenant_preemptions = Counter(
            "grounded_tenant_preemptions_total",
            "Generations of a tenant restarted by fair admission before their first token, to "
            "let a lighter tenant's prompt through.",
            ("tenant",),
        )
        self.tenant_cost = Counter(
            "grounded_tenant_cost_total",
            "Estimated cost (configured prices) per tenant, key and model.",
            ("tenant", "key", "model"),
        )

    @staticmethod
    def add(counter, value: float, tags: dict[str, str] | None = None) -> None:
        """Counter.inc refuses 0; adding nothing is a no-op here."""
        if value > 0:
            counter.inc(value, tags=tags)

    def record_stages(self, timings: dict[str, float]) -> None:
        for stage, seconds in timings.items():
            self.stage.observe(seconds, tags={"stage": stage})


@cache
def metrics() -> Metrics:
    return Metrics()
