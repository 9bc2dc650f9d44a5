"""Evaluation: metrics, question sets and the runner behind `grounded eval`."""
