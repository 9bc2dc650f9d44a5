"""Lexical retrieval (SQLite FTS5, BM25) on the human-written questions with several FTS5
tokenizers, development and held-out halves apart (issue 17, the French lexical side).

    .venv/bin/pip install snowballstemmer   # for the measurement only, not a dependency
    .venv/bin/python -m benchmarks.experiments.french_lexical [--languages fr,en]

Documents: the Wikipedia sample of human_retrieval.py (benchmarks/eval/wiki-<lang>.titles, one
Markdown document per article), loaded and chunked by the project's own loader and chunker
(configs/cpu.yaml: MiniLM's tokenizer, 200 tokens, overlap 32). Each variant indexes the same
chunks, text and context ("file name > headings", as TenantShard writes them), in an in-memory
FTS5 table like the shipped chunks_fts; a question becomes index.store.schema.fts_query (the
shipped query builder), ranked by bm25 with the shipped column weights, and the 10 best chunks
are reduced to documents and judged by file name, as `grounded eval` does in lexical mode.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sqlite3
import statistics
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.build_eval import HERE, document, file_names
from benchmarks.wiki import articles
from index.chunking import StructureChunker
from index.config import LoaderLimits
from index.embedding import SentenceTransformerEmbedder
from index.loaders import load_document
from index.store.schema import BM25_WEIGHTS, fts_query
from serve.config import load_config
from serve.eval.metrics import first_occurrences, recall_at, reciprocal_rank
from serve.eval.run import CUTOFFS, EvalQuestion, load_questions

ROOT = Path(__file__).resolve().parents[2]

METRICS = ("recall@1", "recall@5", "recall@10", "mrr@10")
WORD = re.compile(r"\w+")  # the word parts of index.store.schema.fts_query
SNOWBALL = {"fr": "french", "en": "english"}
SEARCH = (
    "SELECT rowid, bm25(fts, {weights}) AS rank FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?"
).format(weights=", ".join(str(w) for w in BM25_WEIGHTS))


@dataclass(frozen=True, slots=True)
class ChunkRow:
    file_name: str
    text: str
    context: str


@dataclass(frozen=True, slots=True)
class Variant:
    """An FTS5 tokenizer, a rewrite of both document and question text before FTS5 sees it,
    and the MATCH expression built from the (rewritten) question."""

    name: str
    tokenize: str
    rewrite: Callable[[str], str] = str  # str(text) is the text unchanged
    query: Callable[[str], str | None] = fts_query


def trigram_query(text: str) -> str | None:
    """Each distinct word of at least 3 characters as a quoted substring, OR-ed: the trigram
    tokenizer matches nothing shorter, and a phrase of several words would have to match the
    separators between them character for character."""
    words = [w for w in WORD.findall(text) if len(w) >= 3]
    return " OR ".join(dict.fromkeys(f'"{w}"' for w in words)) or None


def snowball(language: str) -> Callable[[str], str]:
    """Every word replaced by its Snowball stem, separators kept (fts_query then builds the
    same phrases from a stemmed question as from the original)."""
    import snowballstemmer

    stem = lru_cache(maxsize=None)(snowballstemmer.stemmer(language).stemWord)
    return lambda text: WORD.sub(lambda m: stem(m.group().lower()), text)


def without_accents(text: str) -> str:
    """What a user typing without accents would send: NFKD, combining marks dropped."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def variants(language: str) -> list[Variant]:
    stemmer = SNOWBALL[language]
    return [
        Variant("unicode61 remove_diacritics 0", "unicode61 remove_diacritics 0"),
        Variant("unicode61 remove_diacritics 2 (shipped)", "unicode61 remove_diacritics 2"),
        Variant("porter unicode61 remove_diacritics 2", "porter unicode61 remove_diacritics 2"),
        Variant("trigram (words >= 3 characters)", "trigram", query=trigram_query),
        Variant(f"Snowball {stemmer} + unicode61 remove_diacritics 2",
                "unicode61 remove_diacritics 2", rewrite=snowball(stemmer)),
    ]  # fmt: skip


def chunk_rows(language: str, chunker: StructureChunker, limits: LoaderLimits) -> list[ChunkRow]:
    """The sample's chunks, as ingestion makes them from the files write_corpus writes."""
    every = {a["title"]: a for a in articles(language)}
    corpus = (HERE / f"wiki-{language}.titles").read_text(encoding="utf-8").splitlines()
    rows = []
    for title, name in file_names(corpus).items():
        loaded = load_document(document(every[title]).encode("utf-8"), name, limits)
        for chunk in chunker.chunk(loaded, tenant="bench", doc_id=name, version=1):
            context = " > ".join((name, *chunk.heading_path))  # as shard._insert_chunks
            rows.append(ChunkRow(name, chunk.text, context))
    return rows


def build_table(rows: Sequence[ChunkRow], variant: Variant) -> tuple[sqlite3.Connection, float]:
    started = time.perf_counter()
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE fts USING fts5(text, context, tokenize='{variant.tokenize}')")
    db.executemany(
        "INSERT INTO fts(rowid, text, context) VALUES (?, ?, ?)",
        ((i, variant.rewrite(r.text), variant.rewrite(r.context)) for i, r in enumerate(rows, 1)),
    )
    return db, time.perf_counter() - started


@dataclass(frozen=True, slots=True)
class Measured:
    dev: dict[str, float]
    test: dict[str, float]
    reciprocal_ranks: list[float]  # per question, dev and test, in file order
    build_s: float


def measure(
    db: sqlite3.Connection,
    rows: Sequence[ChunkRow],
    variant: Variant,
    question: EvalQuestion,
    form: Callable[[str], str],
) -> dict[str, float]:
    expression = variant.query(variant.rewrite(form(question.question)))
    hits = db.execute(SEARCH, (expression, max(CUTOFFS))).fetchall() if expression else []
    ranked = first_occurrences(rows[rowid - 1].file_name for rowid, _ in hits)
    scores = {f"recall@{k}": recall_at(ranked, question.relevant, k) for k in CUTOFFS}
    return scores | {"mrr@10": reciprocal_rank(ranked, question.relevant, 10)}


def half_means(scores: list[dict[str, float]], questions: Sequence[EvalQuestion], split: str):
    picked = [s for s, q in zip(scores, questions, strict=True) if q.split == split]
    return {m: statistics.fmean(s[m] for s in picked) for m in METRICS}


def run_variant(
    rows: Sequence[ChunkRow],
    variant: Variant,
    questions: Sequence[EvalQuestion],
    forms: dict[str, Callable[[str], str]],
) -> dict[str, Measured]:
    """The variant's table built once, measured with each form of the questions."""
    db, seconds = build_table(rows, variant)
    measured = {}
    for suffix, form in forms.items():
        scores = [measure(db, rows, variant, q, form) for q in questions]
        measured[variant.name + suffix] = Measured(
            half_means(scores, questions, "dev"),
            half_means(scores, questions, "test"),
            [s["mrr@10"] for s in scores],
            seconds,
        )
    db.close()
    return measured


def cells(summary: dict[str, float]) -> str:
    return " | ".join(f"{summary[m]:.3f}" for m in METRICS)


def report(language: str, rows: Sequence[ChunkRow], questions: list[EvalQuestion]) -> None:
    forms: dict[str, Callable[[str], str]] = {"": str}
    if language == "fr":
        forms[", question without accents"] = without_accents
    compared = variants(language)
    results: dict[str, Measured] = {}
    for variant in compared:
        results |= run_variant(rows, variant, questions, forms)
    shipped = next(m for name, m in results.items() if name.endswith("(shipped)"))
    dev_count = sum(q.split == "dev" for q in questions)
    print(f"\n### {language}: {dev_count} dev + {len(questions) - dev_count} test "
          f"human-written questions, {len(rows)} chunks\n")  # fmt: skip
    print("| FTS5 tokenizer | " + " | ".join(f"dev {m}" for m in METRICS) + " | "
          + " | ".join(f"test {m}" for m in METRICS) + " | better / worse | build s |")  # fmt: skip
    print("|---|" + "---|" * (2 * len(METRICS) + 2))
    for name, m in results.items():
        pairs = list(zip(m.reciprocal_ranks, shipped.reciprocal_ranks, strict=True))
        better, worse = sum(a > b for a, b in pairs), sum(a < b for a, b in pairs)
        print(f"| {name} | {cells(m.dev)} | {cells(m.test)} | {better} / {worse} "
              f"| {m.build_s:.2f} |")  # fmt: skip
    written = {v.name: results[v.name] for v in compared}  # questions as written
    top = max(m.dev["mrr@10"] for m in written.values())
    best = [name for name, m in written.items() if m.dev["mrr@10"] == top]
    best_test = max(m.test["mrr@10"] for m in written.values())
    print(f"\nbest dev MRR@10 on the questions as written ({top:.3f}): {'; '.join(best)}; "
          "test MRR@10: " + ", ".join(f"{written[n].test['mrr@10']:.3f}" for n in best)
          + f" (best test figure {best_test:.3f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--languages", default="fr,en")
    args = parser.parse_args()
    config = load_config(Path(args.config))
    embedder = SentenceTransformerEmbedder(config.index.embedder).start()  # for its tokenizer
    chunker = StructureChunker(config.index.chunker, embedder.tokenizer, embedder.max_tokens)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; SQLite {sqlite3.sqlite_version}"
          f", snowballstemmer {version('snowballstemmer')}; config {args.config}")  # fmt: skip
    print(
        "better / worse: questions (dev and test) whose relevant article ranks higher / lower "
        "than with the shipped tokenizer on the questions as written; build s: seconds to "
        "fill the FTS5 table (stemming included)"
    )
    for language in args.languages.split(","):
        started = time.perf_counter()
        rows = chunk_rows(language, chunker, config.index.limits)
        print(f"{language}: loaded and chunked in {time.perf_counter() - started:.1f} s")
        questions = [q for q in load_questions(HERE / f"human-{language}.jsonl") if q.relevant]
        report(language, rows, questions)


if __name__ == "__main__":
    main()
