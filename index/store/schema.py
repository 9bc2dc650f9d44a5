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
    loader_version TEXT NOT NULL DEFAULT '', -- index.loaders.LOADER_VERSION that read the text
    access       TEXT,                   -- JSON: principals who may read it; NULL: the tenant
    owner        TEXT,                   -- who created it (index/access.py); NULL: an operator
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
-- Files uploaded through the API (index/store/uploads.py): an upload is kept here from the
-- moment it is received until its ingestion ends (which may outlast the request and a restart);
-- a refused one stays with its reason. Ingested, its bytes move to originals, which
-- GET /v1/files/{id}/content returns.
CREATE TABLE IF NOT EXISTS uploads (
    doc_id     TEXT PRIMARY KEY,               -- the file id, as the document will have it
    file_name  TEXT NOT NULL,
    data       BLOB NOT NULL,                  -- the bytes as uploaded
    status     TEXT NOT NULL CHECK (status IN ('in_progress', 'error')),
    error      TEXT,                           -- why ingestion refused the file or failed
    created_at INTEGER NOT NULL,
    access     TEXT,                           -- JSON: its readers; NULL: keep (index/access.py)
    owner      TEXT                            -- who uploaded it (index/access.py)
);
CREATE TABLE IF NOT EXISTS originals (
    doc_id     TEXT PRIMARY KEY REFERENCES documents(doc_id) ON DELETE CASCADE,
    file_name  TEXT NOT NULL,
    data       BLOB NOT NULL
);
-- Vector stores: named sets of this tenant's documents (index/store/collections.py). Lists are
-- in rowid order; times are Unix seconds. Deleting a document or a store removes memberships.
CREATE TABLE IF NOT EXISTS vector_stores (
    id             TEXT PRIMARY KEY,            -- vs_<24 hex>
    name           TEXT NOT NULL,
    metadata       TEXT NOT NULL DEFAULT '{}',  -- JSON: up to 16 str -> str
    expires_after  TEXT,                        -- JSON {"anchor": "last_active_at", "days": N}
    created_at     INTEGER NOT NULL,
    last_active_at INTEGER NOT NULL,
    owner          TEXT                         -- who created it; NULL: changed by admins only
);
CREATE TABLE IF NOT EXISTS vector_store_batches (
    id         TEXT PRIMARY KEY,                -- vsfb_<24 hex>
    store_id   TEXT NOT NULL REFERENCES vector_stores(id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('in_progress', 'completed', 'failed', 'cancelled'))
);
-- doc_id is a document, or an upload still being ingested (in_progress) or refused (failed):
-- no foreign key, so TenantShard.delete_document removes a deleted file's memberships itself.
CREATE TABLE IF NOT EXISTS vector_store_files (
    store_id          TEXT NOT NULL REFERENCES vector_stores(id) ON DELETE CASCADE,
    doc_id            TEXT NOT NULL,
    attributes        TEXT NOT NULL DEFAULT '{}',  -- JSON: up to 16 str -> str | number | bool
    chunking_strategy TEXT NOT NULL,               -- JSON, as requested (recorded, not applied)
    status            TEXT NOT NULL
                      CHECK (status IN ('in_progress', 'completed', 'failed', 'cancelled')),
    last_error        TEXT,                        -- JSON {"code", "message"} or NULL
    batch_id          TEXT REFERENCES vector_store_batches(id) ON DELETE SET NULL,
    created_at        INTEGER NOT NULL,
    PRIMARY KEY (store_id, doc_id)
);
CREATE INDEX IF NOT EXISTS vector_store_files_by_doc ON vector_store_files(doc_id);
-- Creates sent with an Idempotency-Key (a client's retry): what the first one made, per owner,
-- kept a day (index/store/collection_rows.py).
CREATE TABLE IF NOT EXISTS idempotent_creates (
    owner      TEXT NOT NULL,
    key        TEXT NOT NULL,
    object_id  TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (owner, key)
);
CREATE INDEX IF NOT EXISTS vector_store_files_by_batch ON vector_store_files(batch_id);
CREATE INDEX IF NOT EXISTS vector_store_batches_by_store ON vector_store_batches(store_id);
-- Sources (index/sources/): where some of the tenant's documents live, kept in step by runs;
-- source_files holds what each file last was at the source and which document it is.
CREATE TABLE IF NOT EXISTS sources (
    name       TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,                  -- folder, webdav, s3
    location   TEXT NOT NULL,                  -- the folder's path, or the URL
    access     TEXT NOT NULL,                  -- JSON: rules by path glob, and the default
    every_s    REAL,                           -- how often it runs (NULL: on demand only)
    created_at INTEGER NOT NULL,
    last_run   TEXT,                           -- JSON: the last run's counts, times, error
    running    TEXT                            -- JSON: the run under way (its process, when)
);
CREATE TABLE IF NOT EXISTS source_files (
    source   TEXT NOT NULL REFERENCES sources(name) ON DELETE CASCADE,
    path     TEXT NOT NULL,                    -- below the source's root, '/'-separated
    size     INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    version  TEXT NOT NULL DEFAULT '',         -- the source's ETag ('' where it has none)
    sha256   TEXT NOT NULL,
    doc_id   TEXT NOT NULL,                    -- the document it is (NULL never: see error)
    access   TEXT,                             -- JSON: the readers its rules gave; NULL tenant
    error    TEXT,                             -- why it was refused (retried once it changes)
    PRIMARY KEY (source, path)
);
CREATE INDEX IF NOT EXISTS source_files_by_hash ON source_files(source, sha256);
CREATE INDEX IF NOT EXISTS source_files_by_doc ON source_files(source, doc_id);
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
