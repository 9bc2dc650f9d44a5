"""One tiny appliance shared by the modules in SHARING: starting one costs about 45 s here.

Those modules run first and one after another (each with its own tenant), chaos last since it
kills replicas; the appliance stops before any other integration module runs, because the
pytest process holds one Ray at a time and other modules start their own.

`make test` runs the suite on two pytest-xdist workers, each with its own Ray, handing out
units of work in this order (tests/conftest.py's scheduler: an integration module, or the
SHARING modules together, is one unit): the slowest first (SLOWEST: measured in `make test`'s
--durations), then the other modules, then the unit tests (the longest first), which fill in
whichever worker is free."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve.config import AppConfig
from tests.appliances import shared_appliance_config
from tests.conftest import PYTHON_VERSIONS, RESOLUTIONS, SHARING

# The unit test that takes longest (one test, about 50 s): first of the unit tests, so that the
# others fill in beside it (last, it ended the run alone: 20 s after the other worker).
LONGEST_UNIT = "test_http_fuzz.py"
SLOWEST = ("test_default_model.py", "test_clients.py", "test_stop.py", "test_cluster.py",
           "test_responses_api.py", "test_generator.py")  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def place(item: pytest.Item) -> tuple[int, int]:
        if "integration" not in item.path.parts:
            if "gpu" in item.path.parts:
                return (0, 0)
            return (4, 0 if item.path.name == LONGEST_UNIT else 1)
        if item.path.name in SHARING:
            return (1, SHARING.index(item.path.name))
        if item.path.name in SLOWEST:
            return (2, SLOWEST.index(item.path.name))
        return (3, 0)

    items.sort(key=place)  # stable: the order within each module is kept


class SharedAppliance:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.running = None
        self.config: AppConfig | None = None

    def start(self):
        if self.running is None:
            from serve.ops import up

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
    go on while the appliances start (45 s of the suite when they ran in their turn). In a
    pytest-xdist worker, which collects every test but runs only some, the controller started
    them once for all workers (tests/conftest.py): the worker reads what they wrote."""
    from tests.integration.test_python_versions import attach_resolutions, start_resolutions

    if hasattr(request.config, "workerinput"):
        folder = request.config.workerinput.get(RESOLUTIONS)
        yield attach_resolutions(Path(folder)) if folder else {}
        return
    if PYTHON_VERSIONS not in {item.path.name for item in request.session.items}:
        yield {}
        return
    started = start_resolutions(tmp_path_factory.mktemp("resolutions"))
    yield started
    for resolution in started.values():
        resolution.stop()
