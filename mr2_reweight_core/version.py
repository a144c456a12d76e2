"""The version of the mr2-jax distribution: the one source for `mr2_jax.__version__`,
`reweight_jax.__version__` and the package metadata (pyproject.toml reads it)."""

__version__ = "0.2.0"
