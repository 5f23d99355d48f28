"""Benchmarks for segcat (run as modules, e.g. ``python -m bench.commit_latency``)."""
