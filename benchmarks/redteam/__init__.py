"""The red-team sets' tools: run.py, candidates.py and misses.py for runs, validate.py and
make_pdfs.py for the sets themselves; each takes ``--set`` (benchmarks/redteam/README.md)."""
