"""The air-gapped probe's CUDA steps (benchmarks/gpu_probe.py) on this machine's GPU: the NVML
check leaves a forked child free to use CUDA, and the fp16 embedder runs at every batch size
with vectors that agree with fp32 on the CPU."""

from __future__ import annotations

import pytest

from benchmarks.gpu_probe import BATCHES, step_cuda, step_fork

pytestmark = pytest.mark.gpu


def test_a_forked_child_initialises_cuda_after_the_nvml_check(probe_bundle):
    found = step_fork(probe_bundle)
    assert found["cuda_initialised_by_the_check"] is False
    assert found["forked_child_initialises_cuda"] is True


def test_the_fp16_embedder_runs_at_every_batch_size_and_agrees_with_fp32(probe_bundle):
    found = step_cuda(probe_bundle)
    assert set(found["by_batch"]) == set(BATCHES)
    assert all(r["passages_per_s"] > 0 for r in found["by_batch"].values())
    assert found["min_cosine_to_fp32_cpu"] > 0.99
