"""The query path: plain Python, no Ray."""
