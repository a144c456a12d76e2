"""Benchmarks (`python -m experiments.benchmarks.<name>`); results in `results/`, read in RESULTS.md."""
