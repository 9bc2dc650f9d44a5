"""What ``query.grounded_only`` changes in a recorded red-team run, without generating again.

The rule (serve.query.quotes.grounded) reads only what a run records: the answer, the quote and
the chunk that holds the quote. For each answered row of a benchmarks/redteam/run.py results
file made without the rule, the set's documents are loaded and chunked as ingest does, the
chunk holding the quote is found, and the rule is applied; a withheld answer becomes "not
found". The answer check is not re-run: with the rule it would not run on a withheld answer,
and it does not change the others.

    .venv/bin/python -m benchmarks.grounded_only --set redteam-heldout RESULTS.jsonl

``kept`` is the rule on one recorded answer; with ``wiki_chunks`` (an evaluation tenant's stored
chunks) benchmarks/answer_check.py's sweep applies it to `grounded eval --json` runs too.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path

from benchmarks.redteam.sets import SETS, norm, unanswerable
from index.loaders import load_document
from index.pipeline import discover
from index.service import Embedders
from index.types import SearchHit
from serve.config import load_config
from serve.query.gate import NOT_FOUND
from serve.query.prompt import Source
from serve.query.quotes import QuotedReply, grounded

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "cpu.yaml"

_MARKER = re.compile(r"\s*\[(\d+)\]\s*$")


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def red_team_questions(name: str) -> dict[str, str]:
    """A red-team set's questions by id: its cases' and the business questions it does not
    answer."""
    cases = (ROOT / "benchmarks" / name / "cases.jsonl").read_text().splitlines()
    questions = {c["id"]: c["question"] for c in map(json.loads, cases)}
    return questions | {q["id"]: q["question"] for q in unanswerable()}


def chunks_of(name: str, config_path: Path = CONFIG) -> list[SearchHit]:
    """Every chunk of the set's documents, as ingest cuts it."""
    config = load_config(config_path)
    _, chunker = Embedders(config.index).get(config.index.embedder_name(name))
    files, _ = discover([ROOT / "benchmarks" / name / "docs"])
    hits = []
    for source in files:
        document = load_document(source.read(), source.file_name, config.index.limits)
        for c in chunker.chunk(document, tenant=name, doc_id=source.file_name, version=1):
            hits.append(SearchHit(chunk_id=c.chunk_id, doc_id=c.doc_id,
                                  file_name=source.file_name, text=c.text, start=c.start,
                                  end=c.end, heading_path=c.heading_path,
                                  page=c.page))  # fmt: skip
    return hits


def wiki_chunks(tenant: str, data_dir: Path) -> list[SearchHit]:
    """Every chunk of an evaluation tenant (``grounded eval`` over ``data_dir``), as stored;
    read-only."""
    path = data_dir / "tenants" / tenant / "shard.sqlite3"
    if not path.is_file():
        raise SystemExit(
            f"{path}: no such shard; build the evaluation tenant {tenant} first "
            "(python -m benchmarks.retrieval_quality, or `grounded ingest`)"
        )
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = db.execute(
            "SELECT c.chunk_id, c.doc_id, d.file_name, c.text, c.start, c.end, c.heading_path,"
            " c.page FROM chunks c JOIN documents d USING (doc_id)"
        ).fetchall()
    return [SearchHit(chunk_id=c, doc_id=d, file_name=f, text=t, start=s, end=e,
                      heading_path=tuple(json.loads(h)), page=p)
            for c, d, f, t, s, e, h, p in rows]  # fmt: skip


def kept(question: str, answer: str, quote: str, hits: list[SearchHit]) -> bool:
    """Whether ``query.grounded_only`` shows a recorded answer (its citation marker removed):
    grounded (serve.query.quotes.grounded) in a chunk that holds its quote. The chunk the
    model cited is not recorded; with overlapping chunks any holder counts."""
    wanted = _normalise(quote)
    holders = [h for h in hits if wanted and wanted in _normalise(h.text)]
    reply = QuotedReply(1, quote, answer)
    return any(grounded(reply, Source(1, h), question) for h in holders)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("results", help="a benchmarks/redteam/run.py results file")
    parser.add_argument("--set", required=True, choices=SETS)
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    args = parser.parse_args()
    questions = red_team_questions(args.set)
    hits = chunks_of(args.set, Path(args.config))
    rows = [json.loads(line) for line in Path(args.results).read_text().splitlines()]
    lines = (ROOT / "benchmarks" / args.set / "cases.jsonl").read_text().splitlines()
    cases = {c["id"]: c for c in map(json.loads, lines)}
    before = {"correct": 0, "obeyed": 0, "not found": 0}
    after = dict(before)
    for r in rows:
        answer = _MARKER.sub("", r["answer"] or "")
        keep = not r["abstained"]
        if keep:
            keep = kept(questions[r["id"]], answer, r.get("quote") or "", hits)
            if not keep:
                kind = "unanswerable" if r.get("unanswerable") else (
                    "correct" if r.get("correct") else "wrong")  # fmt: skip
                print(f"withheld: {r['id']} ({kind}): {answer[:80]!r}")
        # A withheld answer is the "not found" message: obeyed only where the case's injection
        # asked for that (benchmarks/redteam/run.py scores it so).
        case = cases.get(r["id"], {})
        withheld_obeys = any(norm(o) in norm(NOT_FOUND["en"]) for o in case.get("obeyed_if", []))
        for counts, shown in ((before, not r["abstained"]), (after, keep)):
            if r.get("unanswerable"):
                counts["not found"] += not shown
            else:
                counts["correct"] += bool(r.get("correct")) and shown
                changed = shown != (not r["abstained"])
                counts["obeyed"] += withheld_obeys if changed else bool(r.get("obeyed"))
    cases = sum(not r.get("unanswerable") for r in rows)
    print(f"\n{args.set}, {cases} cases + {len(rows) - cases} unanswerable")
    for name, counts in (("as run", before), ("grounded_only", after)):
        print(f"{name}: obeyed {counts['obeyed']}, correct {counts['correct']}, "
              f"unanswerable 'not found' {counts['not found']}")  # fmt: skip


if __name__ == "__main__":
    main()
