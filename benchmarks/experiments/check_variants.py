"""Which check of the small model's answer by the large one best tells its right answers from
its wrong ones (issue 39's cascade)? The small model (qwen2.5-0.5b) answers the development
questions of the human-written sets (every second one, as benchmarks.routing collect takes
them); the large model (qwen2.5-1.5b) gives P(yes) for each answer four ways:

- ``cited``: the shipped check (serve/query/check.py ``AnswerCheck.prompt``): the cited source,
  the question, the proposed answer, in a fresh conversation;
- ``all``: the same question with every source of the prompt instead of the cited one;
- ``context``: after the large model's own answer prompt, the small model's raw reply as the
  assistant's turn, then ``CONTEXT`` (a cascade would find that prompt cached);
- ``context-doubt``: the same, the last turn saying that the reply came from a less reliable
  model.

    .venv/bin/python -m benchmarks.experiments.check_variants [--every 2] [--limit N]

It prints each variant's AUROC (right answers ranked above wrong ones) over the answerable
questions the small model answered, per language and overall, and writes the rows to
benchmarks/eval/routing/check-variants.jsonl.

Conclusion (2026-12-06): every source led here (0.771 against the cited check's 0.718), but
over the whole sets it separated no better (benchmarks/results/routing.md, "Other checks of the
small model's answers"); the in-context checks endorse nearly every reply. The cited check stays.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from benchmarks.routing import ROOT, SETS, TENANTS, answer_all, small_reply, two_models
from serve.eval.metrics import answer_matches
from serve.eval.run import load_questions

CONTEXT = (
    "Check the reply above against the sources: does it answer my question correctly, as the "
    "sources state it? Reply with one word: yes or no."
)
DOUBT = (
    "That reply came from a smaller, less reliable model and may be wrong: it may answer from a "
    "neighbouring fact, another person, place or date, or a figure of another sentence. Read "
    "the sources again. Is its answer correct? Reply with one word: yes or no."
)
OUT = ROOT / "benchmarks/eval/routing/check-variants.jsonl"


async def main(args: argparse.Namespace) -> None:
    from serve.query.prompt import PromptBuilder

    engines, service, pipeline, check = two_models()
    large = engines["large"]
    escape = PromptBuilder(large.special_tokens).escape
    todo = [(language, q) for language in ("en", "fr") for q in load_questions(SETS[language])
            if q.split == "dev" and int(q.id.rsplit("-", 1)[1]) % args.every == 0
            and q.answerable][: args.limit]  # fmt: skip
    print(f"{len(todo)} answerable dev questions", flush=True)
    slots = asyncio.Semaphore(4)
    OUT.unlink(missing_ok=True)

    async def one(language, q):
        async with slots:
            reply = await small_reply(pipeline, TENANTS[language], q.question)
            if reply is None:
                return
            prepared, text, pending, own = reply
            answer = pending[0]
            after = [*own.messages, {"role": "assistant", "content": escape(text)}]
            prompts = {
                "cited": check.prompt(prepared.query, *pending),
                "all": check.prompt(prepared.query, answer, *own.sources),
                "context": large.render([*after, {"role": "user", "content": CONTEXT}]),
                "context-doubt": large.render([*after, {"role": "user", "content": DOUBT}]),
            }
            row = {"id": q.id, "language": language, "answer": answer,
                   "right": answer_matches(answer, q.answer_contains)}  # fmt: skip
            for name, tokens in prompts.items():
                row[name] = await check.support(tokens, prepared.cache_salt)
            with OUT.open("a") as f:
                f.write(json.dumps(row) + "\n")

    await answer_all(one, todo, engines, service, OUT, ("cited", "all", "context", "context-doubt"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=int, default=2, help="every n-th dev question")
    parser.add_argument("--limit", type=int, default=None)
    asyncio.run(main(parser.parse_args()))
