"""``--cpu-report N``: the N test phases (setup, call, teardown) and the N test modules that used
the most CPU, counted over the test process and every process it started (its Ray, its
appliances, `grounded up`, Tesseract), after pytest's own ``--durations``.

On this project's 2-core machines `make test` keeps both cores busy, so a phase's wall time
says little about what it costs: two workers share the cores, and a phase that waits lets the
other run. CPU time is what `make test`'s length is made of.

The figures are lower bounds. A process that ends is counted when a process of the tree
collects it; one that leaves the tree first (a daemon, or a Ray worker whose raylet died
before it) takes all the CPU it ever used out of the count, so a phase that stops an appliance
would come out negative: it is shown as 0 (the CPU of such stops is not measured)."""

from __future__ import annotations

from collections import defaultdict

import psutil
import pytest


def tree_cpu() -> float:
    """CPU seconds of this process and its descendants, those they collected included."""
    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)]:
        try:
            t = process.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:  # ended meanwhile
            pass
    return total


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report", type=int, default=0, metavar="N",
                     help="show the N test phases and modules that used the most CPU")  # fmt: skip


def measured(item: pytest.Item, when: str):
    if not item.config.getoption("cpu_report"):
        return (yield)
    start = tree_cpu()
    try:
        return (yield)
    finally:  # carried by the phase's report (to the controller, under pytest-xdist)
        item.user_properties.append((f"cpu_{when}", max(0.0, tree_cpu() - start)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from measured(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from measured(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    return (yield from measured(item, "teardown"))


class Phases:
    def __init__(self) -> None:
        self.seconds: dict[tuple[str, str], float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == f"cpu_{report.when}":
                self.seconds[(report.nodeid, report.when)] = value

    def pytest_terminal_summary(self, terminalreporter, config: pytest.Config) -> None:
        n = config.getoption("cpu_report")
        modules: dict[str, float] = defaultdict(float)
        for (nodeid, _), seconds in self.seconds.items():
            modules[nodeid.split("::")[0]] += seconds
        write = terminalreporter.write_line
        terminalreporter.write_sep("=", f"most CPU: {n} test phases, {n} modules")
        write(f"at least {sum(self.seconds.values()):.0f} CPU-s in {len(self.seconds)} phases")
        ranked = sorted(self.seconds.items(), key=lambda kv: -kv[1])[:n]
        for (nodeid, when), seconds in ranked:
            write(f"{seconds:8.1f} CPU-s {when:<8} {nodeid}")
        for module, seconds in sorted(modules.items(), key=lambda kv: -kv[1])[:n]:
            write(f"{seconds:8.1f} CPU-s module   {module}")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("cpu_report") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Phases(), "cpu-report")
