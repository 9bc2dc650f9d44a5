"""docs/layout.md names every module of the two product packages, and nothing that is not
there; the layout's size budgets (issue 64) hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def modules() -> set[str]:
    return {str(p.relative_to(ROOT)) for package in ("index", "serve")
            for p in (ROOT / package).rglob("*.py")}  # fmt: skip


def test_docs_layout_lists_exactly_the_modules_of_the_tree():
    documented = set(re.findall(r"^\| `((?:index|serve)/[^`]+\.py)` \|", (
        ROOT / "docs" / "layout.md").read_text(), flags=re.M))  # fmt: skip
    assert sorted(modules() - documented) == [], "modules docs/layout.md does not describe"
    assert sorted(documented - modules()) == [], "docs/layout.md names modules that are gone"


def test_modules_stay_small_and_serve_keeps_its_stages_in_folders():
    sizes = {m: len((ROOT / m).read_text().splitlines()) for m in modules()}
    assert {m: n for m, n in sizes.items() if n > 460} == {}
    assert sizes["serve/deployments/shards.py"] <= 100
    top = [p.name for p in (ROOT / "serve").glob("*.py")]
    assert len(top) < 10, top


def test_routes_translate_and_never_decide_who_reads_what():
    """Access is decided below the routes (serve/shards/host.py, the catalog's SQL): a route
    that imported index.access would be deciding it again."""
    for route in (ROOT / "serve" / "http" / "routes").glob("*.py"):
        text = route.read_text()
        assert "index.access" not in text.replace("(index/access.py)", ""), route.name
        assert "may_read" not in text and "may_write" not in text, route.name
