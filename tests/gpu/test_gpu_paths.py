"""GPU code paths, selected by config alone: fp16 CUDA embeddings and FAISS on the GPU."""

import numpy as np
import pytest

from index.config import EmbedderConfig, IndexConfig, VectorIndexConfig
from index.embedding import SentenceTransformerEmbedder
from index.pipeline import SourceFile
from index.service import IndexService
from index.store.vectors import VectorIndex

pytestmark = pytest.mark.gpu


def test_auto_device_embeds_on_cuda_in_fp16_matching_cpu():
    gpu = SentenceTransformerEmbedder(EmbedderConfig(device="auto")).start()
    cpu = SentenceTransformerEmbedder(EmbedderConfig(device="cpu")).start()
    assert gpu.device == "cuda"
    assert next(gpu._model.parameters()).dtype.itemsize == 2  # fp16
    texts = ["The pump runs hot.", "Badges must be worn on site."]
    on_gpu, on_cpu = gpu.embed_documents(texts), cpu.embed_documents(texts)
    assert on_gpu.dtype == np.float32
    assert np.allclose(np.sum(on_gpu * on_cpu, axis=1), 1.0, atol=1e-2)


@pytest.mark.parametrize("threshold", [10**9, 1000])  # exact, then IVF
def test_faiss_on_gpu_matches_cpu_and_filters_tombstones(threshold):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((5000, 64)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(5000, dtype=np.int64)
    cpu = VectorIndex.build(64, VectorIndexConfig(ivf_threshold=threshold, nprobe=64), ids, vectors)
    gpu_config = VectorIndexConfig(
        device="cuda", ivf_threshold=threshold, nprobe=64, gpu_min_vectors=0
    )
    gpu = VectorIndex.build(64, gpu_config, ids, vectors)
    queries = vectors[:20]
    assert gpu.on_gpu
    assert np.array_equal(cpu.search(queries, 5)[1][:, 0], gpu.search(queries, 5)[1][:, 0])
    gpu.remove(ids[:10])  # GPU indexes cannot remove: tombstones until compacted
    found = gpu.search(queries[:10], 5)[1]
    assert not np.isin(found, ids[:10]).any()


def test_gpu_config_runs_the_whole_pipeline(tmp_path, corpus):
    config = IndexConfig(
        embedder=EmbedderConfig(device="cuda", dtype="float16"),
        vectors=VectorIndexConfig(device="cuda", gpu_min_vectors=0),
    )
    service = IndexService(config, tmp_path).start()
    files = [SourceFile.from_path(p) for p in sorted((corpus / "acme").iterdir())]
    assert all(r.status == "added" for r in service.pipeline("acme").ingest(files))
    shard = service.shard("acme")
    hits = shard.search_dense(service.embedder.embed_queries(["wrist seals"]), 3)
    assert hits[0].file_name == "gx-4200-faq.html"
    service.close()
