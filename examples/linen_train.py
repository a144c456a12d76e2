"""MR2 and the inverse reweighting in Flax linen and optax, each against a CE baseline, on toy data.

Run from the repository root: `python examples/linen_train.py` (seconds on a CPU; needs the `flax`
extra: `pip install "mr2-jax[flax]"`). One MLP is trained by each loss with the same seed, batches
and number of steps (`toy_comparison` holds the data and the table):

* balanced toy set, MR2's setting: CE, then `mr2_jax.mr2_loss` at λ = 0.1 (the paper's default)
  and at λ = 0 (the logit margins γ_k alone);
* long-tailed toy set, the reweighting's setting: CE, and CE until `reweight_start` followed by
  `reweight_jax.inverse_reweighted_loss` (deferred as to epoch 160 of 200 in its paper's recipe).

It ends with two per-class tables on held-out data, each with a sentence on whether the method
raised the group it claims to raise. At λ = 0.1 MR2 does not here: its representation margin (τ = 1
on these unnormalised ReLU features) shrinks the features and costs accuracy.

MR2's class statistics and the reweighting counters are extra fields of the `TrainState`, as
`batch_stats` are in Flax's ImageNet example: `apply_gradients` updates only `params`, and the step
stores the losses' new states with `replace`.
"""

# %%
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

import mr2_jax
import reweight_jax
import toy_comparison as toy

NUM_CLASSES, HIDDEN_DIM, BATCH_SIZE = toy.NUM_CLASSES, 32, 32
NUM_STEPS, REWEIGHT_START = 400, 300
# The reweighting's reference settings: α = 0, a uniform prior w⁰, γ = 1.
ALPHA, GAMMA = 0.0, 1.0
PRIOR = reweight_jax.class_prior(np.asarray(toy.LONG_TAILED_COUNTS), "uniform")


# %% [markdown]
# ## The model and the train state
#
# The model returns the penultimate features beside the logits, because MR2's class statistics
# are computed on them. The `TrainState` carries the statistics and the counters as two extra
# fields.

# %%
class Model(nn.Module):
  """Dense–ReLU features and a linear head: (logits [B, K], features [B, HIDDEN_DIM])."""

  @nn.compact
  def __call__(self, inputs):
    features = nn.relu(nn.Dense(HIDDEN_DIM, name="hidden")(inputs))
    return nn.Dense(NUM_CLASSES, name="head")(features), features


class TrainState(train_state.TrainState):
  class_stats: mr2_jax.ClassStats
  reweight_state: reweight_jax.ReweightState


# %% [markdown]
# ## One step
#
# The loss returns the statistics' and the counters' new values through `has_aux`;
# `apply_gradients` updates the parameters only, and `replace` stores the new values.

# %%
# `method` and `lam` are static: one compiled step per loss.
@functools.partial(jax.jit, static_argnames=("method", "lam"))
def train_step(state: TrainState, inputs, labels, method: str, lam: float):
  """One step of `method` ('ce', 'mr2' or 'reweighting')."""
  def loss_fn(params):
    logits, features = state.apply_fn({"params": params}, inputs)
    class_stats, reweight_state = state.class_stats, state.reweight_state
    if method == "mr2":
      loss, class_stats, _ = mr2_jax.mr2_loss(logits, features, labels, class_stats, lam=lam)
    elif method == "reweighting":
      per_example = reweight_jax.cross_entropy_loss(logits, labels)
      loss, reweight_state, _ = reweight_jax.inverse_reweighted_loss(
          per_example, labels, reweight_state, alpha=ALPHA, prior=PRIOR, gamma=GAMMA)
    else:
      loss = jnp.mean(reweight_jax.cross_entropy_loss(logits, labels))
    return loss, (class_stats, reweight_state)

  (loss, (class_stats, reweight_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  state = state.apply_gradients(grads=grads)
  return state.replace(class_stats=class_stats, reweight_state=reweight_state), loss


# %% [markdown]
# ## Training, on the same batches for every method
#
# `train` runs one method; the reweighting is the CE run, step for step, until `REWEIGHT_START`.
# `main` trains every run of both settings and builds the tables (`toy_comparison.compare`).

# %%
def train(split: toy.Split, method: str, *, lam: float = 0.0, num_steps: int = NUM_STEPS,
          reweight_start: int = REWEIGHT_START, seed: int = 0) -> dict:
  """Trains on `split` with `method`; the reweighting is CE (the same steps as the CE run) until
  `reweight_start`.

  Returns:
    {'start', 'end'}: the `TrainState`s; 'losses' [num_steps]; 'batch_counts' [num_steps, K], the
    reweighting's B_c after each step.
  """
  model = Model()
  params = model.init(jax.random.key(seed), split.train_inputs[:1])["params"]
  state = TrainState.create(
      apply_fn=model.apply, params=params, tx=optax.sgd(0.05, momentum=0.9),
      class_stats=mr2_jax.init_class_stats(NUM_CLASSES),
      reweight_state=reweight_jax.init_reweight_state(NUM_CLASSES))
  start = state
  batches = toy.batch_indices(split.train_labels.size, BATCH_SIZE, num_steps, seed)
  losses, batch_counts = [], []
  for step, batch in enumerate(batches):
    step_method = "ce" if method == "reweighting" and step < reweight_start else method
    state, loss = train_step(state, split.train_inputs[batch], split.train_labels[batch],
                             step_method, lam)
    losses.append(float(loss))
    batch_counts.append(np.asarray(state.reweight_state.batch_counts))
  return {"start": start, "end": state, "losses": np.asarray(losses),
          "batch_counts": np.stack(batch_counts)}


def predict(run: dict, inputs) -> np.ndarray:
  """Predicted classes [N] of a trained run."""
  state = run["end"]
  return np.asarray(jnp.argmax(state.apply_fn({"params": state.params}, inputs)[0], axis=-1))


def main(num_steps: int = NUM_STEPS, reweight_start: int = REWEIGHT_START, seed: int = 0) -> dict:
  """Trains every run of both settings; returns {'runs': {setting: {method: run}}, 'tables':
  {setting: toy_comparison.Table}}, the settings 'balanced' and 'long_tailed'."""
  fit = functools.partial(train, num_steps=num_steps, reweight_start=reweight_start, seed=seed)
  return toy.compare(fit, predict, seed)


# %%
if __name__ == "__main__":
  for table in main()["tables"].values():
    print(table.text, end="\n\n")
