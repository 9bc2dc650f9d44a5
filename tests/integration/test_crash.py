"""Kill an ingest with SIGKILL at random moments; everything acknowledged must survive whole."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import time

import pytest

from index.config import IndexConfig
from index.service import IndexService
from index.testing import HashingEmbedder
from tests.conftest import REPO

pytestmark = pytest.mark.integration


def run_and_kill(data_dir, count: int, rng: random.Random) -> list[str]:
    """Start the worker, let it acknowledge some documents, SIGKILL it; returns the acks."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.crash_worker", str(data_dir), str(count)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    acknowledged = []
    stop_after = rng.randint(1, count // 2)
    for line in worker.stdout:
        acknowledged.append(line.split()[0])
        if len(acknowledged) >= stop_after:
            time.sleep(rng.uniform(0, 0.05))  # land anywhere: mid-batch, mid-commit, mid-save
            break
    worker.kill()
    worker.wait(timeout=30)
    acknowledged.extend(line.split()[0] for line in worker.stdout)  # read after the kill
    return acknowledged


def test_sigkill_during_ingest_loses_no_acknowledged_document(tmp_path):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    acknowledged: set[str] = set()
    for _ in range(3):  # crash, restart (re-ingesting), crash again ...
        acknowledged.update(run_and_kill(tmp_path, 400, rng))
    assert acknowledged, f"seed {seed}: the worker acknowledged nothing before the kill"

    service = IndexService(IndexConfig(), tmp_path, embedder=HashingEmbedder()).start()
    shard = service.shard("crash")
    stored = {record.doc_id: record for record in shard.list_documents()}
    missing = acknowledged - stored.keys()
    assert not missing, f"seed {seed}: acknowledged but lost: {sorted(missing)[:5]}"

    db = sqlite3.connect(shard.directory / "shard.sqlite3")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    orphans = db.execute(
        "SELECT count(*) FROM chunks WHERE doc_id NOT IN (SELECT doc_id FROM documents)"
    ).fetchone()[0]
    assert orphans == 0, f"seed {seed}: chunks without a document"
    fts = db.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
    stats = shard.stats()
    assert stats.chunks == fts == stats.vectors, f"seed {seed}: {stats} vs fts {fts}"
    assert all(record.chunk_count == 1 for record in stored.values()), f"seed {seed}"

    for doc_id in sorted(acknowledged)[:: max(1, len(acknowledged) // 25)]:
        number = stored[doc_id].file_name.removeprefix("doc").removesuffix(".txt")
        lexical = shard.search_lexical(f"marker{number}", 1)
        assert [h.doc_id for h in lexical] == [doc_id], f"seed {seed}: {doc_id} not searchable"
        vector = service.embedder.embed_queries([f"Document marker{number} body text {number}."])
        exact = [h.doc_id for h in shard.search_dense(vector, 5) if h.dense_score > 0.999]
        assert doc_id in exact, f"seed {seed}: {doc_id} not found by its own vector"
    service.close()
