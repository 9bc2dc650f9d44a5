"""The probe an air-gapped GPU host runs (benchmarks/gpu_probe.py): its folder is built here
within the 60 MB a host may take, runs on its own (only the standard library, numpy, torch and
sentence-transformers: nothing of Grounded), and leaves its report when killed midway. Its
CUDA steps run in tests/gpu/test_gpu_probe.py."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from benchmarks.gpu_probe import MAX_BUNDLE_BYTES

pytestmark = pytest.mark.integration


def test_the_bundle_fits_what_a_host_may_take_and_lists_its_files(probe_bundle):
    files = [p for p in probe_bundle.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= MAX_BUNDLE_BYTES
    manifest = json.loads((probe_bundle / "MANIFEST.json").read_text())
    for name, digest in manifest.items():
        assert hashlib.sha256((probe_bundle / name).read_bytes()).hexdigest() == digest, name
    assert "minilm-fp16/model.safetensors" in manifest and "gpu_probe.py" in manifest


def test_the_probe_imports_nothing_of_grounded(probe_bundle):
    """What the probe imports (all but the bundle builder, which runs here) is the standard
    library, numpy, torch and sentence-transformers; and a step runs from the carried
    folder."""
    import ast

    tree = ast.parse((probe_bundle / "gpu_probe.py").read_text())
    builder = next(n for n in tree.body if getattr(n, "name", "") == "build_bundle")
    imported = set()
    for node in ast.walk(tree):
        if node in ast.walk(builder):
            continue
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    bare_host = set(sys.stdlib_module_names) | {"__future__", "numpy", "torch",
                                                "sentence_transformers"}  # fmt: skip
    assert imported - bare_host == set()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-I", str(probe_bundle / "gpu_probe.py"), "--step", "versions",
         "--folder", str(probe_bundle)],
        capture_output=True, text=True, timeout=120, cwd=probe_bundle.parent, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["torch"] and found["sentence-transformers"] and "cuda_available" in found


def test_a_probe_killed_midway_leaves_the_report_of_the_steps_it_finished(probe_bundle, tmp_path):
    report = tmp_path / "probe.md"
    probe = subprocess.Popen(
        [sys.executable, str(probe_bundle / "gpu_probe.py"), "--report", str(report)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "| versions |" not in (report.read_text() if report.exists() else ""):
            assert probe.poll() is None and time.monotonic() < deadline, "no report written"
            time.sleep(0.5)
    finally:
        os.killpg(probe.pid, signal.SIGKILL)  # the probe and the step it is running
        probe.wait()
    text = report.read_text()
    assert text.startswith("# GPU probe") and "| versions | yes |" in text
    versions = json.loads(text.split("## versions", 1)[1].split("```json", 1)[1].split("```")[0])
    assert versions["ok"] and versions["python"]
