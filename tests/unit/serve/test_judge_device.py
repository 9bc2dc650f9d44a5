"""Where the relevance judge runs: a configured device is honoured or refused."""

import pytest

pytestmark = pytest.mark.unit


def test_a_sentence_transformers_judge_on_cuda_without_a_gpu_is_refused(tmp_path):
    """device: cuda is a promise: without a GPU the judge is refused at start with the reason,
    not run on the CPU behind the operator's back (auto falls back)."""
    import torch

    from index.errors import ConfigError
    from serve.query.rerankers import CrossEncoderReranker, cross_encoder

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    (tmp_path / "config.json").write_text("{}")
    judge = cross_encoder(str(tmp_path), device="cuda")
    assert isinstance(judge, CrossEncoderReranker)
    with pytest.raises(ConfigError, match=r"query\.rerank\.device is cuda but torch"):
        judge.start()
