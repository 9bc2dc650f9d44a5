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


def test_onnx_on_cuda_preloads_cudas_libraries_then_refuses_a_provider_that_cannot_run(
    tmp_path, monkeypatch
):
    """onnxruntime-gpu is told to load CUDA and cuDNN from PyTorch's nvidia packages before its
    session starts (its documentation asks for preload_dlls); a CUDA provider that still falls
    back to the CPU is refused for device: cuda."""
    import onnxruntime

    from index.errors import ConfigError
    from serve.query.rerankers import OnnxCrossEncoderReranker

    calls = []

    class Session:
        def __init__(self, path, options, providers):
            calls.append(("session", tuple(providers)))

        def get_providers(self):
            return ["CPUExecutionProvider"]  # CUDA asked for, and it could not run

    monkeypatch.setattr(onnxruntime, "get_available_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])  # fmt: skip
    monkeypatch.setattr(onnxruntime, "preload_dlls", lambda: calls.append(("preload",)),
                        raising=False)  # fmt: skip
    monkeypatch.setattr(onnxruntime, "InferenceSession", Session)
    judge = OnnxCrossEncoderReranker(str(tmp_path), device="cuda")
    with pytest.raises(ConfigError, match=r"query\.rerank\.device is cuda but onnxruntime"):
        judge.start()
    assert calls == [("preload",),
                     ("session", ("CUDAExecutionProvider", "CPUExecutionProvider"))]  # fmt: skip


def test_a_judge_from_the_hub_is_its_fetched_folder_or_says_how_to_fetch_it(tmp_path):
    from index.errors import ConfigError
    from serve.config import load_config
    from serve.query.rerankers import cross_encoder

    judge = {"backend": "cross-encoder", "model": "hf:cross-encoder/ms-marco-MiniLM-L12-v2"}
    config = load_config(None, data_dir=tmp_path, query={"rerank": judge})
    folder = tmp_path / "models" / "cross-encoder--ms-marco-MiniLM-L12-v2"
    assert config.query.rerank.model == str(folder)
    with pytest.raises(ConfigError, match=r"grounded models fetch hf:cross-encoder/ms-marco"):
        cross_encoder(config.query.rerank.model)
    with pytest.raises(ConfigError, match="not a Hugging Face model reference"):
        load_config(None, query={"rerank": {"model": "hf:nonsense"}})
