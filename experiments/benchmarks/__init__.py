"""Benchmarks (`python -m experiments.benchmarks.<name>`); runs and notes in results/benchmarks/."""
