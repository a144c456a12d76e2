"""The Flax linen heads (needs the `flax` extra: `pip install "mr2-jax[flax]"`).

`CosineClassifier` (the cosine head of the reweighting paper's CIFAR recipe and of LDAM-DRW's
released code) and `SupConProjection` (SupCon's projection head). `mr2_jax.CosineClassifier` and
`mr2_jax.SupConProjection` are these classes, imported on first use so that the losses need no Flax.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from mr2_jax.heads import l2_normalize


class CosineClassifier(nn.Module):
  r"""Cosine classifier, shapes [B, d] → [B, K]:

  .. math::

      z_k = s \, \Bigl\langle \frac{\phi}{\lVert \phi \rVert_2},
        \frac{w_k}{\lVert w_k \rVert_2} \Bigr\rangle

  Used by the reweighting paper's CIFAR recipe (scale s = 30) and for CLIP-style heads in MR2; with
  this head the MR2 statistics should use p ≠ 2 (Zhu et al., ICLR 2026, arXiv 2602.00205), because
  :math:`\lVert \mu_k \rVert^2 + v_k = 1` for every class of L2-normalised features.
  """
  num_classes: int
  scale: float = 30.0

  @nn.compact
  def __call__(self, features: jax.Array) -> jax.Array:
    kernel = self.param("kernel", nn.initializers.lecun_normal(),
                        (features.shape[-1], self.num_classes), jnp.float32)
    return self.scale * l2_normalize(features) @ l2_normalize(kernel, axis=0).astype(features.dtype)


class SupConProjection(nn.Module):
  r"""SupCon head: Linear(d→d) – ReLU – Linear(d→`features`), L2-normalised: [..., d] → [..., 128].

  As `networks/resnet_big.py`'s 'mlp' head; the normalisation is `l2_normalize`
  (:math:`x / \max(\lVert x \rVert, \epsilon)`), finite for a zero output, like the reference's
  `F.normalize`.
  """
  features: int = 128

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    hidden = nn.relu(nn.Dense(x.shape[-1], name="hidden")(x))
    return l2_normalize(nn.Dense(self.features, name="output")(hidden))
