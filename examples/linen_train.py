"""MR2 with inverse reweighting in Flax linen and optax, on a synthetic long-tailed set.

Run from the repository root: `python examples/linen_train.py` (needs the `flax` extra:
`pip install "mr2-jax[flax]"`).
MR2's class statistics and the reweighting counters are extra fields of the `TrainState`, as
`batch_stats` are in Flax's ImageNet example: `apply_gradients` updates only `params`, and the
step stores the losses' new states with `replace`. The reweighting starts at `reweight_start`, as
at epoch 160 of 200 in its paper's recipe; before that the MR2 terms are averaged.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

import mr2_jax
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


class Model(nn.Module):
  """Dense–ReLU features and MR2's cosine head: (logits [B, K], features [B, HIDDEN_DIM])."""

  @nn.compact
  def __call__(self, inputs):
    features = nn.relu(nn.Dense(HIDDEN_DIM, name="hidden")(inputs))
    return mr2_jax.CosineClassifier(NUM_CLASSES, scale=10.0, name="head")(features), features


class TrainState(train_state.TrainState):
  class_stats: mr2_jax.ClassStats
  reweight_state: reweight_jax.ReweightState


@functools.partial(jax.jit, static_argnames="reweight")
def train_step(state: TrainState, inputs, labels, reweight: bool):
  """One step; `reweight` is static (one compiled step before the reweighting starts, one after)."""
  def loss_fn(params):
    logits, features = state.apply_fn({"params": params}, inputs)
    margin_ce, representation, class_stats, _ = mr2_jax.mr2_terms(
        logits, features, labels, state.class_stats, lam=LAM)
    per_example = margin_ce + LAM * representation
    reweight_state = state.reweight_state
    if reweight:
      loss, reweight_state, _ = reweight_jax.inverse_reweighted_loss(
          per_example, labels, reweight_state, alpha=0.0, prior=PRIOR, gamma=1.0)
    else:
      loss = jnp.mean(per_example)
    return loss, (class_stats, reweight_state)

  (loss, (class_stats, reweight_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  state = state.apply_gradients(grads=grads)
  return state.replace(class_stats=class_stats, reweight_state=reweight_state), loss


def main(num_steps: int = 100, reweight_start: int = 75, seed: int = 0) -> dict:
  """Trains `num_steps` steps; returns the state at the start and at the end.

  Returns:
    {'start', 'end'}: the `TrainState`s; 'losses' [num_steps]; 'batch_counts' [num_steps, K], the
    reweighting's B_c after each step (0 before `reweight_start`).
  """
  inputs, labels = make_dataset(seed)
  model = Model()
  params = model.init(jax.random.key(seed), inputs[:1])["params"]
  state = TrainState.create(
      apply_fn=model.apply, params=params, tx=optax.sgd(0.05, momentum=0.9),
      class_stats=mr2_jax.init_class_stats(NUM_CLASSES),
      reweight_state=reweight_jax.init_reweight_state(NUM_CLASSES))
  start = state
  batches = np.random.default_rng(seed)
  losses, batch_counts = [], []
  for step in range(num_steps):
    batch = batches.integers(0, labels.size, BATCH_SIZE)
    state, loss = train_step(state, inputs[batch], labels[batch], reweight=step >= reweight_start)
    losses.append(float(loss))
    batch_counts.append(np.asarray(state.reweight_state.batch_counts))
  return {"start": start, "end": state, "losses": np.asarray(losses),
          "batch_counts": np.stack(batch_counts)}


if __name__ == "__main__":
  result = main()
  print(f"loss {result['losses'][0]:.3f} -> {result['losses'][-1]:.3f}")
  print("class statistics:", result["end"].class_stats)
  print("reweighting state:", result["end"].reweight_state)
