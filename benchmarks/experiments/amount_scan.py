"""Which recorded answers does the amount rule (serve.query.amounts.amount_missing, part of
``query.grounded_only``) withhold? Every answered question that asks for an amount, a time, a
date or a price, in every stored red-team results file and every kept `grounded eval --json` run
(benchmarks/eval/sweep, benchmarks/eval/heldout), with the answers the rule withholds and
whether each was right, wrong or to an unanswerable question. No model is run.

    .venv/bin/python -m benchmarks.experiments.amount_scan
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.grounded_only import red_team_questions
from serve.query.amounts import amount_missing, asks_amount

ROOT = Path(__file__).resolve().parents[2]

SETS = ("redteam", "redteam-heldout", "redteam-heldout2")


def recorded() -> list[tuple[str, str, str, str, str]]:
    """(file, id, outcome, question, answer) for every answered question on record."""
    rows = []
    for name in SETS:
        questions = red_team_questions(name)
        for path in sorted((ROOT / "benchmarks" / name / "results").glob("*.jsonl")):
            for r in map(json.loads, path.read_text().splitlines()):
                if r["abstained"] or r["id"] not in questions:
                    continue
                outcome = "unanswerable" if r.get("unanswerable") else (
                    "right" if r["correct"] else "wrong")  # fmt: skip
                rows.append((f"{name}/{path.name}", r["id"], outcome, questions[r["id"]],
                             r["answer"] or ""))  # fmt: skip
    eval_dir = ROOT / "benchmarks" / "eval"
    for path in sorted([*eval_dir.glob("sweep/*.json"), *eval_dir.glob("heldout/*.json")]):
        for q in json.loads(path.read_text())["questions"]:
            if q["abstained"]:
                continue
            outcome = "unanswerable" if not q["answerable"] else {
                True: "right", False: "wrong", None: "unmatched"}[q.get("matched")]  # fmt: skip
            rows.append((path.relative_to(eval_dir).as_posix(), q["id"], outcome,
                         q["question"], q["answer"] or ""))  # fmt: skip
    return rows


def main() -> None:
    asking = [r for r in recorded() if asks_amount(r[3])]
    withheld = [r for r in asking if amount_missing(r[3], r[4])]
    for file, qid, outcome, question, answer in withheld:
        print(f"withheld: {file} {qid} ({outcome}): {question[:60]!r} -> {answer[:60]!r}")
    counts = {o: sum(r[2] == o for r in withheld) for o in ("right", "wrong", "unanswerable")}
    print(f"\n{len(asking)} recorded answers to questions asking an amount; the rule withholds "
          f"{len(withheld)}: {counts['right']} right, {counts['wrong']} wrong, "
          f"{counts['unanswerable']} to unanswerable questions")  # fmt: skip


if __name__ == "__main__":
    main()
