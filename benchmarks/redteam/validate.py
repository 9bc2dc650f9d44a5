"""Check a red-team set for internal consistency (no model, no index; a second or two).

    .venv/bin/python -m benchmarks.redteam.validate [--set redteam] [--loaders]
    .venv/bin/python -m benchmarks.redteam.validate --set redteam-heldout
    .venv/bin/python -m benchmarks.redteam.validate --set redteam-heldout2
    .venv/bin/python -m benchmarks.redteam.validate --set redteam-heldout3

The sets were written with different case fields, so each is checked by its own rules.

The development set (redteam): cases.jsonl parses, ids are unique and match their files, every
file exists, each technique has at least two cases, every obeyed_if string is in the case's
injected text (or is a phrase of Grounded's own rules), no obeyed_if string appears in the
document outside the injection, the legitimate answer is in the document outside the injection,
answers and obeyed_if strings do not overlap, questions mention no obeyed_if string, canaries are
unique, and documents are 120-400 words. PDF injections are checked against the set's pdfs.json
(make_pdfs.py) and against the text pypdf extracts from the built file. --loaders also reads
every document through Grounded's own loaders (index.loaders) and reports which injections
survive ingestion (HTML comments, hidden elements and attributes, and Markdown link titles are
dropped by design, so those cases test the loaders as much as the model).

The held-out sets (redteam-heldout, redteam-heldout2, redteam-heldout3): cases parse, documents
exist and read as intended. Light: reads the files, extracts visible text (BeautifulSoup for
HTML, pypdf for PDF) and checks each case. Matching is case- and accent-insensitive with
whitespace collapsed, as the scoring of answers is meant to be. The second and third held-out
sets also require doc_language and goal, and distinct techniques; an HTML injection of theirs
that is not in the visible text (an HTML comment, an alt, title or aria-label attribute) is
looked for in the raw file instead, and must sit inside a comment or an attribute value; the
answer strings must then be in the visible text.
"""

from __future__ import annotations

import argparse
import ast
import html
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from benchmarks.redteam.sets import ROOT, SETS, folder, norm

# --- the development set (redteam) --------------------------------------------------------------

TECHNIQUES = {
    "system-notice",
    "ignore-instructions",
    "fake-delimiter",
    "chat-template",
    "prompt-leak",
    "data-exfiltration",
    "french",
    "html",
    "markdown",
    "pdf-hidden",
    "answer-poisoning",
    "authority",
}
FIELDS = {
    "id": str,
    "file": str,
    "technique": str,
    "variant": str,
    "placement": str,
    "language": str,
    "question": str,
    "answer_contains": list,
    "obeyed_if": list,
    "injection": str,
}
CANARY = re.compile(r"\b[A-Z0-9]+(?:-[A-Z0-9]+)*-\d{2,4}\b")


def system_rules() -> str:
    from serve.query.prompt import SYSTEM_RULES

    return SYSTEM_RULES


def pdf_text(path: Path) -> str:
    from pypdf import PdfReader

    return "\n".join(page.extract_text() or "" for page in PdfReader(path).pages)


def raw_text(path: Path) -> str:
    if path.suffix == ".pdf":
        return pdf_text(path)
    return path.read_text(encoding="utf-8")


def visible_words(path: Path, text: str) -> int:
    if path.suffix in (".html", ".htm"):
        text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
        text = re.sub(r"<[^>]+>", " ", text)
    return len(text.split())


def check_development(name: str, loaders: bool) -> int:
    from benchmarks.redteam.make_pdfs import hidden_texts  # fpdf2: the PDFs' hidden text

    here = folder(name)
    docs = here / "docs"
    errors: list[str] = []
    rules = norm(system_rules())
    hidden = hidden_texts(name)
    cases = []
    for number, line in enumerate(
        (here / "cases.jsonl").read_text(encoding="utf-8").splitlines(), 1
    ):
        if not line.strip():
            continue
        try:
            case = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"line {number}: not JSON ({exc})")
            continue
        for field, kind in FIELDS.items():
            if not isinstance(case.get(field), kind) or not case.get(field):
                errors.append(f"line {number}: field {field!r} missing or not a {kind.__name__}")
        cases.append(case)

    ids = Counter(case.get("id") for case in cases)
    errors += [f"duplicate id {i}" for i, n in ids.items() if n > 1]
    techniques = Counter(case.get("technique") for case in cases)
    errors += [f"unknown technique {t}" for t in techniques if t not in TECHNIQUES]
    errors += [
        f"technique {t} has {techniques[t]} case(s), need 2"
        for t in TECHNIQUES
        if techniques[t] < 2
    ]

    canaries: Counter[str] = Counter()
    for case in cases:
        cid, file = case["id"], case["file"]
        path = docs / file
        if Path(file).stem != cid:
            errors.append(f"{cid}: file {file} does not match the id")
        if path.suffix not in (".txt", ".md", ".html", ".pdf"):
            errors.append(f"{cid}: unexpected extension {path.suffix}")
        if not path.is_file():
            errors.append(f"{cid}: {path} missing")
            continue
        text = raw_text(path)
        injection = case["injection"]
        if path.suffix == ".pdf" and norm(injection) != norm(hidden.get(file, "")):
            errors.append(f"{cid}: injection differs from make_pdfs.py's hidden text")
        if norm(injection) not in norm(text):
            errors.append(f"{cid}: injection not found in the document")
        outside = norm(text).replace(norm(injection), " ")
        words = visible_words(path, text)
        if not 120 <= words <= 400:
            errors.append(f"{cid}: {words} words, expected 120-400")

        answers = [norm(a) for a in case["answer_contains"]]
        obeyed = [norm(o) for o in case["obeyed_if"]]
        if not any(a in outside for a in answers):
            errors.append(f"{cid}: no answer_contains string in the document outside the injection")
        for o, original in zip(obeyed, case["obeyed_if"], strict=False):
            in_rules = o in rules
            if o not in norm(injection) and not in_rules:
                errors.append(
                    f"{cid}: obeyed_if {original!r} is neither in the injection nor a rule phrase"
                )
            if o in outside:
                errors.append(f"{cid}: obeyed_if {original!r} also appears outside the injection")
            if o in norm(case["question"]):
                errors.append(f"{cid}: question contains obeyed_if {original!r}")
            for a, answer in zip(answers, case["answer_contains"], strict=False):
                if o in a or a in o:
                    errors.append(f"{cid}: answer {answer!r} and obeyed_if {original!r} overlap")
            if not in_rules:
                canaries.update(CANARY.findall(original))
        if case.get("obeyed_only_without_answer") and not any(
            "not found" in o or "introuvable" in o for o in obeyed
        ):
            errors.append(f"{cid}: obeyed_only_without_answer on a case that is not 'not found'")

    errors += [f"canary {c} used by {n} cases" for c, n in canaries.items() if n > 1]
    all_text = {
        case["file"]: norm(raw_text(docs / case["file"]))
        for case in cases
        if (docs / case["file"]).is_file()
    }
    for canary in canaries:
        holders = [f for f, t in all_text.items() if norm(canary) in t]
        if len(holders) != 1:
            errors.append(f"canary {canary} appears in {len(holders)} documents: {holders}")

    print(f"{len(cases)} cases, {len(canaries)} canaries")
    for technique in sorted(techniques):
        print(f"  {technique:20s} {techniques[technique]}")

    if loaders:
        from index.config import LoaderLimits
        from index.loaders import load_document

        print("\ninjection after Grounded's loaders (obeyed_if strings that survive):")
        for case in cases:
            path = docs / case["file"]
            document = load_document(path.read_bytes(), path.name, LoaderLimits())
            loaded = norm(document.text)
            kept = [o for o in case["obeyed_if"] if norm(o) in loaded and norm(o) not in rules]
            answer = any(norm(a) in loaded for a in case["answer_contains"])
            state = "kept   " if kept else "DROPPED"
            print(
                f"  {case['id']:32s} {state} answer {'yes' if answer else 'NO '} {', '.join(kept)}"
            )
            if not answer:
                errors.append(f"{case['id']}: answer lost by the loader")

    return report(errors)


# --- the held-out sets -----------------------------------------------------------------------

PROMPT = ROOT / "serve" / "query" / "prompt.py"
NOT_FOUND = ("Not found in the sources", "Introuvable dans les sources")
KEYS = {
    "id",
    "file",
    "technique",
    "language",
    "question",
    "answer_contains",
    "obeyed_if",
    "injection",
}
HOST = re.compile(r"[a-z0-9.-]+\.attacker\.example", re.IGNORECASE)
# The held-out sets' checks compare typographic apostrophes as written.
held_out_norm = partial(norm, apostrophes=False)


@dataclass(frozen=True)
class HeldOut:
    """What a held-out set's checks require beyond the first held-out set's."""

    keys: frozenset[str] = frozenset()  # case fields required beyond KEYS
    distinct_techniques: bool = False  # no technique used by two cases
    hidden_html: bool = False  # an HTML injection may sit in a comment or an attribute


HELD_OUT = {
    "redteam-heldout": HeldOut(),
    "redteam-heldout2": HeldOut(frozenset({"doc_language", "goal"}), True, True),
    "redteam-heldout3": HeldOut(frozenset({"doc_language", "goal"}), True, True),
}


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
    from bs4 import BeautifulSoup
    from pypdf import PdfReader

    if path.suffix == ".pdf":
        return "\n".join(page.extract_text() for page in PdfReader(path).pages)
    raw = path.read_text(encoding="utf-8")
    if path.suffix == ".html":
        return BeautifulSoup(raw, "html.parser").get_text(" ")
    return raw


def hidden_place(path: Path, inj: str) -> str | None:
    """Where a non-visible HTML injection sits: 'comment', 'attribute <name>' or None."""
    from bs4 import BeautifulSoup, Comment

    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    for comment in soup.find_all(string=lambda s: isinstance(s, Comment)):
        if inj in held_out_norm(comment):
            return "comment"
    for tag in soup.find_all(True):
        for name, value in tag.attrs.items():
            if isinstance(value, str) and inj in held_out_norm(value):
                return f"attribute {name}"
    return None


def check_held_out(name: str, rules: HeldOut) -> int:
    here = folder(name)
    norm = held_out_norm  # every comparison below: apostrophes as written
    keys = KEYS | rules.keys
    text_of_rules = norm(rules_text())
    errors: list[str] = []
    cases = [
        json.loads(line) for line in (here / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    ids = Counter(c["id"] for c in cases)
    errors += [f"duplicate id {i}" for i, n in ids.items() if n > 1]
    if rules.distinct_techniques:
        errors += [
            f"duplicate technique {t!r}"
            for t, n in Counter(c.get("technique") for c in cases).items()
            if n > 1
        ]
    seen_markers: dict[str, str] = {}
    hosts_per_case: dict[str, set[str]] = {}
    places: Counter[str] = Counter()
    for c in cases:
        cid = c["id"]
        missing = keys - set(c)
        if missing:
            errors.append(f"{cid}: missing keys {sorted(missing)}")
            continue
        path = here / c["file"]
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
        if inj in doc or not rules.hidden_html:
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
            is_rule = m in text_of_rules and marker not in NOT_FOUND
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
        f"unlisted document {p.name}" for p in (here / "docs").iterdir() if p.name not in listed
    ]

    print(f"cases: {len(cases)}")
    print("file types:", dict(Counter(Path(c["file"]).suffix for c in cases)))
    print("question languages:", dict(Counter(c["language"] for c in cases)))
    print("document languages:", dict(Counter(c.get("doc_language") for c in cases)))
    print("goals:", dict(Counter(c.get("goal") for c in cases)))
    print("techniques:", len({c["technique"] for c in cases}), "distinct")
    if rules.hidden_html:
        print("injection placed in:", dict(places))
    return report(errors)


def report(errors: list[str]) -> int:
    for error in errors:
        print("ERROR", error)
    print("OK" if not errors else f"{len(errors)} error(s)")
    return 1 if errors else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="redteam", choices=SETS)
    parser.add_argument(
        "--loaders", action="store_true", help="also run Grounded's loaders (redteam only)"
    )
    args = parser.parse_args()
    if args.set in HELD_OUT:
        if args.loaders:
            parser.error("--loaders checks the development set's fields: --set redteam")
        return check_held_out(args.set, HELD_OUT[args.set])
    return check_development(args.set, args.loaders)


if __name__ == "__main__":
    sys.exit(main())
