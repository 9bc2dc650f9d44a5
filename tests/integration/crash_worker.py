"""Ingest many small documents and print each doc id as soon as its write is acknowledged.

Run by test_crash.py, which kills this process with SIGKILL at a random moment.
    python -m tests.integration.crash_worker DATA_DIR COUNT
"""

from __future__ import annotations

import sys
from pathlib import Path

from index.config import IndexConfig
from index.pipeline import SourceFile
from index.service import IndexService
from index.testing import HashingEmbedder


def main() -> None:
    data_dir, count = Path(sys.argv[1]), int(sys.argv[2])
    service = IndexService(IndexConfig(), data_dir, embedder=HashingEmbedder()).start()
    pipeline = service.pipeline("crash")
    pipeline.batch_chunks = 3  # commit often, so kills land between and inside transactions
    sources = (
        SourceFile.from_bytes(f"Document marker{i} body text {i}.".encode(), f"doc{i}.txt")
        for i in range(count)
    )
    for result in pipeline.ingest(sources):
        if result.status in ("added", "replaced", "unchanged"):
            print(result.doc_id, result.file_name, flush=True)
    service.close()


if __name__ == "__main__":
    main()
