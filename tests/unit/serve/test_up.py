"""Starting Ray for the appliance (serve/up.py): a local head whose raylet did not register in
Ray's fixed 30 s is started once more; anything else fails the start as it is."""

from __future__ import annotations

import pytest

from serve import up

pytestmark = pytest.mark.unit
TIMED_OUT = Exception(
    "The current node timed out during startup. This could happen because some of the raylet "
    "failed to startup or the GCS has become overloaded."
)


@pytest.fixture
def ray_calls(monkeypatch):
    import ray

    calls, outcomes = [], []
    monkeypatch.setattr(ray, "init", lambda **options: calls.append("init") or outcomes.pop(0)())
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    return calls, outcomes


def raising(exc):
    def outcome():
        raise exc

    return outcome


def test_a_local_head_that_timed_out_is_started_once_more(ray_calls):
    calls, outcomes = ray_calls
    outcomes += [raising(TIMED_OUT), lambda: None]
    up._init_ray({"address": "local"})
    assert calls == ["init", "shutdown", "init"]


@pytest.mark.parametrize(
    ("address", "error"),
    [("local", RuntimeError("port 8080 in use")), ("head:6379", TIMED_OUT)],
)
def test_other_failures_and_a_remote_cluster_fail_at_once(ray_calls, address, error):
    calls, outcomes = ray_calls
    outcomes += [raising(error), lambda: None]
    with pytest.raises(type(error)):
        up._init_ray({"address": address})
    assert calls == ["init"]


def test_a_second_timeout_fails_the_start(ray_calls):
    calls, outcomes = ray_calls
    outcomes += [raising(TIMED_OUT), raising(TIMED_OUT)]
    with pytest.raises(Exception, match="timed out during startup"):
        up._init_ray({"address": "local"})
    assert calls == ["init", "shutdown", "init"]
