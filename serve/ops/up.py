"""Start and stop the appliance: a local Ray (or an existing cluster) plus the Serve app.

Used by `grounded up`, `make demo` and the integration tests. Stopping removes only what was
started here: the application (serve.shutdown or serve.delete), and the local Ray when this
process started it (ray.shutdown); nothing else on the machine is touched.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
import unittest.mock
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from index.errors import ConfigError
from serve.config import AppConfig
from serve.deployments.resources import gpu_packing
from serve.engine.models import resolve_model

log = logging.getLogger(__name__)
APP_NAME = "grounded"


@dataclass(frozen=True, slots=True)
class Running:
    api_url: str
    metrics_url: str
    dashboard_url: str | None
    started_ray: bool

    def stop(self) -> None:
        import ray
        from ray import serve

        if self.started_ray:
            serve.shutdown()
            ray.shutdown()  # the local Ray this process started, nothing else
        else:
            serve.delete(APP_NAME)


# How Ray says that a local node did not come up in time: the raylet did not register within
# Ray's fixed 30 s, or the GCS did not write its port file (RAY_gcs_server_port_wait_time_s).
STARTUP_TIMEOUTS = ("timed out during startup", "Timed out waiting for file")


def _init_ray(options: dict) -> None:
    """ray.init. A local head that does not come up in time (a machine busy with something
    else) is started once more rather than failing the start."""
    import ray

    if options.get("address") != "local":
        ray.init(**options)
        return
    try:
        _start_local_head(options)
    except Exception as exc:
        if not any(timeout in str(exc) for timeout in STARTUP_TIMEOUTS):
            raise
        log.warning("Ray's node did not come up in time (%s); starting it once more", exc)
        _start_local_head(options)


def _start_local_head(options: dict) -> None:
    """ray.init of a local head. When it fails, the processes it launched are ended: Ray's
    shutdown does not know a node whose start failed, so its GCS, raylet, dashboard and
    monitors would run on beside the next attempt until this process exits. They are the
    children this process gained during the attempt (nothing else starts processes here
    meanwhile)."""
    import psutil
    import ray

    this = psutil.Process()
    before = {child.pid for child in this.children(recursive=True)}
    try:
        ray.init(**options)
    except BaseException:
        try:
            ray.shutdown()
        finally:
            _end([child for child in this.children(recursive=True) if child.pid not in before])
        raise


def _end(processes: list) -> None:
    """SIGKILL ``processes`` (psutil.Process), as ray.shutdown ends a node (its GCS and raylet
    ignored a SIGTERM for 10 s here), and reap them; each is named in the log with its state
    first, the evidence of a start that hung."""
    import psutil

    ended = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            ended.append(f"{process.name()} {process.pid} ({process.status()})")
            process.kill()
    if ended:
        log.warning("ending what the failed start of Ray left: %s", ", ".join(ended))
    psutil.wait_procs(processes, timeout=10)


def start(
    config: AppConfig,
    *,
    address: str | None = None,
    dashboard: bool = True,
    timeout_s: float = 600.0,
    ray_options: dict | None = None,
) -> Running:
    """Start Ray (unless joining ``address``) and the application; return once /health
    answers."""
    import ray
    from ray import serve

    from serve.appliance import build_app

    for generator in config.generator.configs().values():  # fail before Ray starts
        resolve_model(generator.model, config.data_dir)
    if config.query.rerank.backend == "cross-encoder":
        from serve.query.rerankers import cross_encoder

        cross_encoder(config.query.rerank.model or "")  # the judge is fetched, or say how
    settings = config.serve
    started_ray = not ray.is_initialized() and address is None
    if not ray.is_initialized():
        options = {
            "address": address or "local",
            "include_dashboard": dashboard and address is None,
            "namespace": "grounded",
            "logging_level": logging.WARNING,
            "log_to_driver": False,  # replica logs stay in Ray's log files and the dashboard
            **(ray_options or {}),
        }
        if address is None:
            options["_metrics_export_port"] = settings.metrics_port
            if dashboard:
                options["dashboard_host"] = settings.host
                options["dashboard_port"] = settings.dashboard_port
        with _signal_handlers_kept():
            _init_ray(options)
    problem = gpu_packing(config, int(ray.cluster_resources().get("GPU", 0)))
    if problem:  # not fatal: worker nodes may still join with their GPUs
        log.warning("%s; Serve waits for them before the appliance starts", problem)
    api_url = f"http://{settings.host}:{settings.port}"
    try:
        serve.start(
            proxy_location=settings.proxy_location,
            http_options={"host": settings.host, "port": settings.port},
        )
        serve.run(build_app(config), name=APP_NAME, route_prefix="/", blocking=False)
        _wait_healthy(f"{api_url}/health", timeout_s)
    except BaseException:
        # A failed start (a port in use, a replica that cannot start) leaves nothing behind:
        # otherwise the next start in this process would join the broken Serve instance.
        if started_ray:
            serve.shutdown()
            ray.shutdown()
        raise
    return Running(
        api_url=f"{api_url}/v1",
        metrics_url=f"http://{settings.host}:{settings.metrics_port}/metrics",
        dashboard_url=f"http://{settings.host}:{settings.dashboard_port}"
        if dashboard and address is None
        else None,
        started_ray=started_ray,
    )


def _wait_healthy(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise ConfigError(f"the appliance did not become healthy at {url} in {timeout_s:.0f}s")
        time.sleep(0.5)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """Around ray.init. A stop signal that arrives meanwhile is held and delivered after init:
    ray.init interrupted half-way leaves Ray's processes running with nobody to stop them. Ray
    installs SIGTERM handlers of its own during init (one that exits at once, then one that
    kills its processes and exits 1), which would take a `docker stop` of a starting appliance
    past this hold, to exit 15 with Ray half-started: they are not installed here
    (``set_sigterm_handler`` made a no-op for the duration; tests/integration/test_stop.py
    sends SIGTERM while Ray starts). The process's own handlers are put back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    import ray._private.utils as ray_utils

    kept = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    held: list[int] = []
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda signum, frame: held.append(signum))
    try:
        with unittest.mock.patch.object(ray_utils, "set_sigterm_handler", lambda handler: None):
            yield
    finally:
        for signum, handler in kept.items():
            signal.signal(signum, handler)
        if held:
            signal.raise_signal(held[0])


def _stop_requested(signum, frame) -> None:
    raise KeyboardInterrupt


def _already_stopping(signum, frame) -> None:
    print("already stopping; wait a few seconds", file=sys.stderr, flush=True)


def run_in_foreground(
    config: AppConfig, on_ready: Callable[[Running], None], *, wait: bool = True, **options
) -> None:
    """Run the appliance in the foreground of this process (`grounded up`, `make demo`): start
    it, call ``on_ready`` with it, then (``wait``) serve until Ctrl-C (SIGINT) or SIGTERM (as
    `docker stop` sends). A signal at any point, from the start on, stops it gracefully: the
    application is deleted and the local Ray that was started is shut down, with no process
    left behind, and this returns normally. A second signal does not interrupt the stop.
    ``options`` go to ``start``."""
    import ray

    ray_was_running = ray.is_initialized()
    kept = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop_requested)
    running = None
    try:
        running = start(config, **options)
        on_ready(running)
        while wait:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        for signum in STOP_SIGNALS:
            signal.signal(signum, _already_stopping)
        print("stopping the appliance...", file=sys.stderr, flush=True)
        started = time.monotonic()
        if running is not None:
            running.stop()
        elif not ray_was_running and ray.is_initialized():
            ray.shutdown()  # interrupted while starting: the Ray this process started
        print(f"stopped in {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
        for signum, handler in kept.items():
            signal.signal(signum, handler)
