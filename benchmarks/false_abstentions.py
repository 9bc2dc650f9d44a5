"""Why an evaluation run answered "not found" to answerable questions: for each one, where its
answering document ranks among the candidates with the gates off, that document's cosine
similarity (none: found by lexical search only, so the similarity gate drops it) and judge
score; and its judge score as the query path computes it (on the candidates that passed the
similarity gate, judged in one batch), against the judge gate's threshold.

    .venv/bin/grounded --config configs/cpu.yaml --data-dir benchmarks/.cache/eval/data eval \
        --tenant wiki-fr benchmarks/eval/human-fr.jsonl --split test --json > run.json
    .venv/bin/python benchmarks/false_abstentions.py run.json benchmarks/eval/human-fr.jsonl \
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
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from index.service import IndexService  # noqa: E402
from serve.config import load_config  # noqa: E402
from serve.eval.run import load_questions  # noqa: E402
from serve.query.language import detect_language  # noqa: E402
from serve.query.pipeline import QueryOptions, QueryPipeline  # noqa: E402
from serve.query.rerank import judge_threshold  # noqa: E402
from serve.query.retrieval import LocalSearcher  # noqa: E402


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
    rerank, judge = config.query.rerank, pipeline.reranker
    print(f"{args.run.name}: {len(missed)} answerable questions answered 'not found'\n")
    print(f"Similarity gate: cosine >= {config.query.min_dense_score} (a candidate without one "
          "is dropped unless min_bm25_score lets it through).\n")  # fmt: skip
    print("| question | answering document: rank, cosine, judge score (gates off) | judge score "
          "in the query path | judge gate |")  # fmt: skip
    print("|---|---|---|---|")
    for q in missed:

        def own(hits, q=q):
            return [i for i, h in enumerate(hits) if h.file_name in q.relevant
                    or h.doc_id in q.relevant]  # fmt: skip

        top = rerank.candidates
        off = await pipeline.retrieve(args.tenant, q.question, QueryOptions(top_k=top, gate=False))
        cosine = lambda h: "none" if h.dense_score is None else f"{h.dense_score:.2f}"  # noqa: E731
        ungated = [f"{i + 1}, {cosine(off[i])}, {off[i].rerank_score:.2f}" for i in own(off)]
        # What the query path judges: the similarity gate's survivors, in one batch.
        gated = await pipeline.retrieve(
            args.tenant, q.question, QueryOptions(top_k=top, gate=True, rerank=False)
        )
        scores = await judge.scores(q.question, [h.text for h in gated], "") if gated else []
        seen = [f"{scores[i]:.2f}" for i in own(gated)]
        print(f"| {q.id} | {'; '.join(ungated[:2]) or 'not among the candidates'} | "
              f"{'; '.join(seen[:2]) or 'dropped by the similarity gate'} | "
              f"{judge_threshold(rerank, detect_language(q.question))} |")  # fmt: skip
    service.close()


if __name__ == "__main__":
    asyncio.run(main())
