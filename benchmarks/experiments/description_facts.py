"""Description questions that ask for facts their article does not state: for each description
question of benchmarks/eval/answers-en.jsonl, whether every year-like number it names (the
Wikidata lifespans, "(1955–2011)") appears in its answering article's text in the corpus; and,
from a `grounded eval --json` output over that set, the answer match on all of them and on
those whose numbers are all stated.

    .venv/bin/python -m benchmarks.experiments.description_facts <grounded eval --json output>
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "benchmarks" / ".cache" / "eval" / "corpus-en"
QUESTIONS = ROOT / "benchmarks" / "eval" / "answers-en.jsonl"
_YEAR = re.compile(r"\d{3,4}")


def unstated(question: dict) -> list[str]:
    """The question's year-like numbers that its answering article does not contain."""
    text = (CORPUS / question["relevant_files"][0]).read_text(encoding="utf-8")
    return [year for year in _YEAR.findall(question["question"]) if year not in text]


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines()]
    described = {q["id"]: q for q in questions if q["kind"] == "description"}
    missing = {qid for qid, q in described.items() if unstated(q)}
    test = {qid for qid, q in described.items() if q["split"] == "test"}
    print(
        f"description questions naming a year their article lacks: {len(missing)} of "
        f"{len(described)} ({len(missing & test)} of {len(test)} in the test half)"
    )
    matched = {q["id"]: bool(q["matched"]) for q in json.loads(Path(sys.argv[1]).read_text())
               ["questions"] if q["id"] in described}  # fmt: skip
    stated = [qid for qid in matched if qid not in missing]
    print(
        f"answer match: all {sum(matched.values())} of {len(matched)}; stated facts only "
        f"{sum(matched[q] for q in stated)} of {len(stated)}"
    )


if __name__ == "__main__":
    main()
