"""Tables as the model and the judge read them (serve/query/rows.py)."""

import asyncio
from dataclasses import replace

import pytest

from index.types import SearchHit
from serve.query.prompt import PromptBuilder, Source, source_text
from serve.query.quotes import QuotedReply, quotable_sentences, verify_quote
from serve.query.rerank import rerank
from serve.query.rows import as_named_rows, row_views

pytestmark = pytest.mark.unit

TABLE = """Models available in 2027.

| Model | Capacity (kg) | Price (EUR) |
| --- | --- | --- |
| GX-58 | 61 | 7,195 |
| GX-61 | 356 | 2,432 |
| GX-64 | | 2,240 |

Prices exclude VAT."""
NAMED = """Models available in 2027.

Model: GX-58; Capacity (kg): 61; Price (EUR): 7,195.
Model: GX-61; Capacity (kg): 356; Price (EUR): 2,432.
Model: GX-64; Price (EUR): 2,240.

Prices exclude VAT."""


def hit(text: str, number: int = 1) -> SearchHit:
    return SearchHit(chunk_id=f"c{number}", doc_id=f"d{number}", file_name="prices.pdf",
                     text=text, start=0, end=len(text), heading_path=(), page=1)  # fmt: skip


def test_a_markdown_table_reads_as_rows_that_name_their_values():
    assert as_named_rows(TABLE) == NAMED
    assert row_views(TABLE) == NAMED.split("\n")[2:5]


def test_text_without_a_table_is_unchanged_and_has_no_row_views():
    prose = "Leave: 27 days; carried over: 5.\nThe pump | the filter | the oil.\n| not a table |"
    assert as_named_rows(prose) == prose
    assert row_views("The price: 5. And more: here.") == []


def test_sheet_rows_that_name_their_columns_are_row_views_as_they_are():
    rows = "SKU: S-1; Item: box; Quantity: 5.\nSKU: S-2; Item: tape; Quantity: 7."
    assert as_named_rows(rows) == rows and row_views(rows) == rows.split("\n")


def test_the_prompt_shows_named_rows_and_a_quote_of_one_is_verified():
    source = Source(1, hit(TABLE))
    block = PromptBuilder([]).source_block(source)
    assert "Model: GX-61; Capacity (kg): 356; Price (EUR): 2,432." in block
    assert "| --- |" not in block
    quote = "Model: GX-61; Capacity (kg): 356; Price (EUR): 2,432."
    assert quote in quotable_sentences(source)
    assert verify_quote(QuotedReply(1, quote, "2,432 EUR"), [source])
    wrong = QuotedReply(1, "Model: GX-58; Capacity (kg): 61; Price (EUR): 7,195.", "2,432")
    assert not verify_quote(wrong, [source])  # the answer's number is not in the quoted row


class WordJudge:
    """Scores a passage by the share of the query's words in it (a stand-in cross-encoder)."""

    def __init__(self):
        self.read: list[str] = []

    async def scores(self, query, passages, cache_salt):
        self.read += passages
        words = set(query.lower().replace("?", "").split())
        return [len(words & set(p.lower().replace(";", " ").split())) / len(p.split())
                for p in passages]  # fmt: skip


def test_the_judge_scores_a_table_passage_by_its_best_row():
    judge = WordJudge()
    prose = hit("The GX-61 is our most popular model, and its price is fair for all.", 2)
    ranked = asyncio.run(rerank(judge, "price of GX-61", [prose, hit(TABLE)], 2, ""))
    assert [h.chunk_id for h in ranked] == ["c1", "c2"]  # the row alone outscores the prose
    assert "Model: GX-61; Capacity (kg): 356; Price (EUR): 2,432." in judge.read


def test_the_prompt_shows_only_the_rows_the_judge_chose():
    best = ("Model: GX-61; Capacity (kg): 356; Price (EUR): 2,432.",)
    shown = source_text(replace(hit(TABLE), rows=best))
    assert shown == "Models available in 2027.\n\n" + best[0] + "\n\nPrices exclude VAT."
    sheet = "SKU: S-1; Item: box; Quantity: 5.\nSKU: S-2; Item: tape; Quantity: 7."
    assert source_text(replace(hit(sheet), rows=("SKU: S-2; Item: tape; Quantity: 7.",))) == (
        "SKU: S-2; Item: tape; Quantity: 7."
    )


def test_the_judge_keeps_a_table_passages_best_rows_for_the_prompt():
    (ranked,) = asyncio.run(rerank(WordJudge(), "price of GX-61", [hit(TABLE)], 1, ""))
    assert ranked.rows[0] == "Model: GX-61; Capacity (kg): 356; Price (EUR): 2,432."
    assert len(ranked.rows) == 3 and "Models available" not in " ".join(ranked.rows)


class RowJudge:
    """Scores what it is told to: a row naming one of ``scores``' models gets that score."""

    def __init__(self, by_model):
        self.by_model = by_model

    async def scores(self, query, passages, cache_salt):
        return [next((s for m, s in self.by_model.items() if f"Model: {m};" in p), 0.0)
                for p in passages]  # fmt: skip


def test_rows_far_below_the_best_row_are_not_shown_nor_their_passage():
    other = "| Model | Price (EUR) |\n| --- | --- |\n| GX-25 | 100 |\n| GX-28 | 200 |"
    judge = RowJudge({"GX-61": 8.0, "GX-58": 7.5, "GX-64": 1.0, "GX-25": 6.5, "GX-28": 5.0})
    ranked = asyncio.run(rerank(judge, "price of GX-61", [hit(TABLE), hit(other, 2)], 2, ""))
    assert [h.chunk_id for h in ranked] == ["c1"]  # GX-25 is 1.5 under GX-61: not a source
    assert ranked[0].rows == ("Model: GX-61; Capacity (kg): 356; Price (EUR): 2,432.",
                              "Model: GX-58; Capacity (kg): 61; Price (EUR): 7,195.")  # fmt: skip
    prose = hit("Prices exclude VAT for every model.", 3)
    ranked = asyncio.run(rerank(judge, "price of GX-61", [prose], 1, ""))
    assert ranked[0].rows is None  # a passage without rows is shown whole
