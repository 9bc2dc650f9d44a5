"""Finished experiments: one-off studies whose conclusion is recorded in benchmarks/results/
(benchmarks/experiments/README.md lists them). Run as ``.venv/bin/python -m
benchmarks.experiments.<name>``."""
