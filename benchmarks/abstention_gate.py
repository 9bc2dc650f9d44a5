"""Can the evidence gate alone tell answerable questions from unanswerable ones? For each
question of the Wikipedia sets, the best cosine similarity among the hybrid candidates (what
the gate looks at), then, for a sweep of thresholds, the share of unanswerable questions the
gate would turn away (abstention accuracy from the gate alone) and the share of answerable
ones it would wrongly turn away (false abstentions). No generator.

    .venv/bin/python benchmarks/abstention_gate.py [--languages en,fr]

Needs the tenants built by benchmarks/retrieval_quality.py (benchmarks/.cache/eval).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.build_eval import HERE  # noqa: E402
from index.service import IndexService  # noqa: E402
from serve.config import load_config  # noqa: E402
from serve.eval.run import load_questions  # noqa: E402
from serve.query.retrieval import SearchParams, search_shard  # noqa: E402

CACHE = ROOT / "benchmarks" / ".cache" / "eval"
THRESHOLDS = (0.35, 0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70)


def best_cosines(service: IndexService, language: str, config) -> tuple[list, list]:
    """Best candidate cosine per answerable and per unanswerable question."""
    shard = service.shard(f"wiki-{language}")
    params = SearchParams(mode=config.query.mode, fusion=config.query.fusion,
                          dense_weight=config.query.dense_weight)  # fmt: skip
    answerable, unanswerable = [], []
    for question in load_questions(HERE / f"wiki-{language}.jsonl"):
        hits = search_shard(shard, service.embedder, question.question,
                            config.query.candidates, params)  # fmt: skip
        best = max((h.dense_score for h, _ in hits if h.dense_score is not None), default=0.0)
        (answerable if question.answerable else unanswerable).append(best)
    return answerable, unanswerable


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--languages", default="en,fr")
    args = parser.parse_args()
    config = load_config(Path(args.config), data_dir=CACHE / "data")
    service = IndexService(config.index, config.data_dir)
    for language in args.languages.split(","):
        answerable, unanswerable = best_cosines(service, language, config)
        print(f"\n{language}: {len(answerable)} answerable, {len(unanswerable)} unanswerable "
              f"questions; best candidate cosine per question\n")  # fmt: skip
        print("| gate threshold | unanswerable turned away | answerable turned away |")
        print("|---|---|---|")
        for threshold in THRESHOLDS:
            turned = sum(s < threshold for s in unanswerable) / len(unanswerable)
            false = sum(s < threshold for s in answerable) / len(answerable)
            print(f"| {threshold:.2f} | {turned:.2f} | {false:.2f} |")


if __name__ == "__main__":
    main()
