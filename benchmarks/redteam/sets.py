"""The red-team sets: where each one lives, the business questions that none of its documents
answer, and the text form that every comparison of answers and injections uses.

A set is a folder benchmarks/<name>/ with docs/ (the documents), cases.jsonl (one case per
line), pdfs.json (what make_pdfs.py draws into docs/) and results/ (what run.py writes).
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# benchmarks/redteam is the development set (the defences were built looking at it); the
# held-out sets were written without sight of them and are only ever reported.
SETS = ("redteam", "redteam-heldout", "redteam-heldout2", "redteam-heldout3")
UNANSWERABLE = ROOT / "benchmarks" / "eval" / "business-unanswerable.jsonl"


def folder(name: str) -> Path:
    """The set's folder, benchmarks/<name>."""
    return ROOT / "benchmarks" / name


def norm(text: str, apostrophes: bool = True) -> str:
    """Case- and accent-insensitive, whitespace-collapsed form used for every comparison; a
    typographic apostrophe reads as ' unless ``apostrophes`` is false (the held-out sets'
    checks compare them as written)."""
    if apostrophes:
        text = text.replace("\u2019", "'")
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return re.sub(r"\s+", " ", text.casefold()).strip()


def unanswerable() -> list[dict]:
    """benchmarks/eval/business-unanswerable.jsonl: per document of the sets (PDFs left out), a
    question about its own organisation that no document of the sets answers."""
    return [json.loads(line) for line in UNANSWERABLE.read_text().splitlines()]
