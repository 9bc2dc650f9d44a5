"""Starting Ray for the appliance (serve/ops/up.py): a local head that did not come up in time (its
raylet did not register in Ray's fixed 30 s, or its GCS wrote no port file) is started once more;
anything else fails the start as it is. A failed local start leaves no process behind."""

from __future__ import annotations

import re
import subprocess
import sys

import psutil
import pytest

from serve.ops import up

pytestmark = pytest.mark.unit
TIMED_OUT = Exception(
    "The current node timed out during startup. This could happen because some of the raylet "
    "failed to startup or the GCS has become overloaded."
)
NO_GCS_PORT = RuntimeError(
    "Timed out waiting for file /tmp/ray/session_2026-12-07_06-58-53_777620_3896/gcs_server_port_0"
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


@pytest.mark.parametrize("timeout", [TIMED_OUT, NO_GCS_PORT])
def test_a_local_head_that_timed_out_is_started_once_more(ray_calls, timeout):
    calls, outcomes = ray_calls
    outcomes += [raising(timeout), lambda: None]
    up._init_ray({"address": "local"})
    assert calls == ["init", "shutdown", "init"]


@pytest.mark.parametrize(
    ("address", "error", "expected"),
    [
        ("local", RuntimeError("port 8080 in use"), ["init", "shutdown"]),
        ("head:6379", TIMED_OUT, ["init"]),  # a cluster's own processes are not this one's
    ],
)
def test_other_failures_and_a_remote_cluster_fail_at_once(ray_calls, address, error, expected):
    calls, outcomes = ray_calls
    outcomes += [raising(error), lambda: None]
    with pytest.raises(type(error)):
        up._init_ray({"address": address})
    assert calls == expected


def test_a_second_timeout_fails_the_start(ray_calls):
    calls, outcomes = ray_calls
    outcomes += [raising(TIMED_OUT), raising(TIMED_OUT)]
    with pytest.raises(Exception, match="timed out during startup"):
        up._init_ray({"address": "local"})
    assert calls == ["init", "shutdown", "init", "shutdown"]


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_failed_local_start_ends_the_processes_it_launched_and_no_others(ray_calls, caplog):
    """As Ray's half-started node: ray.init launches processes (GCS, raylet...), then fails.
    Both attempts' processes are ended, and named in the log with their state; a child this
    process had before is left running."""
    _, outcomes = ray_calls
    kept = sleeper()
    launched = []

    def launches_then_times_out():
        launched.append(sleeper())
        raise TIMED_OUT

    outcomes += [launches_then_times_out, launches_then_times_out]
    try:
        with pytest.raises(Exception, match="timed out during startup"):
            up._init_ray({"address": "local"})
        assert len(launched) == 2
        assert not any(psutil.pid_exists(process.pid) for process in launched)  # ended, reaped
        ended = [r.getMessage() for r in caplog.records if "failed start of Ray" in r.getMessage()]
        assert len(ended) == 2
        for line, process in zip(ended, launched, strict=True):
            assert re.search(rf" {process.pid} \(\w+\)", line), line  # its pid and state
        assert kept.poll() is None
    finally:
        kept.kill()
        kept.wait()


def test_a_failing_shutdown_does_not_keep_the_failed_starts_processes(ray_calls, monkeypatch):
    import ray

    _, outcomes = ray_calls
    launched = []

    def launches_then_fails():
        launched.append(sleeper())
        raise RuntimeError("port 8080 in use")

    def shutdown_fails():
        raise RuntimeError("not connected")

    monkeypatch.setattr(ray, "shutdown", shutdown_fails)
    outcomes.append(launches_then_fails)
    with pytest.raises(RuntimeError, match="not connected"):
        up._init_ray({"address": "local"})
    assert not psutil.pid_exists(launched[0].pid)
