"""Can a gate before the generator tell answerable questions from unanswerable ones? Two
signals per question of the Wikipedia sets, no generator:
  cosine:   the best cosine similarity among the hybrid candidates (what the evidence gate
            looks at);
  coverage: the IDF-weighted share of the question's words found in the best of the top 5
            sources (IDF over the ingested articles).
For a sweep of thresholds: the share of unanswerable questions turned away, and the share of
answerable ones wrongly turned away, overall and for description questions (the same kind of
question as the unanswerable ones; sentence questions are verbatim article text).

    .venv/bin/python -m benchmarks.experiments.abstention_gate [--languages en,fr]

Needs the tenants built by benchmarks/retrieval_quality.py (benchmarks/.cache/eval).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.build_eval import HERE
from index.service import IndexService
from serve.config import load_config
from serve.query.retrieval import SearchParams, search_shard

ROOT = Path(__file__).resolve().parents[2]

CACHE = ROOT / "benchmarks" / ".cache" / "eval"
THRESHOLDS = {
    "cosine": (0.35, 0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70),
    "coverage": (0.30, 0.40, 0.45, 0.50, 0.55, 0.60),
}
_WORD = re.compile(r"\w+")


def words(text: str) -> set[str]:
    return {word.casefold() for word in _WORD.findall(text)}


def signals(service: IndexService, language: str, config) -> list[tuple[str, float, float]]:
    """(kind, best cosine, coverage) per question."""
    articles = [words(p.read_text()) for p in (CACHE / f"corpus-{language}").glob("*.md")]
    frequency = Counter(word for article in articles for word in article)

    def idf(word: str) -> float:
        return math.log((len(articles) + 1) / (frequency.get(word, 0) + 0.5))

    shard = service.shard(f"wiki-{language}")
    params = SearchParams(mode=config.query.mode, fusion=config.query.fusion,
                          dense_weight=config.query.dense_weight)  # fmt: skip
    rows = []
    for line in (HERE / f"wiki-{language}.jsonl").read_text().splitlines():
        question = json.loads(line)
        hits = search_shard(shard, service.embedder, question["question"],
                            config.query.candidates, params)  # fmt: skip
        cosine = max((h.dense_score for h, _ in hits if h.dense_score is not None), default=0.0)
        terms = words(question["question"])
        total = sum(idf(t) for t in terms)
        coverage = max(
            (sum(idf(t) for t in terms if t in words(h.text)) / total for h, _ in hits[:5]),
            default=0.0,
        )
        rows.append((question["kind"], cosine, coverage))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--languages", default="en,fr")
    args = parser.parse_args()
    config = load_config(Path(args.config), data_dir=CACHE / "data")
    service = IndexService(config.index, config.data_dir)
    for language in args.languages.split(","):
        rows = signals(service, language, config)
        kinds = Counter(kind for kind, _, _ in rows)
        for index, signal in enumerate(("cosine", "coverage"), start=1):
            print(f"\n{language}, {signal}: {dict(kinds)}\n")
            print("| threshold | unanswerable turned away | answerable turned away | "
                  "description questions turned away |\n|---|---|---|---|")  # fmt: skip
            for threshold in THRESHOLDS[signal]:
                share = {}
                for name, keep in (("unanswerable", {"unanswerable"}),
                                   ("answerable", {"description", "sentence"}),
                                   ("description", {"description"})):  # fmt: skip
                    values = [row[index] for row in rows if row[0] in keep]
                    share[name] = sum(v < threshold for v in values) / len(values)
                print(f"| {threshold:.2f} | {share['unanswerable']:.2f} | "
                      f"{share['answerable']:.2f} | {share['description']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
