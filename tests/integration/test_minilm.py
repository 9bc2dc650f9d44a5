"""The real embedder and tokenizer: where retrieval quality and token counts matter."""

import io

import numpy as np
import pytest

from index.chunking import StructureChunker
from index.config import ChunkerConfig, LoaderLimits
from index.loaders import load_document
from tests.conftest import CORPUS

pytestmark = pytest.mark.integration


def test_minilm_reports_its_shape_and_normalises(minilm):
    assert minilm.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert (minilm.dimension, minilm.max_seq_length, minilm.max_tokens) == (384, 256, 254)
    vectors = minilm.embed_documents(["The pump runs hot.", "Die Pumpe läuft heiß."])
    assert vectors.dtype == np.float32 and vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_minilm_ranks_the_relevant_passage_first(minilm):
    passages = [
        "Annual leave is 27 days per calendar year.",
        "The controller needs a 16 A circuit breaker.",
        "Badges must be worn visibly on site.",
    ]
    scores = minilm.embed_documents(passages) @ minilm.embed_queries(["How many vacation days?"])[0]
    assert int(np.argmax(scores)) == 0


@pytest.mark.parametrize("path", sorted(CORPUS.rglob("*.*")), ids=lambda p: p.name)
def test_sample_chunks_fit_the_embedder_in_its_own_tokens(minilm, path):
    chunker = StructureChunker(ChunkerConfig(size=48, overlap=8), minilm.tokenizer, 254)
    document = load_document(path.read_bytes(), path.name, LoaderLimits())
    chunks = chunker.chunk(document, tenant="t", doc_id="d", version=1)
    assert chunks
    for chunk in chunks:
        assert document.text[chunk.start : chunk.end] == chunk.text
        tokens = minilm.tokenizer.count(chunk.text)
        assert tokens == chunk.token_count <= 48
        # sentence-transformers itself would see the whole chunk (no truncation).
        assert len(minilm._model.tokenizer(chunk.text)["input_ids"]) <= minilm.max_seq_length


def test_every_chunk_of_a_spreadsheet_names_its_columns_and_rows(minilm):
    """Each row names its columns ("Model: GX-4; Capacity (kg): 44; ..."), and a block of rows
    (index/loaders/tables.py) fits the default chunk in MiniLM's own tokens: no chunk holds a
    row cut in two."""
    from openpyxl import Workbook

    from index.config import IndexConfig

    book = Workbook()
    sheet = book.active
    sheet.append(["Model", "Capacity (kg)", "Price (EUR)", "Site"])
    for i in range(300):
        sheet.append([f"GX-{i}", 40 + i, 1000.5 + i, "Lille" if i % 2 else "Lyon"])
    out = io.BytesIO()
    book.save(out)
    document = load_document(out.getvalue(), "models.xlsx", LoaderLimits())
    chunker = StructureChunker(IndexConfig().chunker, minilm.tokenizer, 254)
    chunks = chunker.chunk(document, tenant="t", doc_id="d", version=1)
    rows = [c for c in chunks if "GX-" in c.text]
    assert len(rows) > 10
    for chunk in rows:
        lines = [line for line in chunk.text.splitlines() if "GX-" in line]
        assert all(line.startswith("Model: GX-") and line.endswith(".") for line in lines)
        assert all("Site: L" in line for line in lines), chunk.text  # the last column too
        assert chunk.heading_path[0] == "Sheet" and chunk.heading_path[1].startswith("rows ")
