"""Can the default model judge its own answers? For chosen questions of the English answer
sample, the answer recorded in benchmarks/eval/answers-en.report.md is shown to the model
with the same sources, and the model's P(yes) (first-token yes/no log-probabilities, as in the
generator reranker) is printed for:
  judge: "Do the sources state this answer to the question?" (a fresh conversation);
  self:  the answering conversation, followed by "Is your answer stated in the sources?".
A verifier that turns "no" into "not found in the sources" needs right answers to score well
above wrong ones.

    .venv/bin/python -m benchmarks.experiments.answer_judge --ids en-0004,en-0301 \
        [--variants judge,self]

Needs the wiki-en tenant built by benchmarks/retrieval_quality.py and the fetched default model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from benchmarks.build_eval import HERE
from index.service import IndexService
from serve.config import load_config
from serve.engine.generator import VllmGenerator
from serve.engine.models import resolve_model
from serve.query.gate import not_found_message
from serve.query.pipeline import QueryPipeline
from serve.query.prompt import PromptBuilder
from serve.query.rerankers import GeneratorReranker
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parents[2]

CACHE = ROOT / "benchmarks" / ".cache" / "eval"
JUDGE_SYSTEM = "You check answers against sources. Reply with one word: yes or no."
JUDGE_USER = ("Sources:\n{sources}\n\nQuestion: {question}\nProposed answer: {answer}\n\n"
              "Do the sources state this answer to the question? Reply yes or no.")  # fmt: skip
SELF_CHECK = ("Check your answer against the sources above. Is your answer stated in the "
              "sources? Reply with one word: yes or no.")  # fmt: skip


def recorded_answers() -> dict[str, list[str]]:
    """Per question id, the report's row: id, question, recall@5, mrr, abstained, matched,
    support, answer (answers are cut at 120 characters in the report)."""
    rows = {}
    for line in (HERE / "answers-en.report.md").read_text().splitlines():
        if line.startswith("| en-"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            rows[cells[0]] = cells
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ids", required=True, help="comma-separated question ids")
    parser.add_argument("--variants", default="judge")
    args = parser.parse_args()
    config = load_config(ROOT / "configs" / "cpu.yaml", data_dir=CACHE / "data")
    service = IndexService(config.index, config.data_dir)
    model = resolve_model(config.generator.model, config.data_dir)
    generator = VllmGenerator(config.generator.model_copy(update={"model": model})).start()
    try:
        yes, no = GeneratorReranker(generator).choices()
        pipeline = QueryPipeline(LocalSearcher(service), generator, config.query)
        builder = PromptBuilder(generator.special_tokens)
        questions = {}
        for line in (HERE / "answers-en.jsonl").read_text().splitlines():
            questions[json.loads(line)["id"]] = json.loads(line)
        rows = recorded_answers()
        print("| id | kind | matched | variant | P(yes) | answer |\n|---|---|---|---|---|---|")
        for qid in args.ids.split(","):
            question, answer = questions[qid]["question"], rows[qid][-1]
            prepared = await pipeline.prepare("wiki-en", question)
            sources = list(prepared.sources)
            conversations = {
                "judge": [
                    {"role": "system", "content": JUDGE_SYSTEM},
                    {"role": "user", "content": JUDGE_USER.format(
                        sources="\n\n".join(builder.source_block(s) for s in sources),
                        question=question, answer=answer)},
                ],
                "self": [*builder.messages(sources, [], question, not_found_message(question)),
                         {"role": "assistant", "content": answer},
                         {"role": "user", "content": SELF_CHECK}],
            }  # fmt: skip
            for variant in args.variants.split(","):
                started = time.perf_counter()
                logprobs = await generator.next_token_logprobs(
                    generator.render(conversations[variant]),
                    allowed_token_ids=sorted(yes | no), cache_salt=prepared.cache_salt,
                )  # fmt: skip
                p_yes = sum(math.exp(lp) for t, lp in logprobs.items() if t in yes)
                p_no = sum(math.exp(lp) for t, lp in logprobs.items() if t in no)
                print(f"| {qid} | {questions[qid]['kind']} | {rows[qid][5]} | {variant} | "
                      f"{p_yes / (p_yes + p_no):.3f} | {answer[:60]} |", flush=True)  # fmt: skip
                print(f"  {time.perf_counter() - started:.0f} s", file=sys.stderr)
    finally:
        generator.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
