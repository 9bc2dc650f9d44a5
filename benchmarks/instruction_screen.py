"""The instruction screen (index/screening.py) on the red-team sets and on ordinary text: what
each layer withholds, what it flags that it should not, and what the judged layer costs.

    .venv/bin/python -m benchmarks.instruction_screen [--sets redteam,redteam-heldout]
        [--min-scores -10,-9.5,-9,-8.5] [--wiki 2000] [--against-batch 16]

Each document is read through Grounded's loaders (what ingestion stores). Per case:
- "withheld": every sentence of the injection that reached the stored text is withheld;
  "partly": some of them; "never reached": the loader dropped it (HTML comments, alt text...);
- "answer lost": an answer string of the legitimate question is withheld.
Ordinary text: the other sentences of the red-team documents, and the Wikipedia summaries of
the evaluation corpora (benchmarks/.cache/eval/corpus-{en,fr}, written by retrieval_quality.py):
sentences and documents flagged. The judge's scores are computed once per sentence and
thresholded for each ``--min-scores`` value (the screen's cost is reported for one pass).
``--against-batch N``: per set and threshold, the documents whose flagged spans differ when the
judge scores N sentences per call instead of one (the INT8 scores depend on the batch).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.redteam.sets import norm as _norm
from index.config import LoaderLimits
from index.loaders import load_document
from index.screening import find_instructions, withhold_instructions
from serve.config import load_config
from serve.query.instruction_judge import instruction_scorer
from serve.query.rerankers import cross_encoder

ROOT = Path(__file__).resolve().parent.parent

CORPORA = ROOT / "benchmarks" / ".cache" / "eval"


def norm(text: str) -> str:
    """Words only (case, accents, markup and punctuation aside): an injection written with
    Markdown emphasis is found in the text the loader extracted without it."""
    return " ".join(re.findall(r"\w+", _norm(text)))


class RecordingJudge:
    """Scores every sentence once with the screen's judge (pair by pair) and keeps the scores,
    so that each threshold is applied without judging again."""

    def __init__(self, rerank) -> None:
        self.scorer = instruction_scorer(rerank)
        self.scores: dict[str, float] = {}
        self.seconds = 0.0
        self.pairs = 0

    def score(self, sentences):
        from index.screening import JUDGE_QUESTION

        started = time.perf_counter()
        new = [s for s in dict.fromkeys(sentences) if s not in self.scores]
        if new:
            self.scores.update(zip(new, self.scorer._predict(JUDGE_QUESTION, new), strict=True))
        self.seconds += time.perf_counter() - started
        self.pairs += len(new)

    def at(self, threshold: float):
        def judge(sentences):
            self.score(sentences)
            return [self.scores[s] >= threshold for s in sentences]

        return judge


def sentences_of(text: str) -> list[str]:
    from index.screening import _sentence_spans

    return [text[a:b] for a, b in _sentence_spans(text) if len(text[a:b].split()) >= 3]


def documents(name: str) -> list[tuple[dict, str]]:
    """The set's cases, each with its document's text as ingestion stores it."""
    folder = ROOT / "benchmarks" / name
    cases = [json.loads(line) for line in (folder / "cases.jsonl").read_text().splitlines()]
    paths = [folder / c["file"] if "/" in c["file"] else folder / "docs" / c["file"] for c in cases]
    return [(case, load_document(path.read_bytes(), path.name, LoaderLimits()).text)
            for case, path in zip(cases, paths, strict=True)]  # fmt: skip


def red_team(name: str, judges: dict[str, object]) -> list[str]:
    cases = documents(name)
    rows = []
    for layer, judge in judges.items():
        withheld = partly = never = lost = other_flagged = other_total = 0
        for case, text in cases:
            flags = find_instructions(text, judge)
            kept = norm(withhold_instructions(text, [(f.start, f.end) for f in flags]))
            whole = norm(text)
            injected = [norm(s) for s in sentences_of(case["injection"])] or [
                norm(case["injection"])
            ]
            present = [s for s in injected if s in whole]
            gone = [s for s in present if s not in kept]
            if not present:
                never += 1
            elif len(gone) == len(present):
                withheld += 1
            elif gone:
                partly += 1
            answers = [a for a in case["answer_contains"] if norm(a) in whole]
            lost += bool(answers) and not any(norm(a) in kept for a in answers)
            for sentence in sentences_of(text):
                if any(norm(sentence) in s or s in norm(sentence) for s in injected):
                    continue
                other_total += 1
                other_flagged += norm(sentence) not in kept
        rows.append(
            f"| {name} | {layer} | {withheld} of {len(cases)} | {partly} | {never} | {lost} | "
            f"{other_flagged} of {other_total} |"
        )
    return rows


def judge_alone(name: str, judges: dict[str, object]) -> list[str]:
    """The judged layer by itself (how its threshold is chosen, on the development set): of each
    injection's sentences that speak to the reader, is one flagged; and how many of the other
    such sentences of the documents are."""
    from index.screening import _IMPERATIVE, _SECOND_PERSON

    def asked(text: str) -> list[str]:
        return [s for s in sentences_of(text) if _IMPERATIVE.search(s) or _SECOND_PERSON.search(s)]

    cases = documents(name)
    rows = []
    for layer, judge in judges.items():
        if judge is None:
            continue
        caught = flagged = total = 0
        for case, text in cases:
            injected = asked(case["injection"])
            caught += bool(injected) and any(judge(injected))
            keys = [norm(s) for s in sentences_of(case["injection"])]
            other = [s for s in asked(text) if not any(norm(s) in k or k in norm(s) for k in keys)]
            total += len(other)
            flagged += sum(judge(other)) if other else 0
        rows.append(f"| {name} | {layer.removeprefix('keywords + ')} | {caught} of {len(cases)} | "
                    f"{flagged} of {total} |")  # fmt: skip
    return rows


def against_batch(name: str, thresholds: list[float], batch: int, rerank, recorder) -> list[str]:
    """Per threshold, the documents whose flagged spans differ with ``batch`` sentences per call."""
    from index.screening import JUDGE_QUESTION

    batched = cross_encoder(rerank.model, "cpu", batch, max_tokens=128).start()
    texts = [text for _, text in documents(name)]
    rows = []
    for threshold in thresholds:

        def at_batch(sentences, threshold=threshold):
            return [x >= threshold for x in batched._predict(JUDGE_QUESTION, sentences)]

        differ = sum(
            find_instructions(text, recorder.at(threshold)) != find_instructions(text, at_batch)
            for text in texts
        )
        rows.append(f"| {name} | {threshold} | {differ} of {len(texts)} |")
    return rows


def ordinary(language: str, count: int, judges: dict[str, object]) -> list[str]:
    files = sorted((CORPORA / f"corpus-{language}").glob("*"))[:count]
    texts = [f.read_text(encoding="utf-8") for f in files]
    total = sum(len(sentences_of(t)) for t in texts)
    rows = []
    for layer, judge in judges.items():
        flagged = [find_instructions(t, judge) for t in texts]
        rows.append(
            f"| wikipedia-{language} ({len(texts)} summaries) | {layer} | "
            f"{sum(len(f) for f in flagged)} of {total} sentences | "
            f"{sum(bool(f) for f in flagged)} documents |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--sets", default="redteam,redteam-heldout")
    parser.add_argument("--min-scores", default="-10,-9.5,-9,-8.5")
    parser.add_argument("--wiki", type=int, default=2000, help="summaries per language")
    parser.add_argument(
        "--against-batch",
        type=int,
        default=0,
        metavar="N",
        help="compare the flags with N sentences per judge call",
    )
    args = parser.parse_args()
    config = load_config(Path(args.config), data_dir=ROOT / "data")
    recorder = RecordingJudge(config.query.rerank)
    judges = {"keywords": None} | {
        f"keywords + judge >= {t}": recorder.at(float(t)) for t in args.min_scores.split(",")
    }
    print("| set | layers | injection withheld | partly | never reached the text | "
          "answer lost | other sentences flagged |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name in args.sets.split(","):
        print("\n".join(red_team(name, judges)), flush=True)
    print("\n| set | judge alone | injections flagged | other sentences that speak to the "
          "reader, flagged |\n|---|---|---|---|")  # fmt: skip
    for name in args.sets.split(","):
        print("\n".join(judge_alone(name, judges)), flush=True)
    if args.against_batch:
        thresholds = [float(t) for t in args.min_scores.split(",")]
        print(f"\n| set | judge threshold | documents flagged otherwise at {args.against_batch} "
              "sentences per call |\n|---|---|---|")  # fmt: skip
        for name in args.sets.split(","):
            rows = against_batch(
                name, thresholds, args.against_batch, config.query.rerank, recorder
            )
            print("\n".join(rows), flush=True)
    print("\n| ordinary text | layers | flagged sentences | flagged documents |\n|---|---|---|---|")
    for language in ("en", "fr"):
        print("\n".join(ordinary(language, args.wiki, judges)), flush=True)
    print(f"\njudge: {recorder.pairs} sentences scored in {recorder.seconds:.1f} s "
          f"({1000 * recorder.seconds / max(1, recorder.pairs):.1f} ms per sentence)")  # fmt: skip


if __name__ == "__main__":
    main()
