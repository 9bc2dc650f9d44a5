import numpy as np
import pytest

from serve.deployments.query_cache import QueryEmbeddingCache

pytestmark = pytest.mark.unit


def test_one_tenants_cached_query_is_a_miss_for_another():
    cache = QueryEmbeddingCache(8)
    cache.put(cache.key("acme", "minilm", "annual leave days"), np.ones(3))
    assert cache.get(cache.key("globex", "minilm", "annual leave days")) is None
    assert cache.get(cache.key("acme", "minilm", "annual leave days")) is not None


def test_the_key_ignores_whitespace_but_not_the_model():
    cache = QueryEmbeddingCache(8)
    cache.put(cache.key("acme", "minilm", "annual  leave\n days"), np.ones(3))
    assert cache.get(cache.key("acme", "minilm", " annual leave days ")) is not None
    assert cache.get(cache.key("acme", "e5-small", "annual leave days")) is None


def test_the_least_recently_used_entry_goes_first_and_size_zero_keeps_none():
    cache = QueryEmbeddingCache(2)
    a, b, c = (cache.key("acme", "m", t) for t in "abc")
    cache.put(a, np.zeros(1))
    cache.put(b, np.zeros(1))
    assert cache.get(a) is not None  # a is now the most recent
    cache.put(c, np.zeros(1))
    assert cache.get(b) is None and cache.get(a) is not None and len(cache) == 2
    off = QueryEmbeddingCache(0)
    off.put(a, np.zeros(1))
    assert len(off) == 0
