"""benchmarks/gpu_check.py's driver on the CPU: its steps fit its budget, and its report is
written after every step, so a run killed partway still leaves what it found."""

from __future__ import annotations

import sys

import pytest

from benchmarks import gpu_check

pytestmark = pytest.mark.unit


def test_the_step_limits_add_up_to_no_more_than_the_budget():
    assert set(gpu_check.LIMITS_S) == set(gpu_check.STEPS)
    assert sum(gpu_check.LIMITS_S.values()) <= gpu_check.BUDGET_S


def test_a_run_killed_during_a_step_leaves_the_report_of_the_steps_before(tmp_path, monkeypatch):
    done: list[str] = []

    def run_step(name, args, left_s):
        if len(done) == 2:
            raise KeyboardInterrupt  # the run is killed during its third step
        done.append(name)
        return {"ok": True, "seconds": 1.0, "step": name}

    monkeypatch.setattr(gpu_check, "run_step", run_step)
    report = tmp_path / "gpu-check.md"
    monkeypatch.setattr(sys, "argv", ["gpu_check", "--report", str(report), "--cpu-dry-run"])
    with pytest.raises(KeyboardInterrupt):
        gpu_check.main()
    text = report.read_text()
    first, second, third = list(gpu_check.STEPS)[:3]
    assert f"## {first}" in text and f"## {second}" in text and f"## {third}" not in text
