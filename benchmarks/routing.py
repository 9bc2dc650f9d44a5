"""Routing between a small and a large generator (issue 39): what each model answers on the
human-written question sets, and what a router and a cascade made of the two would answer.

    # 1. each model answers every question of the sets (one engine at a time, --concurrency
    #    questions in flight), the answer check at threshold 0 so that its P(yes) is recorded:
    .venv/bin/python -m benchmarks.routing collect --model qwen2.5-0.5b --out small.jsonl
    .venv/bin/python -m benchmarks.routing collect --model qwen2.5-1.5b --out large.jsonl
    #    ... and the small model again, its answers checked by the large one (large_checks):
    .venv/bin/python -m benchmarks.routing collect --model qwen2.5-0.5b \
        --checker qwen2.5-1.5b --out small-large-checks.jsonl
    # 2. always-small, always-large, routed and routed + cascade, side by side: the router's
    #    thresholds and the small model's check threshold chosen on the dev halves, reported
    #    on the test halves (serve/query/routing.py decides, as in the appliance):
    .venv/bin/python -m benchmarks.routing report small.jsonl large.jsonl \
        [--large-checks small-large-checks.jsonl]
    # 3. generator seconds per answer, side by side in one process, one question at a time:
    .venv/bin/python -m benchmarks.routing timing --route '{"max_words": 20}' [--questions 24]

A question is answered right when an answerable one's answer contains an expected string, and
an unanswerable one is answered "not found". The runs use the evaluation tenants that
benchmarks.retrieval_quality builds under benchmarks/.cache/eval, and configs/cpu.yaml.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import random
import re
import statistics
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from benchmarks.retrieval_quality import CACHE
from index.access import Reader
from index.errors import InvalidRequestError
from serve.eval.metrics import answer_matches
from serve.eval.run import load_questions

ROOT = Path(__file__).resolve().parent.parent


def question_set(name: str, language: str) -> Path:
    """benchmarks/eval/<name>-<language>.jsonl: the human-written sets are "human"."""
    return ROOT / f"benchmarks/eval/{name}-{language}.jsonl"


SETS = {language: question_set("human", language) for language in ("en", "fr")}
TENANTS = {"en": "wiki-en", "fr": "wiki-fr"}


async def collect(args: argparse.Namespace) -> None:
    from index.service import IndexService
    from serve.config import load_config
    from serve.engine.generator import VllmGenerator
    from serve.engine.models import resolve_model
    from serve.query.pipeline import QueryPipeline
    from serve.query.retrieval import LocalSearcher
    from serve.query.routing import RouteConfig

    config = load_config(Path(args.config), data_dir=CACHE / "data")
    engines = {}
    for name, model in (("small", args.model), ("large", args.checker)):
        if model:
            folder = resolve_model(model, config.data_dir)
            settings = config.generator.model_copy(update={"model": folder})
            if name == "small" and args.temperature is not None:  # a sampled answer
                settings = settings.model_copy(update={"temperature": args.temperature})
            engines[name] = VllmGenerator(settings).start()
    if args.logprobs:  # the small model's answer tokens and their log-probabilities, kept
        engines["small"] = Recording(engines["small"])
    # Every answer's check P(yes) recorded: thresholds are applied when reporting. With
    # --checker, the large model checks the small one's answers (route.large_checks).
    query = config.query.model_copy(update={"min_answer_support": 0.0})
    service = IndexService(config.index, config.data_dir).start()
    route = RouteConfig(large_checks=bool(args.checker))
    pipeline = QueryPipeline(LocalSearcher(service), engines, query, route=route)
    out = Path(args.out)
    done = set()
    if out.exists():
        done = {json.loads(line)["id"] for line in out.read_text().splitlines() if line}
    todo = [
        (language, q)
        for language in args.languages.split(",")
        for q in load_questions(question_set(args.set, language))
        if q.id not in done and (q.split == "test" or not args.dev_every
                                 or int(q.id.rsplit("-", 1)[1]) % args.dev_every == 0)
    ]  # fmt: skip
    print(f"{len(todo)} questions with {args.model}", flush=True)
    slots = asyncio.Semaphore(args.concurrency)

    async def one(language, q):
        async with slots:
            started = time.perf_counter()
            answer = await pipeline.answer(TENANTS[language], q.question, model="small",
                                           request_id=q.id)  # fmt: skip
            row = {
                "id": q.id, "language": language, "split": q.split,
                "answerable": q.answerable, "question": q.question, "model": args.model,
                "checker": args.checker or args.model,
                "scores": [s.hit.rerank_score for s in answer.sources],
                "abstained": answer.abstained,
                "matched": matches(q, answer.text, answer.abstained),
                "support": answer.answer_support, "answer": answer.text,
                "timings": answer.timings, "wall": time.perf_counter() - started,
                "prompt_tokens": answer.usage.prompt_tokens,
                "completion_tokens": answer.usage.completion_tokens,
            }  # fmt: skip
            if args.logprobs:  # [[delta text, [log-probability of each of its tokens]], ...]
                row["tokens"] = engines["small"].tokens.pop(q.id, [])
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")

    try:
        await asyncio.gather(*(one(language, q) for language, q in todo))
    finally:
        for engine in engines.values():
            engine.shutdown()


def matches(question, answer: str, abstained: bool) -> bool:
    """An answer to an answerable ``question`` (an EvalQuestion) contains an expected string."""
    return (
        bool(question.answer_contains)
        and not abstained
        and answer_matches(answer, question.answer_contains)
    )


def rescored(rows: dict[str, dict], name: str) -> dict[str, dict]:
    """``rows`` of question set ``name`` (ids "<name>-...") scored again against its labels as
    they are now, those it no longer holds left out; rows of other sets as recorded."""
    questions = {q.id: q for language in TENANTS
                 for q in load_questions(question_set(name, language))}  # fmt: skip
    out = {}
    for i, row in rows.items():
        if not i.startswith(f"{name}-"):
            out[i] = row
        elif i in questions:
            matched = matches(questions[i], row["answer"], row["abstained"])
            out[i] = {**row, "answerable": questions[i].answerable, "matched": matched}
    return out


async def small_reply(pipeline, tenant: str, question: str):
    """(the small model's prompt, its raw reply, the answer to check with its cited sources,
    the large model's own prompt for the same evidence), or None where nothing passed the gate
    or the reply is "not found"."""
    from serve.query.gate import not_found_message
    from serve.query.quotes import QuotedAnswerReader

    query, hits = await pipeline.evidence(tenant, question)
    if not hits:
        return None
    prepared = pipeline.prompt("small", tenant, question, (), hits, query)
    text = ""
    async for chunk in pipeline.generators["small"].stream(
        prepared.token_ids, max_tokens=prepared.max_tokens,
        cache_salt=prepared.cache_salt, json_schema=prepared.json_schema,
    ):  # fmt: skip
        text += chunk.text
    reader = QuotedAnswerReader(prepared.sources, not_found_message(question),
                                hold=True, question=question)  # fmt: skip
    reader.feed(text)
    pending = reader.to_check()
    if pending is None:  # "not found": nothing to check
        return None
    return prepared, text, pending, pipeline.prompt("large", tenant, question, (), hits, query)


def two_models():
    """The small and the large model started (configs/cpu.yaml), the evaluation tenants' index
    service, a pipeline over both and the large model's answer check at threshold 0: the
    set-up of the experiments on the small model's replies (check_variants, cross_likelihood)."""
    from index.service import IndexService
    from serve.config import load_config
    from serve.engine.generator import VllmGenerator
    from serve.engine.models import resolve_model
    from serve.query.check import AnswerCheck
    from serve.query.pipeline import QueryPipeline
    from serve.query.retrieval import LocalSearcher

    config = load_config(ROOT / "configs/cpu.yaml", data_dir=CACHE / "data")
    engines = {}
    for name, model in (("small", "qwen2.5-0.5b"), ("large", "qwen2.5-1.5b")):
        folder = resolve_model(model, config.data_dir)
        engines[name] = VllmGenerator(config.generator.model_copy(update={"model": folder})).start()
    service = IndexService(config.index, config.data_dir).start()
    pipeline = QueryPipeline(LocalSearcher(service), engines, config.query)
    check = AnswerCheck(engines["large"], 0.0, config.query.withhold_instructions)
    return engines, service, pipeline, check


async def answer_all(one, todo, engines, service, out: Path, names: tuple[str, ...]) -> None:
    """``one(language, question)`` for each of ``todo`` (each writes its row to ``out``), the
    engines and the index service closed after; then the AUROC table of ``names``."""
    try:
        await asyncio.gather(*(one(language, q) for language, q in todo))
    finally:
        for engine in engines.values():
            engine.shutdown()
        service.close()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    rows = [r for r in rows if r.get("answerable", True)]
    print(f"\n{len(rows)} answers to answerable questions ({sum(r['right'] for r in rows)} right)")
    print_aurocs(rows, names)


def print_aurocs(rows: list[dict], names: tuple[str, ...]) -> None:
    """A markdown table: each signal's AUROC (rows whose "right" is true ranked above the
    others), per language and overall."""
    print("| signal | en | fr | all |\n|---|---|---|---|")
    for name in names:
        cells = []
        for language in ("en", "fr", None):
            mine = [r for r in rows if language in (None, r["language"])]
            value = auroc([r[name] for r in mine if r["right"]],
                          [r[name] for r in mine if not r["right"]])  # fmt: skip
            cells.append(f"{value:.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


class Recording:
    """A generator whose streamed answers keep their tokens' log-probabilities, by request
    id (everything else is the engine's)."""

    def __init__(self, engine) -> None:
        self.engine, self.tokens = engine, {}

    def __getattr__(self, name: str):
        return getattr(self.engine, name)

    async def stream(self, token_ids, **kwargs):
        kept = self.tokens.setdefault(kwargs.get("request_id", ""), [])
        async for chunk in self.engine.stream(token_ids, **{**kwargs, "logprobs": True}):
            kept.append([chunk.text, list(chunk.logprobs)])
            yield chunk


async def timing(args: argparse.Namespace) -> None:
    """Generator seconds per answer of always-small, always-large and routed (each --route's
    policy), side by side in one process: each sampled test question asked of each in turn,
    one at a time."""
    from index.service import IndexService
    from serve.config import load_config
    from serve.engine.generator import VllmGenerator
    from serve.engine.models import resolve_model
    from serve.query.pipeline import QueryOptions, QueryPipeline
    from serve.query.retrieval import LocalSearcher, SearchFilter
    from serve.query.routing import RouteConfig

    config = load_config(Path(args.config), data_dir=CACHE / "data")
    engines = {}
    for name, model in (("small", args.model), ("large", args.large)):
        folder = resolve_model(model, config.data_dir)
        engines[name] = VllmGenerator(config.generator.model_copy(update={"model": folder}))
        engines[name].start()
    service = IndexService(config.index, config.data_dir).start()
    support = {"small": args.small_support} if args.small_support is not None else {}
    routes = args.route or [RouteConfig()]
    # (label, the model asked: None routes, the route)
    policies = [("always small", "small", routes[0]), ("always large", "large", routes[0])] + [
        ("routed" if len(routes) == 1 else f"routed {n}", None, route)
        for n, route in enumerate(routes, 1)
    ]
    pipelines = {label: QueryPipeline(LocalSearcher(service), engines, config.query,
                                      route=route, min_support=support)
                 for label, _, route in policies}  # fmt: skip
    questions = [(language, q) for language in ("en", "fr")
                 for q in load_questions(SETS[language]) if q.split == "test"]  # fmt: skip
    step = max(1, len(questions) // args.questions)
    sample = questions[::step][: args.questions]
    seconds: dict[str, list[float]] = {label: [] for label, _, _ in policies}
    chosen: dict[str, list[str]] = {label: [] for label, model, _ in policies if model is None}
    # Each policy reads as its own reader (a cache salt of its own): no policy's prompts are
    # found in the prefix cache because another asked the same question before it.
    salted = {
        label: QueryOptions(
            search_filter=SearchFilter(readable_by=Reader(label, frozenset({label})))
        )
        for label in seconds
    }
    try:
        for language, q in sample:
            for label, model, _ in policies:
                pipeline, options = pipelines[label], salted[label]
                answer = await pipeline.answer(TENANTS[language], q.question, model=model,
                                               options=options)  # fmt: skip
                if answer.sources:  # generated (the gate's "not found" costs no generator)
                    seconds[label].append(answer.timings.get("generate", 0.0))
                if model is None:
                    chosen[label].append(answer.route.decision + ":" + answer.route.model)
    finally:
        for engine in engines.values():
            engine.shutdown()
    print(f"{len(sample)} test questions, one at a time; small check {args.small_support}")
    for (label, decisions), route in zip(chosen.items(), routes, strict=True):
        counts = {c: decisions.count(c) for c in sorted(set(decisions))}
        print(f"{label}: route {route.model_dump()}; {counts}")
    print("| | answers generated | generator s p50 | mean |\n|---|---|---|---|")
    for label, values in seconds.items():
        print(
            f"| {label} | {len(values)} | {statistics.median(values):.2f} | "
            f"{statistics.fmean(values):.2f} |"
        )


# --- what always-small, always-large, routed and routed + cascade answer ----------------

LARGE_SUPPORT = 0.65  # configs/cpu.yaml's min_answer_support, chosen for qwen2.5-1.5b
# The shipped example (docs/configuration.md, "Several models") as a policy of this report.
# Until 2026-12-07 it also routed before generating and cascaded under a check of 0.75:
# --policy '{"max_passages": 3, "max_words": 20, "min_check": 0.75}' reads that one.
SHIPPED = {"compares": False, "large_checks": True, "min_check": 0.85, "quote_figures": True,
           "not_found_min_score": 3.0, "cascade": True, "small_support": LARGE_SUPPORT}  # fmt: skip
ALWAYS_LARGE = {"compares": False, "cascade": False, "always_large": True, "small_support": 0.0}
GRID = {
    "min_top_score": (None, 0.0, 2.0, 4.0, 6.0),
    "min_margin": (None, 0.5, 1.0, 2.0),
    "max_passages": (None, 2, 3, 4),
    "compares": (False, True),
    "max_words": (None, 12, 16, 20),
    "small_support": (0.0, 0.3, 0.5, 0.65, 0.8),  # 0: no check
}
# route.min_check: the check's P(yes) under which the small answer cascades though it passed
CHECK_CUTS = (0.7, 0.75, 0.8, 0.85, 0.9)


def withheld(row: dict, support: float) -> bool:
    """The answer is "not found": the model said so, or its check is under ``support`` (as
    the appliance withholds it)."""
    return row["abstained"] or (row["support"] is not None and row["support"] < support)


def right(row: dict, support: float) -> bool:
    """An answerable question answered with an expected string; an unanswerable one, "not
    found"."""
    if not row["answerable"]:
        return withheld(row, support)
    return row["matched"] and not withheld(row, support)


def seconds(row: dict) -> float:
    return row["timings"].get("generate", 0.0)  # the generation and its check


def policy_outcome(small: dict, large: dict, policy: dict) -> tuple[bool, float, str]:
    """(right, generator seconds, who answered: small, large, cascade, or none at the gate),
    the router deciding as serve/query/routing.py does in the appliance."""
    from serve.query.routing import (
        FirstAnswer,
        RouteConfig,
        RouteSignals,
        below,
        cascades,
        hard_because,
    )

    if not small["scores"]:  # nothing passed the gate: "not found" without generating
        return not small["answerable"], 0.0, "none"
    route = RouteConfig(**{k: v for k, v in policy.items() if k in RouteConfig.model_fields})
    if policy.get("oracle"):  # the ceiling: the large model exactly where the small one errs
        if right(small, policy["small_support"]):
            return True, seconds(small), "small"
        return right(large, LARGE_SUPPORT), seconds(large), "large"
    signals = RouteSignals.of(small["question"], small["scores"])
    if policy.get("always_large") or hard_because(signals, route):
        return right(large, LARGE_SUPPORT), seconds(large), "large"
    support = policy["small_support"]
    # min_check_by_language (this report's only): a language's own min_check, e.g. {"fr": 0.9}
    min_check = policy.get("min_check_by_language", {}).get(small.get("language"),
                                                            policy.get("min_check"))  # fmt: skip
    # The appliance's rule (serve/query/routing.py), then this report's own experiments.
    first = FirstAnswer(small["abstained"] or below(small["support"], support), small["support"],
                        small.get("confidence"), bool(small.get("figures_disagree")))  # fmt: skip
    rule = route.model_copy(update={"min_check": min_check})
    if route.cascade and (
        cascades(first, signals.top_score, rule)
        or below(small.get("likely"), policy.get("min_likely"))
        or small.get("id") in policy.get("escalate", ())
        or (policy.get("disagree") and not agrees(small))
    ):
        return right(large, LARGE_SUPPORT), seconds(small) + seconds(large), "cascade"
    return right(small, support), seconds(small), "small"


def answers_agree(first: str, second: str) -> bool:
    """Two answers to one question say the same: both "not found", or the same words once
    case, punctuation and citation marks are set aside, one within the other ("27 days" and
    "27 days a year"), or the same figures however written ("1,450" and "1450 boxes")."""
    from serve.query.amounts import numbers_in
    from serve.query.gate import is_not_found

    if is_not_found(first) or is_not_found(second):
        return is_not_found(first) == is_not_found(second)
    first, second = (re.sub(r"\[\d+\]", " ", text) for text in (first, second))
    a, b = (" ".join(re.findall(r"\w+", text.casefold())) for text in (first, second))
    if not a or not b or a == b:
        return a == b
    if f" {a} " in f" {b} " or f" {b} " in f" {a} ":
        return True
    figures = numbers_in(first)
    return bool(figures) and figures == numbers_in(second)


def agrees(row: dict) -> bool:
    """The small model's answer and its sampled one (--resampled) say the same; True where no
    sample was recorded."""
    return "sampled" not in row or answers_agree(row["answer"], row["sampled"])


def with_sample(rows: dict[str, dict], sampled: dict[str, dict]) -> dict[str, dict]:
    """``rows`` with the sampled run's answer to each question (``sampled``)."""
    return {i: {**row, **({"sampled": sampled[i]["answer"]} if i in sampled else {})}
            for i, row in rows.items()}  # fmt: skip


def print_agreement(rows: dict[str, dict]) -> None:
    """How often the small model's answer and its sample disagree, and how often it is wrong
    then, over the answerable questions it answered."""
    for split in ("dev", "test"):
        answered = [r for r in rows.values() if r["split"] == split and r["answerable"]
                    and r["scores"] and not r["abstained"] and "sampled" in r]  # fmt: skip
        apart = [r for r in answered if not agrees(r)]
        same = [r for r in answered if agrees(r)]
        print(f"{split}: of {len(answered)} answered, the sample disagrees with {len(apart)}; "
              f"wrong: {sum(not r['matched'] for r in apart)} of those, "
              f"{sum(not r['matched'] for r in same)} of the {len(same)} others")  # fmt: skip


def evaluate(pairs: list[tuple[dict, dict]], policy: dict) -> dict:
    results = [policy_outcome(s, lg, policy) for s, lg in pairs]
    generated = [r for r in results if r[2] != "none"]
    accuracy = {}
    for language in sorted({s["language"] for s, _ in pairs}):
        mine = [r for (s, _), r in zip(pairs, results, strict=True) if s["language"] == language]
        accuracy[language] = sum(r[0] for r in mine) / len(mine)
    times = [r[1] for r in generated]
    share = max(len(generated), 1)
    large = sum(r[2] in ("large", "cascade") for r in generated)
    return {
        "accuracy": accuracy,
        "mean_accuracy": sum(accuracy.values()) / len(accuracy),
        "large_share": large / share,  # of the answers a generator wrote
        "large_of_all": large / max(len(results), 1),  # of every question, the gate's too
        "cascade_share": sum(r[2] == "cascade" for r in generated) / share,
        "seconds_p50": statistics.median(times) if times else 0.0,
        "seconds_mean": statistics.fmean(times) if times else 0.0,
    }


def table_row(label: str, measured: dict) -> str:
    """One policy's line of the report's tables (evaluate's figures)."""
    m, accuracy = measured, measured["accuracy"]
    return (f"| {label} | {accuracy.get('en', 0):.3f} | {accuracy.get('fr', 0):.3f} | "
            f"{m['mean_accuracy']:.3f} | {m['large_share']:.2f} | {m['cascade_share']:.2f} | "
            f"{m['seconds_p50']:.2f} | {m['seconds_mean']:.2f} |")  # fmt: skip


TABLE_HEAD = ("| policy | en | fr | mean | large share | cascade share | generator s p50 | mean |"
              "\n|---|---|---|---|---|---|---|---|")  # fmt: skip


def what_cascades_did(pairs: list[tuple[dict, dict]], policy: dict) -> str:
    """How many cascades ``policy`` makes on ``pairs``, what they recover and lose, and who
    wrote the wrong answers."""
    support = policy["small_support"]
    outcomes = [(s, lg, policy_outcome(s, lg, policy)) for s, lg in pairs]
    cascaded = [(s, lg) for s, lg, (_, _, who) in outcomes if who == "cascade"]
    recovered = sum(right(lg, LARGE_SUPPORT) and not right(s, support) for s, lg in cascaded)
    lost = sum(right(s, support) and not right(lg, LARGE_SUPPORT) for s, lg in cascaded)
    wrong = Counter(who for _, _, (ok, _, who) in outcomes if not ok)
    return (f"{len(cascaded)} cascades; the large model right where the small one was not: "
            f"{recovered}; the reverse: {lost}; wrong answers by who wrote them: "
            f"{dict(sorted(wrong.items()))}")  # fmt: skip


def paired_interval(
    pairs: list[tuple[dict, dict]], policy: dict, draws: int = 5000, seed: int = 0
) -> tuple[float, float]:
    """The 95 % interval of ``policy``'s mean accuracy minus always-large's on ``pairs``, by a
    paired bootstrap: each draw resamples each language's questions with replacement and
    scores both policies on the same ones, so that it shows how far a difference of a few
    questions can be from the sets' size alone."""
    scored = {}
    for small, big in pairs:
        diff = policy_outcome(small, big, policy)[0] - policy_outcome(small, big, ALWAYS_LARGE)[0]
        scored.setdefault(small["language"], []).append(diff)
    draw = random.Random(seed)
    means = sorted(
        statistics.fmean(statistics.fmean(draw.choices(diffs, k=len(diffs)))
                         for diffs in scored.values())
        for _ in range(draws)
    )  # fmt: skip
    return means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def choose(
    pairs: list[tuple[dict, dict]],
    max_large: float,
    cascade: bool,
    supports=None,
    confidences=None,
    checks=None,
    disagree=False,
    likely=None,
) -> dict:
    """The policy with the best mean accuracy on ``pairs`` whose large model answers at most
    ``max_large`` of the generated questions (ties: less of the large model, then less time);
    ``supports``: the small answers' check thresholds to try (default: GRID's);
    ``confidences``: thresholds on the small answer's confidence to cascade under, to try;
    ``checks``: thresholds on its check's P(yes) to cascade under (route.min_check), to try;
    ``disagree``: also try cascading where a sampled answer disagrees (--resampled);
    ``likely``: thresholds on the check's log-odds plus the large model's least likely token
    of the small reply (--likelihood) to cascade under, to try."""
    grid = {**GRID, "small_support": supports or GRID["small_support"]}
    if confidences:
        grid["min_confidence"] = (None, *confidences)
    if checks:
        grid["min_check"] = (None, *checks)
    if disagree:
        grid["disagree"] = (False, True)
    if likely:
        grid["min_likely"] = (None, *likely)
    best, best_key = None, None
    for values in itertools.product(*grid.values()):
        policy = {**dict(zip(grid, values, strict=True)), "cascade": cascade}
        measured = evaluate(pairs, policy)
        if measured["large_share"] > max_large:
            continue
        key = (round(measured["mean_accuracy"], 6), -measured["large_share"],
               -measured["seconds_mean"])  # fmt: skip
        if best_key is None or key > best_key:
            best, best_key = policy, key
    return best


def choose_check(pairs: list[tuple[dict, dict]], max_large: float) -> dict:
    """No routing before generating: every question is asked of the small model, checked by
    the large one, and cascades under the route.min_check (of CHECK_CUTS) with the best mean
    accuracy on ``pairs`` and the large model on at most ``max_large`` of them."""
    never = {"compares": False, "cascade": True, "small_support": LARGE_SUPPORT}
    fits = [{**never, "min_check": cut} for cut in CHECK_CUTS]
    fits = [(evaluate(pairs, policy), policy) for policy in fits]
    fits = [(m["mean_accuracy"], -m["large_share"], policy) for m, policy in fits
            if m["large_share"] <= max_large]  # fmt: skip
    return max(fits, key=lambda fit: fit[:2])[2] if fits else never


def choose_logistic(
    rows: dict[str, dict], dev: list[tuple[dict, dict]], small: dict[str, dict], max_large: float
) -> dict:
    """No routing before generating: the large model is asked when a logistic model of every
    signal (the judge's top score and margin, the passages past the gate, the question's words,
    the large model's check, the small model's own check in ``small``, the confidence) gives
    the small answer's error a probability over a threshold. ``rows``: the small answers
    checked by the large model, with confidences; the model is fitted on the generated ``dev``
    pairs and the threshold chosen on them as ``choose`` does; the policy names the questions
    (``escalate``) of ``rows`` over it."""
    from sklearn.linear_model import LogisticRegression

    known = [r["confidence"] for r in rows.values() if "confidence" in r]
    usual = statistics.median(known) if known else 0.0

    def features(row: dict) -> list[float]:
        scores, own = sorted(row["scores"], reverse=True), small[row["id"]]
        same = own["answer"] == row["answer"] and own["support"] is not None
        return [scores[0], min(scores[0] - scores[1], 10.0) if len(scores) > 1 else 10.0,
                len(scores), len(row["question"].split()),
                row["support"] if row["support"] is not None else 0.5,
                own["support"] if same else 0.5, row.get("confidence", usual)]  # fmt: skip

    fitted = [s for s, _ in dev if s["scores"]]
    model = LogisticRegression(max_iter=1000).fit(
        [features(r) for r in fitted], [not right(r, LARGE_SUPPORT) for r in fitted]
    )
    generated = [r for r in rows.values() if r["scores"]]
    wrong = dict(
        zip(
            (r["id"] for r in generated),
            model.predict_proba([features(r) for r in generated])[:, 1],
            strict=True,
        )
    )
    never = {"compares": False, "cascade": True, "small_support": LARGE_SUPPORT}
    best, best_key = never, None
    for cut in sorted({wrong[r["id"]] for r in fitted}):
        policy = {**never, "escalate": frozenset(i for i, p in wrong.items() if p >= cut)}
        measured = evaluate(dev, policy)
        key = (round(measured["mean_accuracy"], 6), -measured["large_share"])
        if measured["large_share"] <= max_large and (best_key is None or key > best_key):
            best, best_key = policy, key
    return best


def with_confidence(rows: dict[str, dict], recorded: dict[str, dict]) -> dict[str, dict]:
    """``rows`` with each answer's confidence and whether its figures are not its quote's
    (route.quote_figures), from the reply of a --logprobs run of the same model, where that
    run wrote the same answer (greedy decoding: nearly always)."""
    from serve.query.attempt import answer_confidence
    from serve.query.quotes import QuotedReplyReader, figures_disagree

    out = {}
    for i, row in rows.items():
        other = recorded.get(i)
        tokens = other.get("tokens", []) if other and other["answer"] == row["answer"] else []
        confidence = answer_confidence(tokens)
        out[i] = {**row, **({"confidence": confidence} if confidence is not None else {})}
        if tokens:
            reader = QuotedReplyReader()
            reader.feed("".join(text for text, _ in tokens))
            out[i]["figures_disagree"] = figures_disagree(reader.reply())
    return out


def with_likelihood(rows: dict[str, dict], scored: dict[str, dict]) -> dict[str, dict]:
    """``rows`` (a --checker run) with ``likely``: the log-odds of the large check's P(yes) plus
    the large model's least likely token of the small reply (benchmarks.experiments.
    cross_likelihood), where that run's reply gave the same answer."""
    out = {}
    for i, row in rows.items():
        other = scored.get(i)
        same = other and other.get("large_min") is not None and row["support"] is not None
        same = same and _bare(other["answer"]) == _bare(row["answer"])
        likely = {"likely": log_odds(row["support"]) + other["large_min"]} if same else {}
        out[i] = {**row, **likely}
    return out


def log_odds(p: float) -> float:
    p = min(max(p, 1e-9), 1 - 1e-9)
    return math.log(p / (1 - p))


def _bare(answer: str) -> str:
    return re.sub(r"\s*\[\d+\]", "", answer).strip()


def auroc(right_scores: list[float], wrong_scores: list[float]) -> float:
    """The chance that a right answer scores above a wrong one (ties count half)."""
    pairs = [(r > w) + 0.5 * (r == w) for r in right_scores for w in wrong_scores]
    return sum(pairs) / len(pairs) if pairs else float("nan")


def print_separation(sure: dict[str, dict], checked: dict[str, dict] | None) -> None:
    """How well each signal after generating ranks the small model's right answers above its
    wrong ones: over the answerable questions it answered (not "not found"), with a
    confidence; the large model's check where its run wrote the same answer."""
    for split in ("dev", "test"):
        rows = [r for r in sure.values() if r["split"] == split and r["answerable"]
                and r["scores"] and not r["abstained"] and "confidence" in r]  # fmt: skip
        signals = {"confidence": lambda r: r["confidence"], "own check": lambda r: r["support"]}
        if checked:
            signals["large check"] = lambda r: (
                checked[r["id"]]["support"] if checked[r["id"]]["answer"] == r["answer"] else None
            )
        shown = []
        for name, signal in signals.items():
            scored = [(signal(r), r["matched"]) for r in rows if signal(r) is not None]
            value = auroc([v for v, ok in scored if ok], [v for v, ok in scored if not ok])
            shown.append(f"{name} {value:.3f}")
        print(f"{split}: AUROC over {len(rows)} answered: " + ", ".join(shown))


def not_found_separation(pairs: list[tuple[dict, dict]]) -> tuple[int, float]:
    """Over the small model's own "not found" answers that reached a generator (no answer to
    check): how many, and how well the judge's best score ranks those where the large model
    is right and the small one is not (a cascade that helps) above the rest (AUROC;
    route.not_found_min_score reads that score)."""
    from serve.query.routing import top_score

    scored = [(top_score(s["scores"]), right(lg, LARGE_SUPPORT) and not right(s, 0.0))
              for s, lg in pairs
              if s["scores"] and s["abstained"] and s["support"] is None]  # fmt: skip
    value = auroc([v for v, helps in scored if helps], [v for v, helps in scored if not helps])
    return len(scored), value


def read_runs(*paths: str) -> list[dict[str, dict]]:
    return [{r["id"]: r for r in map(json.loads, Path(path).read_text().splitlines())}
            for path in paths]  # fmt: skip


def report(args: argparse.Namespace) -> None:
    small, large = read_runs(args.small, args.large)
    checked = read_runs(args.large_checks)[0] if args.large_checks else None
    both = sorted(set(small) & set(large) & (set(checked) if checked else set(small)))

    def pairs(smalls: dict, name: str) -> list[tuple[dict, dict]]:
        return [(smalls[i], large[i]) for i in both if small[i]["split"] == name]

    # (the small model's rows, the policy): its own check, or the large model's
    dev = pairs(small, "dev")
    routed = choose(dev, args.max_large, cascade=False)
    cascading = choose(dev, args.max_large, cascade=True)
    never = {"compares": False, "cascade": False}
    policies = {
        "always small": (small, {**never, "small_support": cascading["small_support"]}),
        "always large": (small, ALWAYS_LARGE),
        "oracle (the ceiling)": (
            small,
            {**never, "oracle": True, "small_support": cascading["small_support"]},
        ),
        "routed": (small, routed),
        "routed + cascade": (small, cascading),
    }
    if checked:  # the large model checks the small one's answers, at its own threshold
        policies["routed + cascade, large checks"] = (
            checked,
            choose(pairs(checked, "dev"), args.max_large, cascade=True, supports=(LARGE_SUPPORT,)),
        )
        policies["routed + cascade, large checks, min_check"] = (
            checked,
            choose(pairs(checked, "dev"), args.max_large, cascade=True, supports=(LARGE_SUPPORT,),
                   checks=CHECK_CUTS),
        )  # fmt: skip
        policies["small + cascade on the large check (min_check)"] = (
            checked,
            choose_check(pairs(checked, "dev"), args.max_large),
        )
        policies["small + cascade, large checks"] = (checked, {
            **never, "cascade": True, "small_support": LARGE_SUPPORT})  # fmt: skip
    if args.confidence:  # and the small answer's own confidence (its answer tokens' mean)
        sure = with_confidence(checked or small, read_runs(args.confidence)[0])
        known = sorted(r["confidence"] for (r, _) in pairs(sure, "dev") if "confidence" in r)
        cuts = [known[int(q * (len(known) - 1))] for q in (0.1, 0.2, 0.3, 0.4, 0.5)]
        label = "routed + cascade" + (", large checks" if checked else "") + ", confidence"
        policies[label] = (sure, choose(pairs(sure, "dev"), args.max_large, cascade=True,
                                        supports=(LARGE_SUPPORT,) if checked else None,
                                        confidences=cuts))  # fmt: skip
        print_separation(with_confidence(small, read_runs(args.confidence)[0]), checked)
        read = [r for r in sure.values() if "figures_disagree" in r]
        flagged = [r for r in read if r["figures_disagree"]]
        print(f"quote_figures: {len(flagged)} of the {len(read)} recorded replies state figures "
              f"none of their quote's; {sum(not right(r, 0.0) for r in flagged)} of those "
              "answers are wrong")  # fmt: skip
        if checked:  # the min_check example with route.quote_figures (the shipped one)
            shipped = policies["routed + cascade, large checks, min_check"][1]
            policies["routed + cascade, large checks, min_check, quote_figures"] = (
                sure,
                {**shipped, "quote_figures": True},
            )
            policies["small + cascade on a logistic model of every signal"] = (
                sure,
                choose_logistic(sure, pairs(sure, "dev"), small, args.max_large),
            )
    if args.resampled:  # and whether a sampled answer of the small model agrees with it
        sampled = read_runs(args.resampled)[0]
        base = with_sample(checked or small, sampled)
        print_agreement(base)
        label = "routed + cascade" + (", large checks, min_check" if checked else "")
        policies[label + ", disagreement"] = (base, choose(
            pairs(base, "dev"), args.max_large, cascade=True,
            supports=(LARGE_SUPPORT,) if checked else None,
            checks=CHECK_CUTS if checked else None, disagree=True))  # fmt: skip
        if checked:  # the shipped thresholds, and a cascade on disagreement too: no cap
            shipped = policies["routed + cascade, large checks, min_check"][1]
            policies["shipped thresholds + disagreement (over the cap)"] = (
                base,
                {**shipped, "disagree": True},
            )
        policies["small + cascade on disagreement" + (", large checks" if checked else "")] = (
            base, {"compares": False, "cascade": True, "disagree": True,
                   "small_support": LARGE_SUPPORT if checked else 0.0})  # fmt: skip
    if args.likelihood and checked:  # and the large model's likelihood of the small reply
        scored = with_likelihood(checked, read_runs(args.likelihood)[0])
        known = sorted(r["likely"] for (r, _) in pairs(scored, "dev") if "likely" in r)
        cuts = [known[int(q * (len(known) - 1))] for q in (0.1, 0.2, 0.3, 0.4, 0.5)]
        joined = sum("likely" in r for r in scored.values())
        print(f"likelihood: {joined} of the {len(scored)} answers joined; "
              f"cuts tried {[round(c, 2) for c in cuts]}")  # fmt: skip
        policies["routed + cascade, large checks, likelihood (min_likely)"] = (scored, choose(
            pairs(scored, "dev"), args.max_large, cascade=True, supports=(LARGE_SUPPORT,),
            likely=cuts))  # fmt: skip
        policies["routed + cascade, large checks, min_check and min_likely"] = (scored, choose(
            pairs(scored, "dev"), args.max_large, cascade=True, supports=(LARGE_SUPPORT,),
            checks=CHECK_CUTS, likely=cuts))  # fmt: skip
    print(f"dev {len(dev)} questions, test {len(pairs(small, 'test'))}; chosen on dev with the "
          f"large model on at most {args.max_large} of the generated questions:")  # fmt: skip
    for label, (_, policy) in policies.items():
        if label.startswith("routed"):
            print(f"  {label}: {policy}")
    for name in ("dev", "test"):
        print(f"\n{name}\n{TABLE_HEAD}")
        for label, (smalls, policy) in policies.items():
            print(table_row(label, evaluate(pairs(smalls, name), policy)))
    print("\ntest, the mean's difference to always large, 95 % paired bootstrap interval:")
    for label, (smalls, policy) in policies.items():
        if label not in ("always large", "oracle (the ceiling)"):
            low, high = paired_interval(pairs(smalls, "test"), policy)
            print(f"  {label}: {100 * low:+.1f} to {100 * high:+.1f} points")
    for label, (smalls, policy) in policies.items():
        if policy.get("cascade"):
            print(f"test, {label}: {what_cascades_did(pairs(smalls, 'test'), policy)}")


def apply(args: argparse.Namespace) -> None:
    """A policy fixed beforehand (the shipped example unless --policy) on every question of
    the runs (of ``args.split`` if given), against always-large and the oracle: for a held-out
    set that chose nothing. Each of ``args.runs``: "CHECKED,LARGE[,REPLIES]", the small
    model's run with --checker (the large), the large model's, and the small model's run with
    --logprobs (its raw replies, for quote_figures; CHECKED itself if it was made with it)."""
    pairs = []
    for run in args.runs:
        checked, large, *replies = read_runs(*run.split(","))
        if args.set:
            checked, large = rescored(checked, args.set), rescored(large, args.set)
        rows = with_confidence(checked, replies[0] if replies else checked)
        pairs += [(rows[i], large[i]) for i in sorted(set(rows) & set(large))
                  if args.split in (None, rows[i]["split"])]  # fmt: skip
    policy = {**SHIPPED, **args.policy}
    if args.sweep:
        sweep(pairs, policy, args.max_large, args.cap_over)
        return
    oracle = {"compares": False, "cascade": False, "oracle": True, "small_support": LARGE_SUPPORT}
    print(f"{len(pairs)} questions; the policy: {policy}\n{TABLE_HEAD}")
    for label, chosen in (("always large", ALWAYS_LARGE), ("oracle (the ceiling)", oracle),
                          ("the policy", policy)):  # fmt: skip
        measured = evaluate(pairs, chosen)  # the last: the policy's
        print(table_row(label, measured))
    print(
        f"the policy's large model: {measured['large_share']:.2f} of the generated answers, "
        f"{measured['large_of_all']:.2f} of all questions (the gate answers some without one)"
    )
    low, high = paired_interval(pairs, policy)
    print(f"the policy's mean minus always large's, 95 % paired bootstrap interval: "
          f"{100 * low:+.1f} to {100 * high:+.1f} points")  # fmt: skip
    print(what_cascades_did(pairs, policy))
    count, value = not_found_separation(pairs)
    if not math.isnan(value):  # both kinds present
        print(f"the small model's own \"not found\" over passages past the gate: {count}; "
              f"the judge's best score ranks those a cascade turns right first, AUROC "
              f"{value:.3f}")  # fmt: skip


# apply --sweep: the policy (the shipped example, with --policy's changes) with these keys
# changed, every combination ("fr": the French answers' own min_check, min_check_by_language)
SWEEP = {"max_passages": (None, 2, 3, 4), "max_words": (None, 12, 16, 20),
         "min_check": (None, 0.7, 0.75, 0.8, 0.85, 0.9), "min_top_score": (None, 0.0, 2.0, 4.0),
         "not_found_min_score": (None, 3.0), "fr": (None, 0.8, 0.85, 0.9)}  # fmt: skip


def sweep(
    pairs: list[tuple[dict, dict]], base: dict, max_large: float, over: str = "generated"
) -> None:
    """``base`` changed as SWEEP says: every policy with the large model on at most
    ``max_large`` of the generated answers (``over`` "all": of all questions, the gate's "not
    found" too), against always-large on the same ``pairs``: the
    five with the best mean, and the five whose worse language trails least. Chosen and read
    on the same questions, so what these settings can reach at best there (a ceiling), not a
    held-out figure."""
    large = evaluate(pairs, ALWAYS_LARGE)["accuracy"]
    found = []
    for values in itertools.product(*SWEEP.values()):
        changes = dict(zip(SWEEP, values, strict=True))
        french = changes.pop("fr")
        policy = {**base, **changes,
                  **({"min_check_by_language": {"fr": french}} if french else {})}  # fmt: skip
        measured = evaluate(pairs, policy)
        share = measured["large_of_all" if over == "all" else "large_share"]
        if share <= max_large:
            gaps = {k: measured["accuracy"][k] - large[k] for k in large}
            found.append((statistics.fmean(gaps.values()), min(gaps.values()), gaps,
                          share, {**changes, "fr": french}))  # fmt: skip
    print(
        f"{len(pairs)} questions; always large {large}; {len(found)} of "
        f"{math.prod(map(len, SWEEP.values()))} policies within the cap of {max_large} "
        f"(of the {'questions' if over == 'all' else 'generated answers'})"
    )
    for title, key in (("best mean", 0), ("best worse language", 1)):
        print(f"\n{title}: mean gap | worse language's | per language | large share | changes")
        for row in sorted(found, key=lambda f: (-f[key], -f[1 - key], f[3]))[:5]:
            gaps = ", ".join(f"{k} {100 * v:+.1f}" for k, v in row[2].items())
            print(f"{100 * row[0]:+.1f} | {100 * row[1]:+.1f} | {gaps} | {row[3]:.2f} | {row[4]}")


def run_files(spec: str) -> str:
    """An ``apply`` run, "CHECKED,LARGE[,REPLIES]": two or three files that exist."""
    paths = spec.split(",")
    if len(paths) not in (2, 3):
        raise argparse.ArgumentTypeError(
            f"{spec!r}: give CHECKED,LARGE or CHECKED,LARGE,REPLIES (comma-separated files)"
        )
    missing = [path for path in paths if not Path(path).is_file()]
    if missing:
        raise argparse.ArgumentTypeError(f"no such run file: {', '.join(missing)}")
    return spec


def policy_changes(text: str) -> dict:
    """``apply --policy``: a JSON object of the policy's keys (SHIPPED's, GRID's, ...)."""
    try:
        changes = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc}): {text!r}") from exc
    if not isinstance(changes, dict):
        raise argparse.ArgumentTypeError(
            f'give a JSON object such as {{"min_check": 0.8}}: {text!r}'
        )
    return changes


def at_least_one(text: str) -> int:
    """A count of 1 or more (``timing --questions``, ``collect --concurrency``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"give a whole number of 1 or more: {text!r}")
    return value


def route_config(text: str):
    """``timing --route``: a JSON object of RouteConfig's keys, checked before any engine starts."""
    from pydantic import ValidationError

    from serve.query.routing import RouteConfig

    try:
        return RouteConfig(**policy_changes(text))
    except ValidationError as exc:
        reasons = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise argparse.ArgumentTypeError(f"not a route ({reasons}): {text!r}") from exc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("collect")
    run.add_argument("--model", required=True)
    run.add_argument("--checker", help="the large model, to check the model's answers")
    run.add_argument("--out", required=True)
    run.add_argument("--temperature", type=float, help="the model's answers sampled at it")
    run.add_argument("--config", default=str(ROOT / "configs/cpu.yaml"))
    run.add_argument("--languages", default="en,fr")
    run.add_argument("--set", default="human",
                     help="the questions: benchmarks/eval/<set>-<language>.jsonl")  # fmt: skip
    run.add_argument("--concurrency", type=at_least_one, default=4)
    run.add_argument("--logprobs", action="store_true",
                     help="keep the small model's answer tokens' log-probabilities")  # fmt: skip
    run.add_argument("--dev-every", type=int, default=2,
                     help="take every n-th development question (0: all)")  # fmt: skip
    read = commands.add_parser("report")
    read.add_argument("small")
    read.add_argument("large")
    read.add_argument("--large-checks", help="the small model's run with --checker (the large)")
    read.add_argument("--confidence", help="the small model's run with --logprobs")
    read.add_argument("--resampled", help="the small model's run with --temperature")
    read.add_argument("--likelihood", help="benchmarks.experiments.cross_likelihood --split all")
    read.add_argument(
        "--max-large",
        type=float,
        default=0.5,
        help="the most of the generated questions the large model may answer",
    )
    fixed = commands.add_parser("apply")
    fixed.add_argument(
        "runs", nargs="+", type=run_files, help="CHECKED,LARGE[,REPLIES] (see apply)"
    )
    fixed.add_argument("--split", help="only the questions of this split (dev or test)")
    fixed.add_argument(
        "--policy", type=policy_changes, default={}, help="changes to SHIPPED, as JSON"
    )
    fixed.add_argument("--set", help="score the answers again against this question set")
    fixed.add_argument(
        "--sweep", action="store_true", help="the policy changed as SWEEP says (in-sample ceiling)"
    )
    fixed.add_argument("--max-large", type=float, default=0.5, help="--sweep's cap")
    fixed.add_argument(
        "--cap-over",
        choices=("generated", "all"),
        default="generated",
        help="--sweep's cap: of the generated answers, or of all questions (the gate's too)",
    )
    timed = commands.add_parser("timing")
    timed.add_argument("--model", default="qwen2.5-0.5b")
    timed.add_argument("--large", default="qwen2.5-1.5b")
    timed.add_argument("--route", action="append", type=route_config,
                       help="RouteConfig as JSON; again for another routed policy")  # fmt: skip
    timed.add_argument("--small-support", type=float, default=None)
    timed.add_argument("--questions", type=at_least_one, default=24)
    timed.add_argument("--config", default=str(ROOT / "configs/cpu.yaml"))
    args = parser.parse_args()
    try:
        if args.command == "collect":
            asyncio.run(collect(args))
        elif args.command == "timing":
            asyncio.run(timing(args))
        elif args.command == "apply":
            apply(args)
        else:
            report(args)
    except InvalidRequestError as exc:  # a question set that is missing or malformed
        parser.error(str(exc))


if __name__ == "__main__":
    main()
