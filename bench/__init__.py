"""Benchmarks: `python -m bench <name> [--json FILE]`, each printing a table."""
