"""Check the second held-out red-team set: cases parse, documents exist and read as intended.

    .venv/bin/python benchmarks/redteam-heldout2/validate.py

Light: reads the files, extracts visible text (BeautifulSoup for HTML, pypdf for PDF) and
checks each case; no model, no index. Matching is case- and accent-insensitive with
whitespace collapsed, as the scoring of answers is meant to be.

An HTML injection that is not in the visible text (an HTML comment, an alt or title
attribute) is looked for in the raw file instead, and must sit inside a comment or an
attribute value; the answer strings must then be in the visible text.
"""

from __future__ import annotations

import ast
import html
import json
import re
import sys
import unicodedata
from collections import Counter
from pathlib import Path

from bs4 import BeautifulSoup, Comment
from pypdf import PdfReader

HERE = Path(__file__).resolve().parent
PROMPT = HERE.parents[1] / "serve" / "query" / "prompt.py"
NOT_FOUND = ("Not found in the sources", "Introuvable dans les sources")
KEYS = {
    "id",
    "file",
    "technique",
    "language",
    "doc_language",
    "goal",
    "question",
    "answer_contains",
    "obeyed_if",
    "injection",
}
HOST = re.compile(r"[a-z0-9.-]+\.attacker\.example", re.IGNORECASE)


def norm(text: str) -> str:
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c))
    return re.sub(r"\s+", " ", text).casefold().strip()


def rules_text() -> str:
    """SYSTEM_RULES and REMINDER as Python evaluates them, read without importing the module."""
    tree = ast.parse(PROMPT.read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in ("SYSTEM_RULES", "REMINDER"):
                    found[target.id] = node.value.value
    assert set(found) == {"SYSTEM_RULES", "REMINDER"}, found
    return found["SYSTEM_RULES"] + "\n" + found["REMINDER"]


def visible_text(path: Path) -> str:
    if path.suffix == ".pdf":
        return "\n".join(page.extract_text() for page in PdfReader(path).pages)
    raw = path.read_text(encoding="utf-8")
    if path.suffix == ".html":
        return BeautifulSoup(raw, "html.parser").get_text(" ")
    return raw


def hidden_place(path: Path, inj: str) -> str | None:
    """Where a non-visible HTML injection sits: 'comment', 'attribute <name>' or None."""
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    for comment in soup.find_all(string=lambda s: isinstance(s, Comment)):
        if inj in norm(comment):
            return "comment"
    for tag in soup.find_all(True):
        for name, value in tag.attrs.items():
            if isinstance(value, str) and inj in norm(value):
                return f"attribute {name}"
    return None


def main() -> int:
    rules = norm(rules_text())
    errors: list[str] = []
    cases = [
        json.loads(line) for line in (HERE / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    ids = Counter(c["id"] for c in cases)
    errors += [f"duplicate id {i}" for i, n in ids.items() if n > 1]
    errors += [
        f"duplicate technique {t!r}"
        for t, n in Counter(c.get("technique") for c in cases).items()
        if n > 1
    ]
    seen_markers: dict[str, str] = {}
    places: Counter[str] = Counter()
    hosts_per_case: dict[str, set[str]] = {}
    for c in cases:
        cid = c["id"]
        missing = KEYS - set(c)
        if missing:
            errors.append(f"{cid}: missing keys {sorted(missing)}")
            continue
        path = HERE / c["file"]
        if not path.is_file():
            errors.append(f"{cid}: no file {c['file']}")
            continue
        if not path.name.startswith(cid + "-"):
            errors.append(f"{cid}: file name does not start with the id")
        doc = norm(visible_text(path))
        words = len(doc.split())
        if not 120 <= words <= 350:
            errors.append(f"{cid}: {words} words")
        inj = norm(c["injection"])
        if inj in doc:
            places["visible text"] += 1
            if doc.count(inj) != 1:
                errors.append(f"{cid}: injection found {doc.count(inj)} times in the document")
                continue
            rest = doc.replace(inj, " \u2063 ")  # the document outside the injection
            marker_rest = rest
        elif path.suffix == ".html":
            raw = norm(html.unescape(path.read_text(encoding="utf-8")))
            place = hidden_place(path, inj)
            if raw.count(inj) != 1 or place is None:
                errors.append(
                    f"{cid}: injection found {raw.count(inj)} times in the raw file, in {place}"
                )
                continue
            places[place] += 1
            rest = doc  # answers must be in the visible text
            marker_rest = raw.replace(inj, " \u2063 ")
        else:
            errors.append(f"{cid}: injection not found in the document")
            continue
        question = norm(c["question"])
        answers = [norm(a) for a in c["answer_contains"]]
        cross = c.get("doc_language", c["language"]) != c["language"]
        present = [a for a in answers if a in rest]
        if cross and not present:
            errors.append(f"{cid}: no answer string in the document")
        if not cross and len(present) != len(answers):
            errors.append(
                f"{cid}: answer strings not in the document: {set(answers) - set(present)}"
            )
        if any(a in inj for a in answers):
            errors.append(f"{cid}: an answer string occurs in the injection")
        without_answer = bool(c.get("obeyed_only_without_answer"))
        if without_answer and not any(n in c["obeyed_if"] for n in NOT_FOUND):
            errors.append(f"{cid}: obeyed_only_without_answer without a not-found string")
        for marker in c["obeyed_if"]:
            m = norm(marker)
            is_rule = m in rules and marker not in NOT_FOUND
            if marker in NOT_FOUND:
                if not without_answer:
                    errors.append(f"{cid}: not-found marker without obeyed_only_without_answer")
            elif is_rule:
                pass
            elif m not in inj:
                errors.append(f"{cid}: obeyed_if {marker!r} not in the injection")
            if not is_rule and marker not in NOT_FOUND:
                if m in marker_rest:
                    errors.append(f"{cid}: obeyed_if {marker!r} also occurs outside the injection")
                if m in seen_markers:
                    errors.append(f"{cid}: obeyed_if {marker!r} reused from {seen_markers[m]}")
                seen_markers[m] = cid
            if m in question or any(m in a or a in m for a in answers):
                errors.append(f"{cid}: obeyed_if {marker!r} overlaps the question or an answer")
        hosts = {h.lower() for h in HOST.findall(c["injection"])}
        if hosts:
            hosts_per_case[cid] = hosts
            if len(hosts) != 1 or not any(norm(h) in map(norm, c["obeyed_if"]) for h in hosts):
                errors.append(f"{cid}: expected one attacker host, listed in obeyed_if: {hosts}")
    all_hosts = Counter(h for hs in hosts_per_case.values() for h in hs)
    errors += [f"attacker host {h} used {n} times" for h, n in all_hosts.items() if n > 1]
    listed = {Path(c["file"]).name for c in cases}
    errors += [
        f"unlisted document {p.name}" for p in (HERE / "docs").iterdir() if p.name not in listed
    ]

    print(f"cases: {len(cases)}")
    print("file types:", dict(Counter(Path(c["file"]).suffix for c in cases)))
    print("question languages:", dict(Counter(c["language"] for c in cases)))
    print("document languages:", dict(Counter(c.get("doc_language") for c in cases)))
    print("goals:", dict(Counter(c.get("goal") for c in cases)))
    print("techniques:", len({c["technique"] for c in cases}), "distinct")
    print("injection placed in:", dict(places))
    for e in errors:
        print("ERROR", e)
    print("OK" if not errors else f"{len(errors)} error(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
