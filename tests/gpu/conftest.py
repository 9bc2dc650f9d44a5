"""GPU tests skip without CUDA, unless GROUNDED_REQUIRE_GPU=1 (`make gpu-check`): then a
machine whose GPU cannot be used (no driver, a driver too old for this CUDA runtime, a CPU
build of torch) fails them with the reason, instead of showing green."""

import os

import pytest

# torch.cuda.is_available() below, in pytest's process, would initialise CUDA there and poison
# the fork that starts vLLM's engine core; with this, PyTorch asks NVML instead (PyTorch's
# documentation of torch.cuda.is_available). Set before torch is imported.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")


def cuda_unavailable() -> str | None:
    """Why CUDA cannot be used here, or None when it can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build (install the gpu extra)"
    if torch.cuda.is_available():
        return None
    try:
        torch.cuda.init()  # raises with the driver's own explanation
    except Exception as exc:  # torch raises RuntimeError or AssertionError here
        return f"CUDA {torch.version.cuda} (torch {torch.__version__}) unusable: {exc}"
    return f"no CUDA device visible to torch {torch.__version__} (CUDA {torch.version.cuda})"


def pytest_collection_modifyitems(config, items):
    reason = cuda_unavailable()
    if reason is None:
        return
    required = os.environ.get("GROUNDED_REQUIRE_GPU") == "1"
    mark = pytest.mark.skip(reason=f"needs CUDA: {reason}")
    if required:  # run them, and fail each at once with the reason
        mark = pytest.mark.usefixtures("_require_gpu")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(mark)


@pytest.fixture
def _require_gpu():
    pytest.fail(f"GROUNDED_REQUIRE_GPU=1 but {cuda_unavailable()}")
