"""SQLite schema of a tenant shard (the source of truth) and the lexical query builder."""

from __future__ import annotations

import re

SCHEMA_VERSION = "1"

SCHEMA = """
CREATE TABLE IF NOT EXISTS manifest (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    doc_id       TEXT PRIMARY KEY,
    source       TEXT NOT NULL,
    file_name    TEXT NOT NULL,
    media_type   TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    version      INTEGER NOT NULL,
    text         TEXT NOT NULL,
    blocks       TEXT NOT NULL,          -- JSON: [[start, end, kind, heading_path, page], ...]
    byte_count   INTEGER NOT NULL,
    page_count   INTEGER,
    attributes   TEXT NOT NULL DEFAULT '{}',
    flags        TEXT NOT NULL DEFAULT '[]', -- JSON: [[start, end, reason], ...] instruction-like
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,  -- the FAISS id, never reused
    chunk_id     TEXT NOT NULL UNIQUE,
    doc_id       TEXT NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
    version      INTEGER NOT NULL,
    position     INTEGER NOT NULL,
    start        INTEGER NOT NULL,
    end          INTEGER NOT NULL,
    heading_path TEXT NOT NULL,          -- JSON list
    context      TEXT NOT NULL,          -- file name and headings, for lexical search
    page         INTEGER,
    text         TEXT NOT NULL,
    token_count  INTEGER NOT NULL,
    embedding    BLOB NOT NULL           -- float32, L2-normalised
);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks(doc_id, position);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, context, content='chunks', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, text, context) VALUES (new.id, new.text, new.context);
END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text, context)
    VALUES ('delete', old.id, old.text, old.context);
END;
"""

# Column weights for bm25(): body text counts twice the file name and headings.
BM25_WEIGHTS = (1.0, 0.5)

_TERM = re.compile(r"\S+")
_WORD = re.compile(r"\w+")


def fts_query(text: str) -> str | None:
    """A safe FTS5 MATCH expression for free text, or None when it has no searchable word.

    Each whitespace-separated term becomes a quoted phrase of its word parts, so an identifier
    such as ``44-A/2024`` must match as ``44 a 2024`` in sequence, and no FTS5 syntax in the
    question (quotes, NEAR, column filters, ``*``) is ever interpreted. Terms are OR-ed: BM25
    ranks chunks that hold more (and rarer) terms first.
    """
    phrases = []
    for term in _TERM.findall(text):
        words = _WORD.findall(term)
        if words:
            phrases.append('"' + " ".join(words) + '"')
    return " OR ".join(dict.fromkeys(phrases)) or None
