"""Benchmarks: one script per measurement, run from the repository root as
``.venv/bin/python -m benchmarks.<name>`` (benchmarks/README.md lists them)."""
