"""One tiny appliance shared by the modules in SHARING: starting one costs about 45 s here.

Those modules run first and one after another (each with its own tenant), chaos last since it
kills replicas; the appliance stops before any other integration module runs, because the
pytest process holds one Ray at a time and other modules start their own.

`make test` runs the suite on two pytest-xdist workers, each with its own Ray, handing out
units of work in this order (tests/conftest.py's scheduler: an integration module, or the
SHARING modules together, is one unit): the one that waits on the network (WAITING), the
slowest (SLOWEST: measured in `make test`'s --durations), then the other modules, then the
unit tests, which fill in whichever worker is free."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve.config import AppConfig
from tests.appliances import shared_appliance_config
from tests.conftest import SHARING

# Waits on the package index, not the CPU. In a pytest-xdist worker it goes first, so that its
# wait overlaps the other worker's appliance start, whose replicas start in parallel and use
# both cores (among the others, in `make test` of 2026-12-06, it ran last and left one core
# idle for most of its 52 s); in one process `resolutions` starts it with the session.
WAITING = "test_python_versions.py"
SLOWEST = ("test_default_model.py", "test_clients.py", "test_stop.py", "test_cluster.py",
           "test_responses_api.py", "test_generator.py")  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    in_worker = hasattr(config, "workerinput")  # a pytest-xdist worker

    def place(item: pytest.Item) -> tuple[int, int]:
        if "integration" not in item.path.parts:
            return (0 if "gpu" in item.path.parts else 5, 0)
        if item.path.name == WAITING and in_worker:  # else started early (`resolutions`)
            return (1, 0)
        if item.path.name in SHARING:
            return (2, SHARING.index(item.path.name))
        if item.path.name in SLOWEST:
            return (3, SLOWEST.index(item.path.name))
        return (4, 0)

    items.sort(key=place)  # stable: the order within each module is kept


class SharedAppliance:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.running = None
        self.config: AppConfig | None = None

    def start(self):
        if self.running is None:
            from serve import up

            self.config = shared_appliance_config(self.root)
            self.running = up.start(
                self.config, dashboard=False, timeout_s=300, ray_options={"num_cpus": 2}
            )
        return self.running, self.config

    def stop(self) -> None:
        if self.running is not None:
            self.running.stop()
            self.running = None


@pytest.fixture(scope="session")
def _shared(tmp_path_factory):
    shared = SharedAppliance(tmp_path_factory.mktemp("shared-appliance"))
    yield shared
    shared.stop()


@pytest.fixture(scope="module", autouse=True)
def _one_appliance_at_a_time(request, _shared):
    if request.node.path.name not in SHARING:
        _shared.stop()


@pytest.fixture(scope="module")
def shared_appliance(_shared) -> tuple:
    """(running, config) of the shared appliance; a module makes its own tenant's keys."""
    return _shared.start()


@pytest.fixture(scope="session", autouse=True)
def resolutions(request, tmp_path_factory):
    """test_python_versions.py's dependency resolutions, started with the first integration
    test when that module is to run: they wait on the package index, not the CPU, so they
    go on while the appliances start (45 s of the suite when they ran in their turn). Not in a
    pytest-xdist worker: it collects every test but runs only some; there the test starts its
    own, first in its worker (WAITING), while the other worker starts an appliance."""
    in_worker = hasattr(request.config, "workerinput")
    names = {item.path.name for item in request.session.items}
    if in_worker or "test_python_versions.py" not in names:
        yield {}
        return
    from tests.integration.test_python_versions import start_resolutions

    started = start_resolutions(tmp_path_factory.mktemp("resolutions"))
    yield started
    for resolution in started.values():
        resolution.stop()
