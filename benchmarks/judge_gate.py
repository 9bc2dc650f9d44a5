"""Abstaining on judged relevance: for the human-written questions (answerable and not), the
best judge score among the retrieved candidates, against the best dense (cosine) score that the
current evidence gate uses. A threshold is chosen on the dev half (the most unanswerable
questions turned away while at most --max-false of the answerable ones are) and reported on
the held-out (test) half, per language.

    .venv/bin/python -m benchmarks.judge_gate [--languages en,fr] [--max-false 0.10]
        [--embedder e5]   # the tenants embedder_retrieval.py builds with multilingual-e5-small

Uses the tenants that human_retrieval.py / retrieval_quality.py build (benchmarks/.cache/eval).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.build_eval import HERE
from benchmarks.retrieval_quality import CACHE, build_tenant
from index.service import IndexService
from serve.config import load_config
from serve.engine.models import fetch
from serve.eval.run import load_questions
from serve.query.judging import RerankConfig
from serve.query.pipeline import QueryOptions, QueryPipeline
from serve.query.rerankers import OnnxCrossEncoderReranker
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parent.parent


def choose(scores: list[tuple[float, bool]], max_false: float) -> float:
    """The threshold turning away the most unanswerable questions while at most ``max_false``
    of the answerable ones fall below it (score < threshold means abstain)."""
    best, best_caught = min(s for s, _ in scores), -1.0
    for threshold in sorted({s for s, _ in scores} | {max(s for s, _ in scores) + 1e-6}):
        caught, lost = rates(scores, threshold)
        if lost <= max_false and caught > best_caught:
            best, best_caught = threshold, caught
    return best


def rates(scores: list[tuple[float, bool]], threshold: float) -> tuple[float, float]:
    """(share of unanswerable turned away, share of answerable turned away)."""
    unanswerable = [s for s, answerable in scores if not answerable]
    answerable = [s for s, ok in scores if ok]
    return (sum(s < threshold for s in unanswerable) / len(unanswerable),
            sum(s < threshold for s in answerable) / len(answerable))  # fmt: skip


def both_gates(questions, judge_min: float, dense_min: float) -> list[tuple[float, bool]]:
    """Both gates as the query path applies them: candidates under ``dense_min`` are dropped,
    then those the judge scores under ``judge_min``; 0.0 (turned away) when none is left."""
    return [(float(any(d >= dense_min and j >= judge_min for d, j in kept)), answerable)
            for kept, answerable in questions]  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--languages", default="en,fr")
    parser.add_argument("--max-false", type=float, default=0.10)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=256, help="judge truncation")
    parser.add_argument(
        "--set", default="human", choices=("human", "wiki"),
        help="human-written questions, or the generated description questions and their "
        "unanswerable twins (benchmarks/eval/wiki-<lang>.jsonl)",
    )  # fmt: skip
    parser.add_argument(
        "--thresholds", default=None,
        help="also report fixed judge thresholds chosen elsewhere, e.g. en=4.122,fr=2.661",
    )  # fmt: skip
    parser.add_argument(
        "--embedder",
        choices=("minilm", "e5"),
        default="minilm",
        help="e5: the wiki-<lang>-e5 tenants of embedder_retrieval.py",
    )
    args = parser.parse_args()
    fixed = dict(item.split("=") for item in args.thresholds.split(",")) if args.thresholds else {}
    config = load_config(Path(args.config), data_dir=CACHE / "data")
    suffix = "" if args.embedder == "minilm" else f"-{args.embedder}"
    if suffix:  # the e5 tenants, on the configs' multilingual embedder
        tenants = {f"wiki-{lang}{suffix}": "multilingual" for lang in args.languages.split(",")}
        e5 = config.index.embedders["multilingual"].model_copy(
            update={"model": str(fetch("multilingual-e5-small", ROOT / "data"))}
        )
        index = config.index.model_copy(
            update={"embedders": {"multilingual": e5}, "tenant_embedders": tenants}
        )
        config = config.model_copy(update={"index": index})
    service = IndexService(config.index, config.data_dir).start()
    # the query path's judge, pair by pair (serve.query.rerank.OnnxCrossEncoderReranker)
    judge = OnnxCrossEncoderReranker(str(fetch("ms-marco-minilm-l12", ROOT / "data")), "cpu",
                                     max_tokens=args.max_tokens).start()  # fmt: skip
    # The candidates as retrieved (the judge scores them all below, so their order is moot).
    query = config.query.model_copy(update={"rerank": RerankConfig()})
    pipeline = QueryPipeline(LocalSearcher(service), None, query)
    print(
        "| language | signal | threshold (dev) | dev: unanswerable turned away | dev: answerable "
        "turned away | test: unanswerable turned away | test: answerable turned away |"
    )
    print("|---|---|---|---|---|---|---|")
    for language in args.languages.split(","):
        if not suffix:
            build_tenant(service, language)
        path = HERE / f"{args.set}-{language}.jsonl"
        kinds = {item["id"]: item["kind"]
                 for item in map(json.loads, path.read_text().splitlines())}  # fmt: skip
        questions = load_questions(path)
        if args.set == "wiki":  # description questions and unanswerable ones: the same kind
            questions = [q for q in questions if not q.relevant or kinds[q.id] == "description"]
        signals: dict[str, dict[str, list[tuple[float, bool]]]] = {}
        pairs: dict[str, list[tuple[list[tuple[float, float]], bool]]] = {}  # (dense, judge)
        seconds = []
        for q in questions:
            options = QueryOptions(top_k=args.candidates, gate=False)
            hits = await pipeline.retrieve(f"wiki-{language}{suffix}", q.question, options)
            started = time.perf_counter()
            judged = await judge.scores(q.question, [h.text for h in hits]) if hits else []
            seconds.append(time.perf_counter() - started)
            dense = max((h.dense_score for h in hits if h.dense_score is not None), default=-1.0)
            for name, value in (("judge", max(judged, default=-99.0)), ("dense", dense)):
                signals.setdefault(name, {}).setdefault(q.split, []).append((value, q.answerable))
            kept = [(h.dense_score if h.dense_score is not None else -1.0, score)
                    for h, score in zip(hits, judged, strict=True)]  # fmt: skip
            pairs.setdefault(q.split, []).append((kept, q.answerable))
        for name, halves in signals.items():
            threshold = choose(halves["dev"], args.max_false)
            dev, test = rates(halves["dev"], threshold), rates(halves["test"], threshold)
            print(f"| {language} | max {name} score | {threshold:.3f} | {dev[0]:.2f} | {dev[1]:.2f}"
                  f" | {test[0]:.2f} | {test[1]:.2f} |", flush=True)  # fmt: skip
        if language in fixed:
            given = signals["judge"]
            value = float(fixed[language])
            dev, test = rates(given["dev"], value), rates(given["test"], value)
            print(f"| {language} | max judge score, threshold given | {value:.3f} | {dev[0]:.2f} "
                  f"| {dev[1]:.2f} | {test[0]:.2f} | {test[1]:.2f} |")  # fmt: skip

            # Both gates, as the query path applies them: candidates under the dense threshold
            # are dropped, then the judge gate; a question is turned away when none is left.
            # The dense threshold is chosen on dev with the judge threshold given.
            # At most --max-false answerable lost on dev, or no more than the judge gate alone
            # loses there (-1.0: no dense gate).
            allowed = max(args.max_false, rates(given["dev"], value)[1])
            candidates = sorted({d for kept, _ in pairs["dev"] for d, _ in kept} | {-1.0})
            dense_min = max(
                (t for t in candidates
                 if rates(both_gates(pairs["dev"], value, t), 0.5)[1] <= allowed),
                key=lambda t, v=value: rates(both_gates(pairs["dev"], v, t), 0.5)[0],
            )  # fmt: skip
            dev, test = (
                rates(both_gates(pairs["dev"], value, dense_min), 0.5),
                rates(both_gates(pairs["test"], value, dense_min), 0.5),
            )
            print(f"| {language} | judge gate {value:.3f} + dense gate (dev) | {dense_min:.3f} | "
                  f"{dev[0]:.2f} | {dev[1]:.2f} | {test[0]:.2f} | {test[1]:.2f} |")  # fmt: skip
        current = config.query.min_dense_score
        dev, test = (
            rates(signals["dense"]["dev"], current),
            rates(signals["dense"]["test"], current),
        )
        print(f"| {language} | max dense score (shipped gate) | {current:.3f} | {dev[0]:.2f} | "
              f"{dev[1]:.2f} | {test[0]:.2f} | {test[1]:.2f} |")  # fmt: skip
        print(f"<!-- {language}: judge p50 {statistics.median(seconds):.2f} s for "
              f"{args.candidates} candidates -->", flush=True)  # fmt: skip
    service.close()


if __name__ == "__main__":
    asyncio.run(main())
