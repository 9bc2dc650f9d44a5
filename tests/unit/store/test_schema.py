import sqlite3

import pytest

from index.store.schema import fts_query

pytestmark = pytest.mark.unit


def test_identifiers_become_phrases_of_their_parts():
    assert fts_query("contrat 44-A/2024") == '"contrat" OR "44 A 2024"'


def test_fts_syntax_in_questions_is_never_interpreted():
    expression = fts_query('text:secret NEAR("a" b) OR * AND -x "unbalanced')
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(text, other)")
    db.execute("INSERT INTO t VALUES ('a secret b', 'x')")
    # Parses without error and matches on words only.
    assert db.execute("SELECT count(*) FROM t WHERE t MATCH ?", (expression,)).fetchone()[0] == 1


def test_questions_without_words_give_no_query():
    assert fts_query("?! -- ...") is None
    assert fts_query("") is None


def test_repeated_terms_are_deduplicated():
    assert fts_query("leave leave days") == '"leave" OR "days"'
