"""Benchmarks: each prints figures (JSON lines); none asserts a target. Run with ``python -m bench.<name>``."""
