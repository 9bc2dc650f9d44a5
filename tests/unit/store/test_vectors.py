import numpy as np
import pytest

from index.config import VectorIndexConfig
from index.store.vectors import MIN_POINTS_PER_CENTROID, VectorIndex, ivf_nlist

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
