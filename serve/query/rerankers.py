"""The rerankers (judges): two cross-encoders (sentence-transformers on a local folder, and
the fetched ONNX judge run by onnxruntime) and the generator itself, which scores a passage by
the probability it gives "yes" when asked whether the passage answers the question (one
prefill and one sampled token per passage, batched by vLLM); and the factories that build
the one a RerankConfig names.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from index.errors import ConfigError
from serve.query.generation import Generator
from serve.query.judging import RerankConfig, Reranker, yes_no_tokens, yes_probability
from serve.query.prompt import PromptBuilder

log = logging.getLogger(__name__)


class CrossEncoderReranker:
    """sentence-transformers CrossEncoder on a local folder; CUDA (fp16) when present."""

    def __init__(self, model: str, device: str = "auto", batch_size: int = 16) -> None:
        if not (Path(model) / "config.json").is_file():
            raise ConfigError(
                f"query.rerank.model {model!r} is not a local cross-encoder model folder "
                "(no config.json)",
                param="query.rerank.model",
            )
        self.model_path, self.device, self.batch_size = model, device, batch_size
        self._model = None
        self._starting = threading.Lock()  # the first questions may arrive at once

    def start(self) -> CrossEncoderReranker:
        with self._starting:
            if self._model is not None:
                return self
            import torch
            from sentence_transformers import CrossEncoder

            device = self.device
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            elif device == "cuda" and not torch.cuda.is_available():
                raise ConfigError(
                    f"query.rerank.device is cuda but torch {torch.__version__} cannot use a "
                    "GPU here; install the gpu extra on a machine with one, or set "
                    "query.rerank.device: auto",
                    param="query.rerank.device",
                )
            model = CrossEncoder(self.model_path, device=device)
            if device == "cuda":
                model.model.half()
            self._model = model
        return self

    def _predict(self, query: str, passages: Sequence[str]) -> list[float]:
        self.start()
        pairs = [(query, passage) for passage in passages]
        scores = self._model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False)
        return [float(s) for s in scores]

    async def scores(
        self, query: str, passages: Sequence[str], cache_salt: str = ""
    ) -> list[float]:
        return await asyncio.to_thread(self._predict, query, passages)


class OnnxCrossEncoderReranker:
    """A cross-encoder exported to ONNX with its ``tokenizer.json`` (the relevance judge that
    `grounded models fetch ms-marco-minilm-l12` installs), run with onnxruntime: the CUDA
    execution provider where present (onnxruntime-gpu), else the CPU. Scores are the model's
    logits (higher is more relevant). Pairs longer than ``max_tokens`` are cut on the passage
    side: ``window: start`` keeps its beginning, ``window: query`` the window of the passage
    where the question's words are densest (``query_window``). Pairs are read ``batch_size`` at
    a time, batched by length (short passages are not padded to long ones); the default is one
    at a time, because a dynamically quantized model (the fetched INT8 judge) scales each call's
    activations together, so a batched pair's score moves with its neighbours (by up to 1.6 on
    human-written questions: benchmarks/results/judge.md, "One gate per question") and a gate on
    it would depend on them."""

    def __init__(
        self,
        folder: str,
        device: str = "auto",
        batch_size: int = 1,
        max_tokens: int = 256,
        window: Literal["start", "query"] = "start",
    ) -> None:
        self.folder, self.device = Path(folder), device
        self.batch_size, self.max_tokens, self.window = batch_size, max_tokens, window
        self._session = None
        self._tokenizer = None
        self._starting = threading.Lock()  # the first questions may arrive at once

    def start(self) -> OnnxCrossEncoderReranker:
        with self._starting:
            if self._session is not None:
                return self
            import onnxruntime
            from tokenizers import Tokenizer

            available = onnxruntime.get_available_providers()
            providers = ["CPUExecutionProvider"]
            if self.device != "cpu" and "CUDAExecutionProvider" in available:
                providers.insert(0, "CUDAExecutionProvider")
                # onnxruntime-gpu finds CUDA and cuDNN in the nvidia-* packages (PyTorch's) only
                # when preloaded (its documentation, "Install ONNX Runtime", CUDA); >= 1.21.
                if hasattr(onnxruntime, "preload_dlls"):
                    onnxruntime.preload_dlls()
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 3  # INT8 graphs warn about unused initialisers
            session = onnxruntime.InferenceSession(
                str(self.folder / "model.onnx"), options, providers=providers
            )
            self._check_device(session, available)
            self._inputs = {i.name for i in session.get_inputs()}
            tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
            tokenizer.no_padding()  # the shipped tokenizer.json pads every pair to 512
            tokenizer.no_truncation()
            self._plain = Tokenizer.from_str(tokenizer.to_str())  # for windows: whole texts
            tokenizer.enable_truncation(self.max_tokens, strategy="only_second")
            self._tokenizer, self._session = tokenizer, session
        return self

    def _check_device(self, session, available: list[str]) -> None:
        """``device: cuda`` without CUDA is refused; ``auto`` falling back to the CPU says so
        (onnxruntime's own warning is silenced above with the rest of its log)."""
        used = session.get_providers()
        if "CUDAExecutionProvider" in used:
            return
        if self.device == "cuda":
            raise ConfigError(
                f"query.rerank.device is cuda but onnxruntime cannot use CUDA here (available "
                f"providers: {', '.join(available)}); install onnxruntime-gpu for this CUDA "
                "runtime, or set query.rerank.device: auto",
                param="query.rerank.device",
            )
        if self.device == "auto" and "CUDAExecutionProvider" in available:
            log.warning("the relevance judge runs on the CPU: onnxruntime's CUDA provider failed")

    def _predict(self, query: str, passages: Sequence[str]) -> list[float]:
        import numpy as np

        self.start()
        if self.window == "query":
            passages = self._query_windows(query, passages)
        encoded = self._tokenizer.encode_batch([(query, p) for p in passages])
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
        scores = [0.0] * len(encoded)
        for at in range(0, len(order), self.batch_size):
            batch = order[at : at + self.batch_size]
            width = max(len(encoded[i].ids) for i in batch)
            arrays = {name: np.zeros((len(batch), width), dtype=np.int64)
                      for name in ("input_ids", "attention_mask", "token_type_ids")}  # fmt: skip
            for row, i in enumerate(batch):
                e = encoded[i]
                arrays["input_ids"][row, : len(e.ids)] = e.ids
                arrays["attention_mask"][row, : len(e.ids)] = e.attention_mask
                arrays["token_type_ids"][row, : len(e.ids)] = e.type_ids
            feed = {name: array for name, array in arrays.items() if name in self._inputs}
            [logits] = self._session.run(None, feed)
            for row, i in enumerate(batch):
                scores[i] = float(logits[row][0])
        return scores

    def _query_windows(self, query: str, passages: Sequence[str]) -> list[str]:
        """Each passage that would be cut, cut instead to the window ``query_window`` picks."""
        question = self._plain.encode(query, add_special_tokens=False).ids
        room = self.max_tokens - len(question) - 3  # [CLS] q [SEP] p [SEP]
        encoded = self._plain.encode_batch(list(passages), add_special_tokens=False)
        weights = query_weights(question, [e.ids for e in encoded])
        windows = []
        for passage, e in zip(passages, encoded, strict=True):
            if room <= 0 or len(e.ids) <= room:
                windows.append(passage)
                continue
            start = query_window(e.ids, weights, room)
            windows.append(passage[e.offsets[start][0] : e.offsets[start + room - 1][1]])
        return windows

    async def scores(
        self, query: str, passages: Sequence[str], cache_salt: str = ""
    ) -> list[float]:
        return await asyncio.to_thread(self._predict, query, passages)


def query_weights(question: Sequence[int], passages: Sequence[Sequence[int]]) -> dict[int, float]:
    """Weight of each question token: rarer among the candidate passages is more telling
    (BM25's inverse document frequency over the candidates: "the" or "de", found in all 20,
    weigh almost nothing; a word found in one weighs most; never zero or negative)."""
    n, found = len(passages), [set(p) for p in passages]
    df = {t: sum(t in f for f in found) for t in set(question)}
    return {t: math.log((n - d + 0.5) / (d + 0.5) + 1) for t, d in df.items()}


def query_window(tokens: Sequence[int], weights: dict[int, float], size: int) -> int:
    """The start of the ``size``-token window of ``tokens`` with the most question weight,
    moved so that its question tokens sit in its middle (context on both sides); 0 when no
    question token occurs."""
    gains = [weights.get(t, 0.0) for t in tokens]
    best = current = sum(gains[:size])
    start = 0
    for at in range(1, len(tokens) - size + 1):
        current += gains[at + size - 1] - gains[at - 1]
        if current > best + 1e-9:
            best, start = current, at
    found = [i for i in range(start, min(start + size, len(tokens))) if gains[i] > 0]
    if not found:
        return 0
    centred = (found[0] + found[-1]) // 2 - size // 2
    # Centring never pushes a match out: the window keeps found[0] .. found[-1].
    centred = max(found[-1] - size + 1, min(centred, found[0]))
    return max(0, min(centred, len(tokens) - size))


def cross_encoder(
    model: str,
    device: str = "auto",
    batch_size: int | None = None,
    max_tokens: int = 256,
    window: Literal["start", "query"] = "start",
) -> CrossEncoderReranker | OnnxCrossEncoderReranker:
    """The cross-encoder in a local folder: ONNX (model.onnx + tokenizer.json, such as the
    fetched judge) or a sentence-transformers CrossEncoder folder (config.json, such as
    bge-reranker-v2-m3). ``batch_size`` None: each backend's default."""
    folder = Path(model)
    if (folder / "model.onnx").is_file() and (folder / "tokenizer.json").is_file():
        return OnnxCrossEncoderReranker(model, device, batch_size or 1, max_tokens, window)
    if (folder / "config.json").is_file():
        return CrossEncoderReranker(model, device, batch_size or 16)
    org, hub, name = folder.name.partition("--")  # a hub folder: Org--Name
    fetch = f"hf:{org}/{name}" if hub else "ms-marco-minilm-l12"
    raise ConfigError(
        f"query.rerank.model {model!r} is not a cross-encoder model folder (neither "
        "model.onnx with tokenizer.json nor a sentence-transformers config.json); "
        f"`grounded models fetch {fetch}` installs it"
        + ("" if hub else ", then set query.rerank.model: ms-marco-minilm-l12"),
        param="query.rerank.model",
    )


JUDGE_SYSTEM = "You judge search results. Reply with one word: yes or no."
JUDGE_USER = (
    "Question: {question}\n\nPassage:\n<passage>\n{passage}\n</passage>\n\n"
    "Does the passage contain information that answers the question? Reply yes or no."
)


class GeneratorReranker:
    """Relevance = P(yes) / (P(yes) + P(no)) for the generator's first answer token."""

    def __init__(self, generator: Generator) -> None:
        self.generator = generator
        self._choices: tuple[frozenset[int], frozenset[int]] | None = None

    def choices(self) -> tuple[frozenset[int], frozenset[int]]:
        if self._choices is None:
            self._choices = yes_no_tokens(self.generator)
        return self._choices

    def prompt(self, question: str, passage: str) -> list[int]:
        """The judgement's prompt tokens."""
        escape = PromptBuilder(self.generator.special_tokens).escape
        return self.generator.render([
            {"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": JUDGE_USER.format(question=escape(question),
                                                          passage=escape(passage))},
        ])  # fmt: skip

    async def _score(self, question: str, passage: str, cache_salt: str) -> float:
        return await yes_probability(
            self.generator, self.prompt(question, passage), self.choices(), cache_salt
        )

    async def scores(self, query: str, passages: Sequence[str], cache_salt: str) -> list[float]:
        return list(await asyncio.gather(*(self._score(query, p, cache_salt) for p in passages)))


def build_reranker(config: RerankConfig, generator: Generator) -> Reranker | None:
    if config.backend == "none":
        return None
    if config.backend == "generator":
        return GeneratorReranker(generator)
    if not config.model:
        raise ConfigError(
            "query.rerank.backend is 'cross-encoder' but query.rerank.model is not set: "
            "give the path of a local cross-encoder model folder",
            param="query.rerank.model",
        )
    return judge(config)


def judge(config: RerankConfig) -> CrossEncoderReranker | OnnxCrossEncoderReranker:
    """The cross-encoder ``config`` describes (not started)."""
    return cross_encoder(config.model, config.device, config.batch_size, config.max_tokens,
                         config.window)  # fmt: skip
