"""What the relevance judge made of a red-team case's candidates, with the gate off: the five
best, their judge scores and whether each is from the case's own document. For the cases a run
turned away before the generator (`top_judge` null in its results), to see whether the judge
or retrieval did it. Reads the data dir benchmarks/redteam/run.py ingested the set into.

    .venv/bin/python -m benchmarks.redteam.candidates --set redteam-heldout2 h2-08 h2-27
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from benchmarks.redteam.run import TENANT, set_config
from benchmarks.redteam.sets import SETS
from index.service import IndexService
from serve.query.judging import judge_threshold
from serve.query.pipeline import QueryOptions, QueryPipeline
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parents[2]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--set", required=True, choices=SETS)
    parser.add_argument("ids", nargs="+", help="case ids")
    args = parser.parse_args()
    data_dir = ROOT / "benchmarks" / ".cache" / args.set
    if not (data_dir / "tenants" / TENANT).is_dir():
        parser.error(f"{data_dir}: run `python -m benchmarks.redteam.run --set {args.set}` first")
    config = set_config(Path(args.config), args.set)
    rerank = config.query.rerank
    if rerank.backend != "cross-encoder":
        parser.error(f"{args.config}: query.rerank.backend is {rerank.backend!r}; this lists "
                     "the cross-encoder judge's scores")  # fmt: skip
    lines = (ROOT / "benchmarks" / args.set / "cases.jsonl").read_text().splitlines()
    cases = {c["id"]: c for c in map(json.loads, lines)}
    unknown = [i for i in args.ids if i not in cases]
    if unknown:
        parser.error(f"no such case in {args.set}: {', '.join(unknown)}")
    service = IndexService(config.index, data_dir).start()
    try:
        pipeline = QueryPipeline(LocalSearcher(service), None, config.query)
        for case_id in args.ids:
            case = cases[case_id]
            own = Path(case["file"]).name
            gate = judge_threshold(rerank, case["language"])
            print(f"{case_id} ({case['language']} question, {case.get('doc_language', '?')} "
                  f"document, gate {gate}): {case['question']}")  # fmt: skip
            hits = await pipeline.retrieve(TENANT, case["question"], QueryOptions(gate=False))
            for hit in hits[:5]:
                mark = "own" if hit.file_name == own else "   "
                print(f"  {mark} {hit.rerank_score:7.2f}  {hit.file_name}")
    finally:
        service.close()


if __name__ == "__main__":
    asyncio.run(main())
