"""L2 normalisation for cosine heads (pure JAX, no Flax): `mr2_reweight_core.normalize.l2_normalize`,
kept at this path. The Flax heads that use it are in `mr2_jax.linen` (and `mr2_jax.nnx`), installed
with the `flax` extra."""

from mr2_reweight_core.normalize import l2_normalize

__all__ = ["l2_normalize"]
