"""MR2 and the inverse reweighting in plain JAX and optax, each against a CE baseline, on toy data.

Run from the repository root: `python examples/optax_train.py` (seconds on a CPU). One MLP is
trained by each loss with the same seed, batches and number of steps (`toy_comparison` holds the
data and the table):

* balanced toy set, MR2's setting: CE, then `mr2_jax.mr2_loss` at λ = 0.1 (the paper's default)
  and at λ = 0 (the logit margins γ_k alone);
* long-tailed toy set, the reweighting's setting: CE, and CE until `reweight_start` followed by
  `reweight_jax.inverse_reweighted_loss` (deferred as to epoch 160 of 200 in its paper's recipe).

It ends with two per-class tables on held-out data, each with a sentence on whether the method
raised the group it claims to raise. At λ = 0.1 MR2 does not here: its representation margin (τ = 1
on these unnormalised ReLU features) shrinks the features and costs accuracy.

The train state is three pytrees: the parameters (updated by optax), MR2's class statistics and the
reweighting counters (updated by the losses, never seen by the optimiser).
"""

# %%
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

import mr2_jax
import reweight_jax
import toy_comparison as toy

NUM_CLASSES, HIDDEN_DIM, BATCH_SIZE = toy.NUM_CLASSES, 32, 32
NUM_STEPS, REWEIGHT_START = 400, 300
OPTIMIZER = optax.sgd(0.05, momentum=0.9)
# The reweighting's reference settings: α = 0, a uniform prior w⁰, γ = 1.
ALPHA, GAMMA = 0.0, 1.0
PRIOR = reweight_jax.class_prior(np.asarray(toy.LONG_TAILED_COUNTS), "uniform")


# %% [markdown]
# ## The model
#
# A one-hidden-layer MLP whose parameters are a plain dict; `apply` returns the penultimate
# features beside the logits, because MR2's class statistics are computed on them.

# %%
def init_params(key: jax.Array) -> dict:
  def dense(key, fan_in, fan_out):
    return {"kernel": jax.random.normal(key, (fan_in, fan_out)) / np.sqrt(fan_in),
            "bias": jnp.zeros((fan_out,))}
  hidden_key, output_key = jax.random.split(key)
  return {"hidden": dense(hidden_key, toy.INPUT_DIM, HIDDEN_DIM),
          "output": dense(output_key, HIDDEN_DIM, NUM_CLASSES)}


def apply(params: dict, inputs) -> tuple[jax.Array, jax.Array]:
  """(logits [B, K], features [B, HIDDEN_DIM]): MR2 reads the penultimate features."""
  features = jax.nn.relu(inputs @ params["hidden"]["kernel"] + params["hidden"]["bias"])
  return features @ params["output"]["kernel"] + params["output"]["bias"], features


# %% [markdown]
# ## The loss of each method, and one step
#
# `loss_fn` hands MR2's class statistics and the reweighting counters to the loss and gets their
# new values back through `has_aux`; `train_step` returns them beside the parameters and the
# optimiser's state, so the optimiser never sees them.

# %%
def loss_fn(params, class_stats, reweight_state, inputs, labels, method: str, lam: float):
  """The batch loss of `method` ('ce', 'mr2' or 'reweighting') and the losses' new states."""
  logits, features = apply(params, inputs)
  if method == "mr2":
    loss, class_stats, _ = mr2_jax.mr2_loss(logits, features, labels, class_stats, lam=lam)
  elif method == "reweighting":
    per_example = reweight_jax.cross_entropy_loss(logits, labels)
    loss, reweight_state, _ = reweight_jax.inverse_reweighted_loss(
        per_example, labels, reweight_state, alpha=ALPHA, prior=PRIOR, gamma=GAMMA)
  else:
    loss = jnp.mean(reweight_jax.cross_entropy_loss(logits, labels))
  return loss, (class_stats, reweight_state)


# `method` and `lam` are static: one compiled step per loss.
@functools.partial(jax.jit, static_argnames=("method", "lam"))
def train_step(params, opt_state, class_stats, reweight_state, inputs, labels, method, lam):
  (loss, (class_stats, reweight_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      params, class_stats, reweight_state, inputs, labels, method, lam)
  updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state, class_stats, reweight_state, loss


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
    {'start', 'end'}: each {'params', 'class_stats', 'reweight_state'}; 'opt_state'; 'losses'
    [num_steps]; 'batch_counts' [num_steps, K], the reweighting's B_c after each step.
  """
  params = init_params(jax.random.key(seed))
  opt_state = OPTIMIZER.init(params)
  class_stats = mr2_jax.init_class_stats(NUM_CLASSES)
  reweight_state = reweight_jax.init_reweight_state(NUM_CLASSES)
  start = {"params": params, "class_stats": class_stats, "reweight_state": reweight_state}
  batches = toy.batch_indices(split.train_labels.size, BATCH_SIZE, num_steps, seed)
  losses, batch_counts = [], []
  for step, batch in enumerate(batches):
    step_method = "ce" if method == "reweighting" and step < reweight_start else method
    params, opt_state, class_stats, reweight_state, loss = train_step(
        params, opt_state, class_stats, reweight_state, split.train_inputs[batch],
        split.train_labels[batch], step_method, lam)
    losses.append(float(loss))
    batch_counts.append(np.asarray(reweight_state.batch_counts))
  end = {"params": params, "class_stats": class_stats, "reweight_state": reweight_state}
  return {"start": start, "end": end, "opt_state": opt_state, "losses": np.asarray(losses),
          "batch_counts": np.stack(batch_counts)}


def predict(run: dict, inputs) -> np.ndarray:
  """Predicted classes [N] of a trained run."""
  return np.asarray(jnp.argmax(apply(run["end"]["params"], inputs)[0], axis=-1))


def main(num_steps: int = NUM_STEPS, reweight_start: int = REWEIGHT_START, seed: int = 0) -> dict:
  """Trains every run of both settings; returns {'runs': {setting: {method: run}}, 'tables':
  {setting: toy_comparison.Table}}, the settings 'balanced' and 'long_tailed'."""
  fit = functools.partial(train, num_steps=num_steps, reweight_start=reweight_start, seed=seed)
  return toy.compare(fit, predict, seed)


# %%
if __name__ == "__main__":
  for table in main()["tables"].values():
    print(table.text, end="\n\n")
