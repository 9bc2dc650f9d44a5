"""The FAISS side of a shard: derived from SQLite, rebuildable, written atomically.

Exact search (IndexIDMap2 over IndexFlatIP) while small; past ``ivf_threshold`` vectors it is
retrained as IVF with nlist from the size. Vectors are L2-normalised, so inner product is cosine.
On ``device: cuda`` a GPU copy answers searches; GPU indexes cannot remove ids, so deletes there
are tombstones filtered at search time until the copy is rebuilt (compacted).
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import numpy as np

from index.config import VectorIndexConfig
from index.errors import ConfigError

log = logging.getLogger(__name__)

MIN_POINTS_PER_CENTROID = 39  # FAISS warns (and clusters poorly) below this
MAX_TRAINING_POINTS_PER_CENTROID = 256
_TOMBSTONE_COMPACT_RATIO = 0.1


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
            self._gpu.add_with_ids(vectors, ids)

    def remove(self, ids: np.ndarray) -> None:
        if len(ids) == 0:
            return
        self._index.remove_ids(np.asarray(ids, dtype=np.int64))
        if self._gpu is not None:
            self._tombstones.update(int(i) for i in ids)
            if len(self._tombstones) > _TOMBSTONE_COMPACT_RATIO * max(self.ntotal, 1):
                self._gpu = None  # rebuilt from the CPU index on the next search

    def _searcher(self):
        if self.config.device != "cuda":
            return self._index
        if self._gpu is None:
            faiss = self._faiss
            if not hasattr(faiss, "StandardGpuResources"):
                raise ConfigError(
                    "vectors.device is 'cuda' but this FAISS build has no GPU support; "
                    "install the gpu extra (faiss-gpu) or set vectors.device: cpu",
                    param="vectors.device",
                )
            self._resources = getattr(self, "_resources", None) or faiss.StandardGpuResources()
            self._gpu = faiss.index_cpu_to_gpu(self._resources, 0, self._index)
            self._tombstones = set()
        return self._gpu

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, ids) per query row; missing results have id -1."""
        searcher = self._searcher()
        if hasattr(searcher, "nprobe"):
            searcher.nprobe = self.config.nprobe
        fetch = min(k + len(self._tombstones), max(self.ntotal, 1))
        scores, ids = searcher.search(queries, max(fetch, 1))
        if self._tombstones:
            dead = np.isin(ids, list(self._tombstones))
            ids = np.where(dead, -1, ids)
            scores = np.where(dead, -np.inf, scores)
            order = np.argsort(-scores, axis=1, kind="stable")
            ids = np.take_along_axis(ids, order, axis=1)
            scores = np.take_along_axis(scores, order, axis=1)
        return scores[:, :k], ids[:, :k]

    def save(self, path: Path) -> None:
        """Write to a temp file, fsync, rename: readers see the old file or the new one."""
        tmp = path.with_suffix(path.suffix + ".tmp")
        self._faiss.write_index(self._index, str(tmp))
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

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
