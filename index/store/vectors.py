"""The FAISS side of a shard: derived from SQLite, rebuildable, written atomically.

Exact search (IndexIDMap2 over IndexFlatIP) while small; past ``ivf_threshold`` vectors it is
retrained as IVF with nlist from the size. Vectors are L2-normalised, so inner product is cosine.
On ``device: cuda`` a GPU copy answers searches once a shard holds ``gpu_min_vectors``; GPU
indexes cannot remove ids, so deletes there are tombstones filtered at search time until the
copy is rebuilt (compacted). All GPU copies of a process share one StandardGpuResources with
bounded scratch memory, on the process's first visible GPU: the one Ray assigned to the replica
(Ray sets CUDA_VISIBLE_DEVICES), which is why ``device: cuda`` requires the Shards deployment to
ask Ray for a GPU (serve/deployments/resources.py checks it).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import weakref
from pathlib import Path

import numpy as np

from index.config import VectorIndexConfig
from index.durable import install
from index.errors import ConfigError

log = logging.getLogger(__name__)

MIN_POINTS_PER_CENTROID = 39  # FAISS warns (and clusters poorly) below this
MAX_TRAINING_POINTS_PER_CENTROID = 256
_TOMBSTONE_COMPACT_RATIO = 0.1
# FAISS GPU indexes return at most this many neighbours per query (GPU_MAX_SELECTION_K).
GPU_MAX_K = 2048
# Tombstones are fetched on top of k, so they are compacted well before k + tombstones nears
# GPU_MAX_K: a search for up to GPU_MAX_K - _GPU_MAX_TOMBSTONES results never needs the CPU.
_GPU_MAX_TOMBSTONES = 1024

_gpu_resources = None
# FAISS GPU indexes are not thread-safe, not even for searches, and every GPU copy of a process
# shares one StandardGpuResources (its stream and scratch memory). The shard's own lock covers
# one tenant only: every call on a GPU index holds this one, so two tenants' searches never
# run on the GPU at once.
_GPU_LOCK = threading.Lock()
# Bytes each live GPU copy holds, by its index's token: within vectors.gpu_memory_mb together.
_gpu_held: dict[int, int] = {}
_tokens = itertools.count()


def gpu_bytes_held() -> int:
    return sum(list(_gpu_held.values()))


def gpu_resources(temp_memory_mb: int):
    """The process's one StandardGpuResources. Each one reserves scratch memory on the GPU
    (about 1.5 GiB by default), so one per tenant index exhausts a GPU after some 20 tenants;
    shared, with bounded scratch, it costs ``temp_memory_mb`` once."""
    global _gpu_resources
    if _gpu_resources is None:
        import faiss

        if not hasattr(faiss, "StandardGpuResources"):
            raise ConfigError(
                "vectors.device is 'cuda' but this FAISS build has no GPU support; "
                "install the gpu extra (faiss-gpu) or set vectors.device: cpu",
                param="vectors.device",
            )
        resources = faiss.StandardGpuResources()
        resources.setTempMemory(temp_memory_mb * 2**20)
        _gpu_resources = resources
    return _gpu_resources


def ivf_nlist(count: int) -> int:
    """Number of IVF lists for ``count`` vectors: about 4*sqrt(n), with enough training points."""
    return max(1, min(int(4 * math.sqrt(count)), count // MIN_POINTS_PER_CENTROID))


class VectorIndex:
    """Chunk row ids -> vectors, searchable by inner product."""

    def __init__(self, dimension: int, config: VectorIndexConfig, index=None) -> None:
        import faiss

        self.dimension = dimension
        self.config = config
        self._index = index if index is not None else self._exact()
        self._gpu = None
        self._tombstones: set[int] = set()
        self._faiss = faiss
        self._token = next(_tokens)
        # An index replaced or closed frees its GPU copy with it: forget its bytes then.
        weakref.finalize(self, _gpu_held.pop, self._token, None)

    def _exact(self):
        import faiss

        return faiss.IndexIDMap2(faiss.IndexFlatIP(self.dimension))

    @classmethod
    def build(
        cls, dimension: int, config: VectorIndexConfig, ids: np.ndarray, vectors: np.ndarray
    ) -> VectorIndex:
        """A new index over ``vectors``: exact below the IVF threshold, trained IVF above it."""
        import faiss

        count = len(ids)
        if count < config.ivf_threshold:
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(dimension))
        else:
            nlist = ivf_nlist(count)
            index = faiss.IndexIVFFlat(
                faiss.IndexFlatIP(dimension), dimension, nlist, faiss.METRIC_INNER_PRODUCT
            )
            sample = vectors
            if count > nlist * MAX_TRAINING_POINTS_PER_CENTROID:
                rng = np.random.default_rng(0)
                pick = rng.choice(count, nlist * MAX_TRAINING_POINTS_PER_CENTROID, replace=False)
                sample = vectors[np.sort(pick)]
            index.train(sample)
            log.info("trained IVF index: %d lists on %d of %d vectors", nlist, len(sample), count)
        if count:
            index.add_with_ids(vectors, ids)
        return cls(dimension, config, index)

    @property
    def kind(self) -> str:
        return f"ivf{self._index.nlist}" if hasattr(self._index, "nlist") else "exact"

    @property
    def ntotal(self) -> int:
        return int(self._index.ntotal)

    def needs_retrain(self) -> bool:
        """True when the index type no longer fits its size (exact too big, or IVF too coarse)."""
        count = self.ntotal
        if self.kind == "exact":
            return count >= self.config.ivf_threshold
        return count < self.config.ivf_threshold // 2 or ivf_nlist(count) >= 2 * self._index.nlist

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if len(ids) == 0:
            return
        self._index.add_with_ids(vectors, ids)
        if self._gpu is not None:
            with _GPU_LOCK:
                self._gpu.add_with_ids(vectors, ids)
                _gpu_held[self._token] = self._copy_bytes()

    def remove(self, ids: np.ndarray) -> None:
        if len(ids) == 0:
            return
        self._index.remove_ids(np.asarray(ids, dtype=np.int64))
        if self._gpu is not None:
            self._tombstones.update(int(i) for i in ids)
            limit = min(_TOMBSTONE_COMPACT_RATIO * max(self.ntotal, 1), _GPU_MAX_TOMBSTONES)
            if len(self._tombstones) > limit:
                self._drop_gpu_copy()  # rebuilt from the CPU index on the next search

    @property
    def on_gpu(self) -> bool:
        """Whether searches go to a GPU copy (device cuda and the shard is large enough)."""
        return self.config.device == "cuda" and self.ntotal >= self.config.gpu_min_vectors

    def _drop_gpu_copy(self) -> None:
        with _GPU_LOCK:  # freeing the copy uses the shared resources too
            self._gpu = None
            _gpu_held.pop(self._token, None)
        self._tombstones = set()

    def _searcher(self, k: int):
        """The index that answers a top-``k`` search: the GPU copy (made or compacted as
        needed), or the CPU index for small shards and for k beyond the GPU's limit."""
        if not self.on_gpu or k > GPU_MAX_K - _GPU_MAX_TOMBSTONES:
            if self._gpu is not None and not self.on_gpu:
                self._drop_gpu_copy()  # the shard shrank below gpu_min_vectors
            return self._index
        if self._gpu is None:
            with _GPU_LOCK:
                size = self._copy_bytes()
                if gpu_bytes_held() + size > self.config.gpu_memory_mb * 2**20:
                    return self._index  # no room on the GPU: the CPU, until copies are freed
                resources = gpu_resources(self.config.gpu_temp_memory_mb)
                self._gpu = self._faiss.index_cpu_to_gpu(resources, 0, self._index)
                _gpu_held[self._token] = size
            self._tombstones = set()
        return self._gpu

    def _copy_bytes(self) -> int:
        """GPU memory of a copy: the vectors (float32) and their ids."""
        return self.ntotal * (self.dimension * 4 + 8)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, ids) per query row; missing results have id -1."""
        searcher = self._searcher(k)
        if hasattr(searcher, "nprobe"):
            searcher.nprobe = self.config.nprobe
        tombstones = self._tombstones if searcher is self._gpu else set()
        fetch = min(k + len(tombstones), max(self.ntotal, 1))
        if searcher is self._gpu:
            with _GPU_LOCK:
                scores, ids = searcher.search(queries, max(fetch, 1))
        else:
            scores, ids = searcher.search(queries, max(fetch, 1))
        if tombstones:
            dead = np.isin(ids, list(tombstones))
            ids = np.where(dead, -1, ids)
            scores = np.where(dead, -np.inf, scores)
            order = np.argsort(-scores, axis=1, kind="stable")
            ids = np.take_along_axis(ids, order, axis=1)
            scores = np.take_along_axis(scores, order, axis=1)
        return scores[:, :k], ids[:, :k]

    def search_among(
        self, queries: np.ndarray, k: int, ids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, ids) among the vectors of ``ids`` only: the CPU index skips the
        others while it scans (FAISS IDSelectorBatch; GPU indexes take no selector)."""
        faiss = self._faiss
        selector = faiss.IDSelectorBatch(np.ascontiguousarray(ids, dtype=np.int64))
        if hasattr(self._index, "nprobe"):
            params = faiss.SearchParametersIVF(sel=selector, nprobe=self.config.nprobe)
        else:
            params = faiss.SearchParameters(sel=selector)
        return self._index.search(queries, max(min(k, len(ids)), 1), params=params)

    def save(self, path: Path) -> None:
        """Write to a temp file, fsync, rename: readers see the old file or the new one."""
        tmp = path.with_suffix(path.suffix + ".tmp")
        self._faiss.write_index(self._index, str(tmp))
        install(tmp, path)

    @classmethod
    def load(cls, path: Path, dimension: int, config: VectorIndexConfig) -> VectorIndex:
        """Read an index file; raises ValueError if it is unreadable or of another dimension."""
        import faiss

        try:
            index = faiss.read_index(str(path))
        except RuntimeError as exc:
            raise ValueError(f"unreadable FAISS file {path.name}: {exc}") from exc
        if index.d != dimension:
            raise ValueError(f"FAISS file {path.name} has dimension {index.d}, not {dimension}")
        return cls(dimension, config, index)
