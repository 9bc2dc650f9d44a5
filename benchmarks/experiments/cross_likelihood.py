"""Does the large model's likelihood of the small model's reply tell the small model's right
answers from its wrong ones better than the large model's check (issue 39's cascade)? Where
the large model would have answered otherwise, the small model's reply is unlikely under it.
It costs one prefill of the large model (its own prompt and the reply), as the check does.

The small model (qwen2.5-0.5b) answers the answerable questions of one half of the
human-written sets (as benchmarks.experiments.check_variants does); for each reply it records:

- ``cited``: the shipped check's P(yes) by the large model (the baseline);
- ``large``: the mean log-probability of the reply's tokens under the large model, after the
  large model's own answer prompt for the same evidence;
- ``small``: the same under the small model (its own confidence, teacher-forced);
- ``ratio``: ``large - small`` (where the large model is less sure of the reply than its writer);
- ``large_min``: the least likely token of the reply under the large model;
- ``cited_min``: the log-odds of ``cited`` plus ``large_min`` (both lower where the reply is
  wrong; fixed after the dev run, before the test run).

    .venv/bin/python -m benchmarks.experiments.cross_likelihood [--split dev] [--every 2]

It prints each signal's AUROC (right answers ranked above wrong ones) per language and overall,
and writes the rows to benchmarks/eval/routing/cross-likelihood-<split>.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from benchmarks.routing import (
    ROOT,
    SETS,
    TENANTS,
    answer_all,
    log_odds,
    small_reply,
    two_models,
)
from serve.eval.metrics import answer_matches
from serve.eval.run import load_questions

SIGNALS = ("cited", "large", "small", "ratio", "large_min", "cited_min")


async def reply_logprobs(engine, prompt: list[int], reply: list[int]) -> list[float]:
    """The log-probability of each token of ``reply`` after ``prompt`` (one prefill)."""
    from vllm import SamplingParams
    from vllm.inputs.engine import tokens_input

    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
    final = None
    request = uuid.uuid4().hex
    async for output in engine._engine.generate(tokens_input(prompt + reply), params, request):
        final = output
    steps = final.prompt_logprobs[len(prompt) :]
    return [step[token].logprob for token, step in zip(reply, steps, strict=True)]


async def main(args: argparse.Namespace) -> None:
    engines, service, pipeline, check = two_models()
    every = args.split == "all"  # every question the routing benchmark asks, for its report
    todo = [(language, q) for language in ("en", "fr") for q in load_questions(SETS[language])
            if (q.answerable or every) and args.split in (q.split, "all")
            and (q.split == "test" or int(q.id.rsplit("-", 1)[1]) % args.every == 0)
            ][: args.limit]  # fmt: skip
    print(f"{len(todo)} {args.split} questions", flush=True)
    out = ROOT / f"benchmarks/eval/routing/cross-likelihood-{args.split}.jsonl"
    out.unlink(missing_ok=True)
    slots = asyncio.Semaphore(4)

    async def one(language, q):
        async with slots:
            reply = await small_reply(pipeline, TENANTS[language], q.question)
            if reply is None:
                return
            prepared, text, pending, own = reply
            tokens = engines["small"].encode(text)
            large = await reply_logprobs(engines["large"], own.token_ids, tokens)
            small = await reply_logprobs(engines["small"], prepared.token_ids, tokens)
            row = {
                "id": q.id, "language": language, "answer": pending[0], "split": q.split,
                "answerable": q.answerable,
                "right": answer_matches(pending[0], q.answer_contains),
                "cited": await check.support(check.prompt(prepared.query, *pending),
                                             prepared.cache_salt),
                "large": sum(large) / len(large), "small": sum(small) / len(small),
                "large_min": min(large),
            }  # fmt: skip
            row["ratio"] = row["large"] - row["small"]
            row["cited_min"] = log_odds(row["cited"]) + row["large_min"]
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")

    await answer_all(one, todo, engines, service, out, SIGNALS)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--split",
        choices=("dev", "test", "all"),
        default="dev",
        help="all: both halves, unanswerable questions too (for routing report)",
    )
    parser.add_argument("--every", type=int, default=2, help="every n-th dev question")
    parser.add_argument("--limit", type=int, default=None)
    asyncio.run(main(parser.parse_args()))
