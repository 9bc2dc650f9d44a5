import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from index.chunking import StructureChunker, chunk_id
from index.config import ChunkerConfig, LoaderLimits
from index.errors import ConfigError
from index.loaders.base import DocumentBuilder
from index.testing import WhitespaceTokenizer
from index.types import Document

pytestmark = pytest.mark.unit

TOKENS = WhitespaceTokenizer()


def chunker(size: int = 20, overlap: int = 5) -> StructureChunker:
    return StructureChunker(ChunkerConfig(size=size, overlap=overlap), TOKENS, max_tokens=254)


def chunk(document: Document, size: int = 20, overlap: int = 5):
    return chunker(size, overlap).chunk(document, tenant="t", doc_id="d", version=1)


def build(blocks) -> Document:
    builder = DocumentBuilder("x.md", "text/markdown", LoaderLimits())
    for text, kind, path, page in blocks:
        builder.add(text, kind, path, page)
    return builder.build()


def test_empty_document_yields_no_chunks():
    assert chunk(build([])) == []


def test_overlap_not_smaller_than_size_is_refused():
    with pytest.raises(ValidationError, match=r"overlap \(20\) must be smaller than.*size \(20\)"):
        ChunkerConfig(size=20, overlap=20)
    with pytest.raises(ValidationError):
        ChunkerConfig(size=20, overlap=25)


def test_size_above_the_embedder_maximum_is_refused():
    with pytest.raises(ConfigError, match=r"chunker\.size \(300\).*254 tokens"):
        StructureChunker(ChunkerConfig(size=300, overlap=10), TOKENS, max_tokens=254)


def test_chunks_follow_sections_and_carry_heading_and_page():
    doc = build([
        ("Title", "heading", ("Title",), 1),
        ("Intro words here.", "paragraph", ("Title",), 1),
        ("Part", "heading", ("Title", "Part"), 1),
        ("Part words here.", "paragraph", ("Title", "Part"), 1),
        ("Next page words.", "paragraph", ("Title", "Part"), 2),
    ])  # fmt: skip
    chunks = chunk(doc, size=50, overlap=0)
    assert [(c.text, c.heading_path, c.page) for c in chunks] == [
        ("Title\n\nIntro words here.", ("Title",), 1),
        ("Part\n\nPart words here.", ("Title", "Part"), 1),
        ("Next page words.", ("Title", "Part"), 2),
    ]


def test_long_paragraph_splits_at_sentences_then_tokens():
    sentence = "one two three four five six seven eight nine ten."
    doc = build([(f"{sentence} {sentence} {'w ' * 45}end.", "paragraph", (), None)])
    chunks = chunk(doc, size=12, overlap=0)
    assert chunks[0].text == sentence
    assert chunks[1].text == sentence
    assert all(TOKENS.count(c.text) <= 12 for c in chunks)
    assert chunks[-1].text.endswith("end.")


def test_chunk_ids_are_stable_and_depend_on_version():
    doc = build([("alpha beta gamma. " * 30, "paragraph", (), None)])
    first = chunker().chunk(doc, tenant="t", doc_id="d", version=1)
    again = chunker().chunk(doc, tenant="t", doc_id="d", version=1)
    assert [c.chunk_id for c in first] == [c.chunk_id for c in again]
    assert first[0].chunk_id == chunk_id("t", "d", 1, 0)
    assert chunk_id("t", "d", 2, 0) != first[0].chunk_id
    assert chunk_id("u", "d", 1, 0) != first[0].chunk_id
    assert len({c.chunk_id for c in first}) == len(first)


words = st.text(alphabet="abcdéfgh", min_size=1, max_size=8)
sentences = st.lists(words, min_size=1, max_size=25).map(lambda w: " ".join(w) + ".")
paragraphs = st.lists(sentences, min_size=1, max_size=6).map(" ".join)
blocks = st.lists(
    st.tuples(
        paragraphs,
        st.sampled_from(["paragraph", "list", "code", "heading"]),
        st.sampled_from([(), ("A",), ("A", "B")]),
        st.sampled_from([None, 1, 2]),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(blocks=blocks, size=st.integers(4, 60), overlap_share=st.floats(0, 0.9))
def test_chunker_properties(blocks, size, overlap_share):
    overlap = min(int(size * overlap_share), size - 1)
    doc = build(blocks)
    chunks = chunk(doc, size=size, overlap=overlap)
    text = doc.text

    for position, c in enumerate(chunks):
        assert c.position == position
        assert text[c.start : c.end] == c.text  # offsets map back to the text
        assert 0 < TOKENS.count(c.text) == c.token_count <= size  # size holds

    covered = [False] * len(text)
    for c in chunks:
        covered[c.start : c.end] = [True] * (c.end - c.start)
    for block in doc.blocks:  # chunks cover every non-space character of the document
        for i in range(block.start, block.end):
            assert covered[i] or text[i].isspace()

    for previous, following in itertools.pairwise(chunks):
        assert following.start > previous.start  # progress
        if following.start < previous.end:  # overlap holds
            assert TOKENS.count(text[following.start : previous.end]) <= overlap
