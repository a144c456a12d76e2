"""The Flax NNX heads and a variable type for per-class training state (needs the `flax` extra).

`CosineClassifier` and `SupConProjection` compute what their linen twins in `mr2_jax.linen` compute,
with the same parameter names, shapes and initialisers; NNX needs the input width at construction.

MR2's class statistics (`ClassStats`) and the reweighting counters (`reweight_jax.ReweightState`)
change every step but are no parameters: hold each in a `ClassStatistics` variable of the model, as
BatchNorm holds its running statistics in `nnx.BatchStat`. Then

* `nnx.grad` / `nnx.value_and_grad` differentiate only `nnx.Param` (their default), and
  `nnx.Optimizer(model, tx, wrt=nnx.Param)` neither keeps optimiser state for the statistics nor
  updates them;
* `nnx.jit` carries them in and out of the compiled step, and `nnx.state(model)` checkpoints them
  with the parameters.

A train step returns the losses' new states through `has_aux` and stores them itself::

  @nnx.jit
  def train_step(model, optimizer, images, labels):
    def loss_fn(model):
      logits, features = model(images)
      loss, new_stats, aux = mr2_jax.mr2_loss(logits, features, labels,
                                              model.class_stats.get_value())
      return loss, new_stats

    (loss, new_stats), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    model.class_stats.set_value(new_stats)
    optimizer.update(model, grads)
    return loss

The reweighting state is held and stored the same way: a second `ClassStatistics` holding
`reweight_jax.init_reweight_state(K)`, read by `inverse_reweighted_loss` and set from its result.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from mr2_jax.heads import l2_normalize


class ClassStatistics(nnx.Variable):
  """Per-class state of a loss (a pytree such as `ClassStats` or `ReweightState`), not a parameter.

  Read it with `get_value()` and store the loss's new state with `set_value(...)`; gradient
  transforms and `nnx.Optimizer(..., wrt=nnx.Param)` leave it alone (see the module docstring).
  """


class CosineClassifier(nnx.Module):
  r"""Cosine classifier, shapes [B, d] → [B, K]:

  .. math::

      z_k = s \, \Bigl\langle \frac{\phi}{\lVert \phi \rVert_2},
        \frac{w_k}{\lVert w_k \rVert_2} \Bigr\rangle

  `mr2_jax.linen.CosineClassifier` in NNX: the float32 `kernel` [d, K] is drawn with LeCun normal
  initialisation. With this head on L2-normalised features, MR2's statistics should use p ≠ 2 (see
  the linen class).

  Args:
    in_features: d, the width of the features.
    num_classes: K, the number of classes.
    scale: s (30 in the reweighting paper's CIFAR recipe).
    rngs: the `nnx.Rngs` whose `params` stream draws the kernel.
  """

  def __init__(self, in_features: int, num_classes: int, *, scale: float = 30.0, rngs: nnx.Rngs):
    self.scale = scale
    self.kernel = nnx.Param(nnx.initializers.lecun_normal()(
        rngs.params(), (in_features, num_classes), jnp.float32))

  def __call__(self, features: jax.Array) -> jax.Array:
    kernel = l2_normalize(self.kernel[...], axis=0).astype(features.dtype)
    return self.scale * l2_normalize(features) @ kernel


class SupConProjection(nnx.Module):
  """SupCon head: Linear(d→d) – ReLU – Linear(d→`features`), L2-normalised: [..., d] → [..., 128].

  `mr2_jax.linen.SupConProjection` in NNX: `hidden` and `output` are `nnx.Linear` layers,
  initialised as linen's `Dense` (LeCun normal kernels, zero biases).

  Args:
    in_features: d, the width of the input.
    features: the width of the projection.
    rngs: the `nnx.Rngs` whose `params` stream draws the kernels.
  """

  def __init__(self, in_features: int, features: int = 128, *, rngs: nnx.Rngs):
    self.hidden = nnx.Linear(in_features, in_features, rngs=rngs)
    self.output = nnx.Linear(in_features, features, rngs=rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    return l2_normalize(self.output(nnx.relu(self.hidden(x))))
