import numpy as np
import pytest

from index.config import EmbedderConfig
from index.embedding import SentenceTransformerEmbedder, prompts, resolve_model, validate_vectors
from index.errors import ConfigError, DimensionMismatchError
from index.testing import HashingEmbedder

pytestmark = pytest.mark.unit


def test_wrong_dimension_is_refused_with_both_shapes():
    with pytest.raises(DimensionMismatchError, match=r"shape \(2, 8\), expected \(n, 4\)"):
        validate_vectors(np.ones((2, 8)), 4)


def test_non_finite_vectors_are_refused():
    with pytest.raises(DimensionMismatchError, match="NaN"):
        validate_vectors(np.array([[np.nan, 1.0]]), 2)


def test_vectors_become_contiguous_float32_rows():
    out = validate_vectors(np.ones(4, dtype=np.float64), 4)
    assert out.dtype == np.float32 and out.shape == (1, 4) and out.flags.c_contiguous


def test_unknown_model_folder_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"neither .*grounded models fetch") as caught:
        resolve_model(str(tmp_path / "nope"))
    assert caught.value.param == "index.embedder.model"


@pytest.mark.parametrize(
    ("configured", "declared", "expected"),
    [
        ({}, {}, ("", "")),  # MiniLM: no prompts
        ({}, {"query": "query: ", "passage": "passage: "}, ("query: ", "passage: ")),  # e5
        ({}, {"query": "q: ", "document": "d: ", "passage": "p: "}, ("q: ", "d: ")),
        ({"query_prefix": "Q ", "document_prefix": "D "}, {"query": "query: "}, ("Q ", "D ")),
    ],
)
def test_prompts_come_from_the_config_else_the_model_folder(configured, declared, expected):
    assert prompts(EmbedderConfig(**configured), declared) == expected


def test_constructor_is_cheap_and_loads_nothing():
    embedder = SentenceTransformerEmbedder(EmbedderConfig())
    assert not embedder.health() and embedder.dimension == 0


def test_fake_embedder_is_deterministic_and_normalised():
    fake = HashingEmbedder()
    first, second = fake.embed_documents(["a b c", "x"]), fake.embed_documents(["a b c", "x"])
    assert np.array_equal(first, second)
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0)
