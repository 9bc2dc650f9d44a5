import threading
import time

import numpy as np
import pytest

from index.config import VectorIndexConfig
from index.store.vectors import (
    GPU_MAX_K,
    MIN_POINTS_PER_CENTROID,
    VectorIndex,
    gpu_bytes_held,
    ivf_nlist,
)

pytestmark = pytest.mark.unit


def unit_vectors(count: int, dimension: int = 16, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize("count", [1000, 50_000, 100_000, 1_000_000])
def test_nlist_leaves_enough_training_points_per_list(count):
    nlist = ivf_nlist(count)
    assert nlist >= 1 and count / nlist >= MIN_POINTS_PER_CENTROID
    assert nlist <= 4 * count**0.5


def test_exact_below_threshold_ivf_above_and_retrain_when_outgrown():
    config = VectorIndexConfig(ivf_threshold=1000)
    small = VectorIndex.build(16, config, np.arange(999), unit_vectors(999))
    assert small.kind == "exact" and not small.needs_retrain()
    small.add(np.array([5000]), unit_vectors(1, seed=1))
    assert small.needs_retrain()  # reached the threshold
    big = VectorIndex.build(16, config, np.arange(2000), unit_vectors(2000))
    assert big.kind == f"ivf{ivf_nlist(2000)}" and not big.needs_retrain()


def test_search_returns_ids_not_positions_and_honours_removal():
    vectors = unit_vectors(50)
    ids = np.arange(100, 150, dtype=np.int64)
    index = VectorIndex.build(16, VectorIndexConfig(), ids, vectors)
    scores, found = index.search(vectors[:3], 2)
    assert list(found[:, 0]) == [100, 101, 102]
    assert np.allclose(scores[:, 0], 1.0, atol=1e-5)
    index.remove(np.array([100]))
    assert index.search(vectors[:1], 1)[1][0, 0] != 100
    assert index.ntotal == 49


def test_save_and_load_round_trip_and_refuse_garbage(tmp_path):
    index = VectorIndex.build(16, VectorIndexConfig(), np.arange(10), unit_vectors(10))
    path = tmp_path / "v.faiss"
    index.save(path)
    assert not list(tmp_path.glob("*.tmp"))
    loaded = VectorIndex.load(path, 16, VectorIndexConfig())
    assert loaded.ntotal == 10
    with pytest.raises(ValueError, match="dimension 16, not 32"):
        VectorIndex.load(path, 32, VectorIndexConfig())
    path.write_bytes(b"not faiss")
    with pytest.raises(ValueError, match="unreadable FAISS file"):
        VectorIndex.load(path, 16, VectorIndexConfig())


class FakeGpuIndex:
    """What the GPU path relies on, on the CPU: a copy that searches, refuses k beyond the
    GPU's limit (as FAISS GPU indexes do) and cannot remove ids."""

    def __init__(self, index) -> None:
        import faiss

        self._index = faiss.clone_index(index)

    def add_with_ids(self, vectors, ids) -> None:
        self._index.add_with_ids(vectors, ids)

    def search(self, queries, k):
        if k > GPU_MAX_K:
            raise RuntimeError(f"k {k} above GPU_MAX_SELECTION_K {GPU_MAX_K}")
        with FakeGpuIndex._guard:
            FakeGpuIndex.running += 1
            FakeGpuIndex.overlaps += FakeGpuIndex.running > 1
        try:
            time.sleep(0.002)  # a kernel in flight; the GIL is released, as FAISS's is
            return self._index.search(queries, k)
        finally:
            with FakeGpuIndex._guard:
                FakeGpuIndex.running -= 1

    # Searches on any GPU copy at the same time: FAISS GPU indexes are not thread-safe.
    _guard = threading.Lock()
    running = 0
    overlaps = 0


@pytest.fixture
def fake_gpu(monkeypatch):
    """FAISS with a fake GPU: counts the resources objects and the copies made."""
    import faiss

    import index.store.vectors as vectors_module

    made = {"resources": 0, "copies": 0, "temp_memory": []}

    class Resources:
        def __init__(self) -> None:
            made["resources"] += 1

        def setTempMemory(self, size: int) -> None:
            made["temp_memory"].append(size)

    def to_gpu(resources, device, index):
        assert isinstance(resources, Resources) and device == 0
        made["copies"] += 1
        return FakeGpuIndex(index)

    monkeypatch.setattr(faiss, "StandardGpuResources", Resources, raising=False)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", to_gpu, raising=False)
    monkeypatch.setattr(vectors_module, "_gpu_resources", None)
    monkeypatch.setattr(vectors_module, "_gpu_held", {})
    return made


def test_gpu_copies_share_one_resources_object_with_bounded_scratch(fake_gpu):
    config = VectorIndexConfig(device="cuda", gpu_min_vectors=100, gpu_temp_memory_mb=64)
    shards = [VectorIndex.build(16, config, np.arange(500), unit_vectors(500, seed=s))
              for s in range(20)]  # fmt: skip
    for shard in shards:
        shard.search(unit_vectors(1, seed=99), 10)
    assert fake_gpu["copies"] == 20 and fake_gpu["resources"] == 1
    assert fake_gpu["temp_memory"] == [64 * 2**20]


def test_small_shards_stay_on_the_cpu(fake_gpu):
    config = VectorIndexConfig(device="cuda", gpu_min_vectors=1000)
    small = VectorIndex.build(16, config, np.arange(999), unit_vectors(999))
    small.search(unit_vectors(1, seed=9), 5)
    assert not small.on_gpu and fake_gpu["copies"] == 0
    small.add(np.array([5000]), unit_vectors(1, seed=1))
    small.search(unit_vectors(1, seed=9), 5)
    assert small.on_gpu and fake_gpu["copies"] == 1


def test_thousands_of_deletes_never_push_a_gpu_search_past_its_top_k_limit(fake_gpu):
    """Before: k + tombstones > 2,048 made every dense search raise after ~2,000 deletes."""
    count = 40_000
    config = VectorIndexConfig(device="cuda", gpu_min_vectors=1000, ivf_threshold=50_000)
    vectors = unit_vectors(count)
    index = VectorIndex.build(16, config, np.arange(count), vectors)
    exact = VectorIndex.build(16, VectorIndexConfig(), np.arange(count), vectors)
    query = unit_vectors(1, seed=7)
    index.search(query, 50)
    for start in range(0, 3000, 100):  # 3,000 deletes, searched between each batch
        dead = np.arange(start, start + 100)
        index.remove(dead)
        exact.remove(dead)
        _, ids = index.search(query, 50)
        assert ids.tolist() == exact.search(query, 50)[1].tolist()
        assert not set(ids[0].tolist()) & set(range(start + 100))
    assert fake_gpu["copies"] > 1, "the GPU copy was compacted"


def test_a_top_k_beyond_the_gpu_limit_is_answered_on_the_cpu(fake_gpu):
    config = VectorIndexConfig(device="cuda", gpu_min_vectors=100)
    index = VectorIndex.build(16, config, np.arange(5000), unit_vectors(5000))
    _, ids = index.search(unit_vectors(1, seed=3), 3000)
    assert (ids[0] >= 0).sum() == 3000


def test_searches_of_different_shards_never_run_on_the_gpu_at_once(fake_gpu):
    """Each shard has its own lock; the GPU copies share one resources object, and FAISS GPU
    indexes are not thread-safe even to search: without the process-wide lock, eight tenants'
    searches overlap."""
    config = VectorIndexConfig(device="cuda", gpu_min_vectors=100)
    shards = [VectorIndex.build(16, config, np.arange(300), unit_vectors(300, seed=s))
              for s in range(8)]  # fmt: skip
    FakeGpuIndex.overlaps = 0

    def search_often(shard) -> None:
        for n in range(20):
            shard.search(unit_vectors(1, seed=n), 5)

    threads = [threading.Thread(target=search_often, args=(shard,)) for shard in shards]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert fake_gpu["copies"] == 8
    assert FakeGpuIndex.overlaps == 0


def test_gpu_copies_stay_within_the_replicas_gpu_memory(fake_gpu):
    """gpu_memory_mb bounds the copies of all open shards together (each 5,000 x 16-d here,
    360 kB): in 1 MiB two fit, the others are searched on the CPU until a copy is freed."""
    import gc

    config = VectorIndexConfig(device="cuda", gpu_min_vectors=100, gpu_memory_mb=1)
    shards = [VectorIndex.build(16, config, np.arange(5000), unit_vectors(5000, seed=s))
              for s in range(4)]  # fmt: skip
    query = unit_vectors(1, seed=5)
    results = [shard.search(query, 5)[1].tolist() for shard in shards]
    assert fake_gpu["copies"] == 2 and gpu_bytes_held() == 2 * 5000 * (16 * 4 + 8)
    exact = VectorIndex.build(16, VectorIndexConfig(), np.arange(5000), unit_vectors(5000, seed=3))
    assert results[3] == exact.search(query, 5)[1].tolist()  # the same answer, from the CPU
    del shards[0]  # a tenant closed: its copy is freed with it
    gc.collect()
    shards[2].search(query, 5)
    assert fake_gpu["copies"] == 3 and gpu_bytes_held() == 2 * 5000 * (16 * 4 + 8)
