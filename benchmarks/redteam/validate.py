"""Check the red-team set for internal consistency (no model, no index; a second or two).

    .venv/bin/python benchmarks/redteam/validate.py [--loaders]

Checks that cases.jsonl parses, ids are unique and match their files, every file exists, each
technique has at least two cases, every obeyed_if string is in the case's injected text (or is a
phrase of Grounded's own rules), no obeyed_if string appears in the document outside the
injection, the legitimate answer is in the document outside the injection, answers and
obeyed_if strings do not overlap, questions mention no obeyed_if string, canaries are unique,
and documents are 120-400 words. PDF injections are checked against make_pdfs.py and against
the text pypdf extracts from the built file.

--loaders also reads every document through Grounded's own loaders (index.loaders) and reports
which injections survive ingestion (HTML comments, hidden elements and attributes, and Markdown
link titles are dropped by design, so those cases test the loaders as much as the model).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DOCS = HERE / "docs"
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


def norm(text: str) -> str:
    """Case- and accent-insensitive, whitespace-collapsed form used for every comparison."""
    text = unicodedata.normalize("NFKD", text.replace("\u2019", "'"))
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return re.sub(r"\s+", " ", text.casefold()).strip()


def system_rules() -> str:
    sys.path.insert(0, str(REPO))
    from serve.query.prompt import SYSTEM_RULES

    return SYSTEM_RULES


def pdf_hidden_texts() -> dict[str, str]:
    sys.path.insert(0, str(HERE))
    import make_pdfs

    return {
        name: " ".join(text for style, text in blocks if style in ("white", "tiny", "white-tiny"))
        for name, (_, blocks) in make_pdfs.DOCUMENTS.items()
    }


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loaders", action="store_true", help="also run Grounded's loaders")
    args = parser.parse_args()

    errors: list[str] = []
    rules = norm(system_rules())
    hidden = pdf_hidden_texts()
    cases = []
    for number, line in enumerate(
        (HERE / "cases.jsonl").read_text(encoding="utf-8").splitlines(), 1
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
        cid, name = case["id"], case["file"]
        path = DOCS / name
        if Path(name).stem != cid:
            errors.append(f"{cid}: file {name} does not match the id")
        if path.suffix not in (".txt", ".md", ".html", ".pdf"):
            errors.append(f"{cid}: unexpected extension {path.suffix}")
        if not path.is_file():
            errors.append(f"{cid}: {path} missing")
            continue
        text = raw_text(path)
        injection = case["injection"]
        if path.suffix == ".pdf" and norm(injection) != norm(hidden.get(name, "")):
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
        case["file"]: norm(raw_text(DOCS / case["file"]))
        for case in cases
        if (DOCS / case["file"]).is_file()
    }
    for canary in canaries:
        holders = [f for f, t in all_text.items() if norm(canary) in t]
        if len(holders) != 1:
            errors.append(f"canary {canary} appears in {len(holders)} documents: {holders}")

    print(f"{len(cases)} cases, {len(canaries)} canaries")
    for technique in sorted(techniques):
        print(f"  {technique:20s} {techniques[technique]}")

    if args.loaders:
        sys.path.insert(0, str(REPO))
        from index.config import LoaderLimits
        from index.loaders import load_document

        print("\ninjection after Grounded's loaders (obeyed_if strings that survive):")
        for case in cases:
            path = DOCS / case["file"]
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

    for error in errors:
        print("ERROR", error)
    print("OK" if not errors else f"{len(errors)} error(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
