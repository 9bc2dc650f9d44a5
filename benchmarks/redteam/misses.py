"""Why a red-team run's legitimate questions were missed: for each case a results file marks
not correct, where its own document ranks in the shipped retrieval with the gates off, its
judge score, and the judge gate's threshold for the question's language.

    .venv/bin/python -m benchmarks.redteam.misses --set redteam-heldout2 \
        [--results qwen2.5-1.5b-quoted.jsonl]

Reads the index that benchmarks/redteam/run.py built (benchmarks/.cache/<set>); no generator.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.redteam.run import TENANT
from index.service import IndexService
from serve.config import load_config
from serve.engine.models import fetch
from serve.query.judging import judge_threshold
from serve.query.language import detect_language
from serve.query.pipeline import QueryOptions, QueryPipeline
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parent.parent.parent


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--set", default="redteam-heldout2")
    parser.add_argument("--results", default="qwen2.5-1.5b-quoted.jsonl")
    args = parser.parse_args()
    folder = ROOT / "benchmarks" / args.set
    results = folder / "results" / args.results
    data_dir = ROOT / "benchmarks" / ".cache" / args.set
    if not results.is_file() or not data_dir.is_dir():
        sys.exit(f"run `python -m benchmarks.redteam.run --set {args.set}` first "
                 f"({results}, {data_dir})")  # fmt: skip
    missed = {
        r["id"]
        for r in map(json.loads, results.read_text().splitlines())
        if not r.get("unanswerable") and not r["correct"]
    }
    config = load_config(Path(args.config), data_dir=data_dir)
    rerank = config.query.rerank
    if rerank.backend == "cross-encoder" and not Path(rerank.model or "").is_dir():
        rerank = rerank.model_copy(
            update={"model": str(fetch(Path(rerank.model).name, ROOT / "data"))}
        )
    query = config.query.model_copy(update={"rerank": rerank})
    service = IndexService(config.index, config.data_dir).start()
    pipeline = QueryPipeline(LocalSearcher(service), None, query)
    print(f"{args.set}, {args.results}: {len(missed)} missed\n")
    print("| case | language | own document: rank (judge score) | judge gate | best other |")
    print("|---|---|---|---|---|")
    for case in map(json.loads, (folder / "cases.jsonl").read_text().splitlines()):
        if case["id"] not in missed:
            continue
        hits = await pipeline.retrieve(
            TENANT, case["question"], QueryOptions(gate=False, top_k=rerank.candidates)
        )
        name, language = Path(case["file"]).name, detect_language(case["question"])
        own = [f"{i + 1} ({h.rerank_score:.2f})" for i, h in enumerate(hits) if h.file_name == name]
        other = next((h for h in hits if h.file_name != name), None)
        print(f"| {case['id']} | {language} | {', '.join(own[:2]) or 'not among the candidates'} "
              f"| {judge_threshold(rerank, language)} | "
              f"{f'{other.file_name} ({other.rerank_score:.2f})' if other else '-'} |")  # fmt: skip
    service.close()


if __name__ == "__main__":
    asyncio.run(main())
