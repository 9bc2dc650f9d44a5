import pytest


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda():
        return
    skip = pytest.mark.skip(reason="needs CUDA (a GPU with the gpu extra installed)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
