"""tests/cpu_report.py: what --cpu-report counts (a nested pytest run, pytester)."""

import pytest

pytestmark = pytest.mark.unit

BUSY = """
import subprocess, sys, time

def spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def test_busy_here():
    spin(0.4)

def test_busy_in_a_child():
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 0.6\\n"
                    "while time.process_time() < end: pass"], check=True)

def test_idle():
    time.sleep(0.3)
"""


def test_the_report_counts_a_tests_own_cpu_and_its_childrens(pytester):
    pytester.makepyfile(test_busy=BUSY)
    result = pytester.runpytest_inprocess("-p", "tests.cpu_report", "--cpu-report=2", "-p",
                                          "no:xdist", "-p", "no:cacheprovider")  # fmt: skip
    result.assert_outcomes(passed=3)
    lines = result.outlines[result.outlines.index(next(
        line for line in result.outlines if "most CPU" in line)):]  # fmt: skip
    phases = [line.split() for line in lines if " CPU-s call " in line]
    # the two busy tests, the child's first: its 0.6 s counted once the test collected it
    assert [p[-1].rsplit("::", 1)[1] for p in phases] == ["test_busy_in_a_child", "test_busy_here"]
    assert float(phases[0][0]) >= 0.55 and 0.35 <= float(phases[1][0]) < 0.55
    assert any(" module " in line and "test_busy.py" in line for line in lines)
