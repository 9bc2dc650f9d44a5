"""Why an evaluation run answered "not found" to answerable questions: for each one, where its
answering document ranks among the candidates with the gates off, that document's cosine
similarity (none: found by lexical search only) and judge score, against the judge gate's
threshold. Where a judge gate applies these are the scores it reads (each pair judged alone);
elsewhere the similarity gate decides.

    .venv/bin/grounded --config configs/cpu.yaml --data-dir benchmarks/.cache/eval/data eval \
        --tenant wiki-fr benchmarks/eval/human-fr.jsonl --split test --json > run.json
    .venv/bin/python -m benchmarks.false_abstentions run.json benchmarks/eval/human-fr.jsonl \
        --tenant wiki-fr

Reads the evaluation tenants (benchmarks/.cache/eval/data); no generator.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from index.service import IndexService
from serve.config import load_config
from serve.eval.run import load_questions
from serve.query.judging import judge_threshold
from serve.query.language import detect_language
from serve.query.pipeline import QueryOptions, QueryPipeline
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parent.parent


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run", type=Path, help="`grounded eval --json` output")
    parser.add_argument("questions", type=Path, help="the question set it ran")
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    args = parser.parse_args()
    data_dir = ROOT / "benchmarks" / ".cache" / "eval" / "data"
    config = load_config(Path(args.config), data_dir=data_dir)  # the judge: data_dir's models
    try:
        results = json.loads(args.run.read_text())["questions"]
        questions = {q.id: q for q in load_questions(args.questions)}
        missed = [questions[r["id"]] for r in results if r["answerable"] and r["abstained"]]
    except (OSError, ValueError, KeyError) as exc:
        sys.exit(f"{args.run} must be `grounded eval --json` output of {args.questions}: {exc!r}")
    service = IndexService(config.index, config.data_dir).start()
    pipeline = QueryPipeline(LocalSearcher(service), None, config.query)
    rerank = config.query.rerank
    print(f"{args.run.name}: {len(missed)} answerable questions answered 'not found'\n")
    print(f"Where no judge gate applies, the similarity gate: cosine >= "
          f"{config.query.min_dense_score}.\n")  # fmt: skip
    print("| question | answering document: rank, cosine, judge score (gates off) | judge gate |")
    print("|---|---|---|")
    for q in missed:
        off = await pipeline.retrieve(
            args.tenant, q.question, QueryOptions(top_k=rerank.candidates, gate=False)
        )
        cosine = lambda h: "none" if h.dense_score is None else f"{h.dense_score:.2f}"  # noqa: E731
        own = [f"{i + 1}, {cosine(h)}, {h.rerank_score:.2f}" for i, h in enumerate(off)
               if h.file_name in q.relevant or h.doc_id in q.relevant]  # fmt: skip
        print(f"| {q.id} | {'; '.join(own[:2]) or 'not among the candidates'} | "
              f"{judge_threshold(rerank, detect_language(q.question))} |")  # fmt: skip
    service.close()


if __name__ == "__main__":
    asyncio.run(main())
