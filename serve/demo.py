"""`make demo`: ingest the bundled sample corpus for two tenants and search each of them.

Shows per-tenant isolation: the same question asked by both tenants is answered only from the
asking tenant's documents.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from index.pipeline import discover
from index.service import IndexService
from serve.config import load_config
from serve.query.retrieval import retrieve

CORPUS = Path(__file__).resolve().parent.parent / "samples" / "corpus"
QUESTIONS = {
    "acme": [
        "How many days of annual leave do employees get?",
        "Which power supply does the GX-4200 controller need?",
        "Combien de jours de télétravail par semaine ?",
        "E-310",
    ],
    "globex": [
        "How many days of annual leave do employees get?",
        "Quel est le délai d'intervention pour une panne de quai ?",
        "44-A/2024",
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, default=Path("data/demo"))
    parser.add_argument("--config", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.basicConfig(level=logging.WARNING)

    config = load_config(args.config, data_dir=args.data_dir)
    service = IndexService(config.index, config.data_dir).start()
    print(f"data directory: {config.data_dir}  embedder: {service.embedder.model_id}\n")
    try:
        for tenant in QUESTIONS:
            files, _ = discover([CORPUS / tenant])
            print(f"== ingest {len(files)} files into tenant {tenant!r}")
            for result in service.pipeline(tenant).ingest(files):
                print(f"   {result.status:<9} {result.file_name} ({result.chunks} chunks)")
        for tenant, questions in QUESTIONS.items():
            print(f"\n== search as tenant {tenant!r} (hybrid: dense + BM25, fused by RRF)")
            for question in questions:
                print(f"\n?  {question}")
                for rank, (hit, _score) in enumerate(
                    retrieve(service.shard(tenant), service.embedder, question, 2), start=1
                ):
                    where = " > ".join(hit.heading_path) or "-"
                    page = f" p.{hit.page}" if hit.page else ""
                    snippet = " ".join(hit.text.split())[:160]
                    print(f"   {rank}. [{hit.file_name}{page} | {where}] {snippet}")
    finally:
        service.close()
    print(
        "\nTry it yourself:\n  .venv/bin/grounded --data-dir",
        config.data_dir,
        'search --tenant acme "wrist seals"',
    )


if __name__ == "__main__":
    main()
