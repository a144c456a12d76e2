"""MR2 and the inverse reweighting in Flax NNX, each against a CE baseline, on toy data.

Run from the repository root: `python examples/nnx_train.py` (seconds on a CPU; needs
`pip install "mr2-jax[flax]"`). One MLP is trained by each loss with the same seed, batches and
number of steps (`toy_comparison` holds the data and the table):

* balanced toy set, MR2's setting: CE, then `mr2_jax.mr2_loss` at λ = 0.1 (the paper's default)
  and at λ = 0 (the logit margins γ_k alone);
* long-tailed toy set, the reweighting's setting: CE, and CE until `reweight_start` followed by
  `reweight_jax.inverse_reweighted_loss` (deferred as to epoch 160 of 200 in its paper's recipe).

It ends with two per-class tables on held-out data, each with a sentence on whether the method
raised the group it claims to raise. At λ = 0.1 MR2 does not here: its representation margin (τ = 1
on these unnormalised ReLU features) shrinks the features and costs accuracy.

MR2's class statistics and the reweighting counters are `mr2_jax.nnx.ClassStatistics` variables of
the model: `nnx.value_and_grad` differentiates only `nnx.Param`, `nnx.Optimizer(..., wrt=nnx.Param)`
updates only those, and the step stores the losses' new states (returned through `has_aux`) with
`set_value`.
"""

# %%
import functools

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import mr2_jax
import mr2_jax.nnx as mr2_nnx
import reweight_jax
import toy_comparison as toy

NUM_CLASSES, HIDDEN_DIM, BATCH_SIZE = toy.NUM_CLASSES, 32, 32
NUM_STEPS, REWEIGHT_START = 400, 300
# The reweighting's reference settings: α = 0, a uniform prior w⁰, γ = 1.
ALPHA, GAMMA = 0.0, 1.0
PRIOR = reweight_jax.class_prior(np.asarray(toy.LONG_TAILED_COUNTS), "uniform")


# %% [markdown]
# ## The model, with the losses' state
#
# The model returns the penultimate features beside the logits, because MR2's class statistics
# are computed on them; the statistics and the counters are `ClassStatistics` variables of the
# model, so `nnx.state(model)` checkpoints them with the parameters.

# %%
class Model(nnx.Module):
  """Linear–ReLU features and a linear head, with the losses' per-class state."""

  def __init__(self, rngs: nnx.Rngs):
    self.hidden = nnx.Linear(toy.INPUT_DIM, HIDDEN_DIM, rngs=rngs)
    self.head = nnx.Linear(HIDDEN_DIM, NUM_CLASSES, rngs=rngs)
    self.class_stats = mr2_nnx.ClassStatistics(mr2_jax.init_class_stats(NUM_CLASSES))
    self.reweight_state = mr2_nnx.ClassStatistics(reweight_jax.init_reweight_state(NUM_CLASSES))

  def __call__(self, inputs):
    """(logits [B, K], features [B, HIDDEN_DIM]): MR2 reads the penultimate features."""
    features = nnx.relu(self.hidden(inputs))
    return self.head(features), features


# %% [markdown]
# ## One step
#
# `nnx.value_and_grad` differentiates the `nnx.Param` variables only; the loss returns the
# statistics' and the counters' new values through `has_aux`, and `set_value` stores them.

# %%
# `method` and `lam` are static: one compiled step per loss.
@nnx.jit(static_argnames=("method", "lam"))
def train_step(model: Model, optimizer: nnx.Optimizer, inputs, labels, method: str, lam: float):
  """One step of `method` ('ce', 'mr2' or 'reweighting')."""
  def loss_fn(model):
    logits, features = model(inputs)
    class_stats = model.class_stats.get_value()
    reweight_state = model.reweight_state.get_value()
    if method == "mr2":
      loss, class_stats, _ = mr2_jax.mr2_loss(logits, features, labels, class_stats, lam=lam)
    elif method == "reweighting":
      per_example = reweight_jax.cross_entropy_loss(logits, labels)
      loss, reweight_state, _ = reweight_jax.inverse_reweighted_loss(
          per_example, labels, reweight_state, alpha=ALPHA, prior=PRIOR, gamma=GAMMA)
    else:
      loss = jnp.mean(reweight_jax.cross_entropy_loss(logits, labels))
    return loss, (class_stats, reweight_state)

  (loss, (class_stats, reweight_state)), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
  model.class_stats.set_value(class_stats)
  model.reweight_state.set_value(reweight_state)
  optimizer.update(model, grads)
  return loss


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
    {'start', 'end'}: `nnx.state(model)` (pure dicts); 'model' and 'optimizer'; 'losses'
    [num_steps]; 'batch_counts' [num_steps, K], the reweighting's B_c after each step.
  """
  model = Model(nnx.Rngs(seed))
  optimizer = nnx.Optimizer(model, optax.sgd(0.05, momentum=0.9), wrt=nnx.Param)
  start = nnx.to_pure_dict(nnx.state(model))
  batches = toy.batch_indices(split.train_labels.size, BATCH_SIZE, num_steps, seed)
  losses, batch_counts = [], []
  for step, batch in enumerate(batches):
    step_method = "ce" if method == "reweighting" and step < reweight_start else method
    loss = train_step(model, optimizer, split.train_inputs[batch], split.train_labels[batch],
                      step_method, lam)
    losses.append(float(loss))
    batch_counts.append(np.asarray(model.reweight_state.get_value().batch_counts))
  return {"start": start, "end": nnx.to_pure_dict(nnx.state(model)), "model": model,
          "optimizer": optimizer, "losses": np.asarray(losses),
          "batch_counts": np.stack(batch_counts)}


def predict(run: dict, inputs) -> np.ndarray:
  """Predicted classes [N] of a trained run."""
  return np.asarray(jnp.argmax(run["model"](inputs)[0], axis=-1))


def main(num_steps: int = NUM_STEPS, reweight_start: int = REWEIGHT_START, seed: int = 0) -> dict:
  """Trains every run of both settings; returns {'runs': {setting: {method: run}}, 'tables':
  {setting: toy_comparison.Table}}, the settings 'balanced' and 'long_tailed'."""
  fit = functools.partial(train, num_steps=num_steps, reweight_start=reweight_start, seed=seed)
  return toy.compare(fit, predict, seed)


# %%
if __name__ == "__main__":
  for table in main()["tables"].values():
    print(table.text, end="\n\n")
