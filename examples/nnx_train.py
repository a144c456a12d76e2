"""MR2 with inverse reweighting in Flax NNX (`nnx.jit`, `nnx.Optimizer`), synthetic long-tailed data.

Run from the repository root: `python examples/nnx_train.py` (needs `pip install "mr2-jax[flax]"`).
MR2's class statistics and the reweighting counters are `mr2_jax.nnx.ClassStatistics` variables of
the model: `nnx.value_and_grad` differentiates only `nnx.Param`, `nnx.Optimizer(..., wrt=nnx.Param)`
updates only those, and the step stores the losses' new states (returned through `has_aux`) with
`set_value`. The reweighting starts at `reweight_start`, as at epoch 160 of 200 in its paper's
recipe; before that the MR2 terms are averaged.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import mr2_jax
import mr2_jax.nnx as mr2_nnx
import reweight_jax

CLASS_COUNTS = (64, 32, 16, 8)  # long-tailed: the head class has 8 times the tail class's examples
NUM_CLASSES, INPUT_DIM, HIDDEN_DIM, BATCH_SIZE, LAM = len(CLASS_COUNTS), 8, 16, 32, 0.1
PRIOR = reweight_jax.class_prior(np.asarray(CLASS_COUNTS), "uniform")


def make_dataset(seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Inputs [N, INPUT_DIM] scattered around one random mean per class, and their labels [N]."""
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(NUM_CLASSES), CLASS_COUNTS).astype(np.int32)
  means = 2.0 * rng.normal(size=(NUM_CLASSES, INPUT_DIM))
  return (means[labels] + rng.normal(size=(labels.size, INPUT_DIM))).astype(np.float32), labels


class Model(nnx.Module):
  """Linear–ReLU features and MR2's cosine head, with the losses' per-class state."""

  def __init__(self, rngs: nnx.Rngs):
    self.hidden = nnx.Linear(INPUT_DIM, HIDDEN_DIM, rngs=rngs)
    self.head = mr2_nnx.CosineClassifier(HIDDEN_DIM, NUM_CLASSES, scale=10.0, rngs=rngs)
    self.class_stats = mr2_nnx.ClassStatistics(mr2_jax.init_class_stats(NUM_CLASSES))
    self.reweight_state = mr2_nnx.ClassStatistics(reweight_jax.init_reweight_state(NUM_CLASSES))

  def __call__(self, inputs):
    """(logits [B, K], features [B, HIDDEN_DIM]): MR2 reads the penultimate features."""
    features = nnx.relu(self.hidden(inputs))
    return self.head(features), features


@nnx.jit(static_argnames="reweight")
def train_step(model: Model, optimizer: nnx.Optimizer, inputs, labels, reweight: bool):
  """One step; `reweight` is static (one compiled step before the reweighting starts, one after)."""
  def loss_fn(model):
    logits, features = model(inputs)
    margin_ce, representation, class_stats, _ = mr2_jax.mr2_terms(
        logits, features, labels, model.class_stats.get_value(), lam=LAM)
    per_example = margin_ce + LAM * representation
    reweight_state = model.reweight_state.get_value()
    if reweight:
      loss, reweight_state, _ = reweight_jax.inverse_reweighted_loss(
          per_example, labels, reweight_state, alpha=0.0, prior=PRIOR, gamma=1.0)
    else:
      loss = jnp.mean(per_example)
    return loss, (class_stats, reweight_state)

  (loss, (class_stats, reweight_state)), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
  model.class_stats.set_value(class_stats)
  model.reweight_state.set_value(reweight_state)
  optimizer.update(model, grads)
  return loss


def main(num_steps: int = 100, reweight_start: int = 75, seed: int = 0) -> dict:
  """Trains `num_steps` steps; returns the model's state at the start and at the end.

  Returns:
    {'start', 'end'}: `nnx.state(model)` (pure dicts); 'model' and 'optimizer'; 'losses'
    [num_steps]; 'batch_counts' [num_steps, K], the reweighting's B_c after each step (0 before
    `reweight_start`).
  """
  inputs, labels = make_dataset(seed)
  model = Model(nnx.Rngs(seed))
  optimizer = nnx.Optimizer(model, optax.sgd(0.05, momentum=0.9), wrt=nnx.Param)
  start = nnx.to_pure_dict(nnx.state(model))
  batches = np.random.default_rng(seed)
  losses, batch_counts = [], []
  for step in range(num_steps):
    batch = batches.integers(0, labels.size, BATCH_SIZE)
    loss = train_step(model, optimizer, inputs[batch], labels[batch],
                      reweight=step >= reweight_start)
    losses.append(float(loss))
    batch_counts.append(np.asarray(model.reweight_state.get_value().batch_counts))
  return {"start": start, "end": nnx.to_pure_dict(nnx.state(model)), "model": model,
          "optimizer": optimizer, "losses": np.asarray(losses),
          "batch_counts": np.stack(batch_counts)}


if __name__ == "__main__":
  result = main()
  print(f"loss {result['losses'][0]:.3f} -> {result['losses'][-1]:.3f}")
  print("class statistics:", result["model"].class_stats.get_value())
  print("reweighting state:", result["model"].reweight_state.get_value())
