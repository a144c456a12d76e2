"""MR2 with inverse reweighting in plain JAX and optax: a tiny MLP on a synthetic long-tailed set.

Run from the repository root: `python examples/optax_train.py`. The train state is three pytrees:
the parameters (updated by optax), MR2's class statistics and the reweighting counters (updated by
the losses, never seen by the optimiser). The reweighting starts at `reweight_start`, as at epoch
160 of 200 in its paper's recipe; before that the MR2 terms are averaged.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

import mr2_jax
import reweight_jax

CLASS_COUNTS = (64, 32, 16, 8)  # long-tailed: the head class has 8 times the tail class's examples
NUM_CLASSES, INPUT_DIM, HIDDEN_DIM, BATCH_SIZE, LAM = len(CLASS_COUNTS), 8, 16, 32, 0.1
PRIOR = reweight_jax.class_prior(np.asarray(CLASS_COUNTS), "uniform")
OPTIMIZER = optax.sgd(0.05, momentum=0.9)


def make_dataset(seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Inputs [N, INPUT_DIM] scattered around one random mean per class, and their labels [N]."""
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(NUM_CLASSES), CLASS_COUNTS).astype(np.int32)
  means = 2.0 * rng.normal(size=(NUM_CLASSES, INPUT_DIM))
  return (means[labels] + rng.normal(size=(labels.size, INPUT_DIM))).astype(np.float32), labels


def init_params(key: jax.Array) -> dict:
  def dense(key, fan_in, fan_out):
    return {"kernel": jax.random.normal(key, (fan_in, fan_out)) / np.sqrt(fan_in),
            "bias": jnp.zeros((fan_out,))}
  hidden_key, output_key = jax.random.split(key)
  return {"hidden": dense(hidden_key, INPUT_DIM, HIDDEN_DIM),
          "output": dense(output_key, HIDDEN_DIM, NUM_CLASSES)}


def apply(params: dict, inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(logits [B, K], features [B, HIDDEN_DIM]): MR2 reads the penultimate features."""
  features = jax.nn.relu(inputs @ params["hidden"]["kernel"] + params["hidden"]["bias"])
  return features @ params["output"]["kernel"] + params["output"]["bias"], features


def loss_fn(params, class_stats, reweight_state, inputs, labels, reweight):
  logits, features = apply(params, inputs)
  margin_ce, representation, class_stats, _ = mr2_jax.mr2_terms(
      logits, features, labels, class_stats, lam=LAM)
  per_example = margin_ce + LAM * representation
  if reweight:
    loss, reweight_state, _ = reweight_jax.inverse_reweighted_loss(
        per_example, labels, reweight_state, alpha=0.0, prior=PRIOR, gamma=1.0)
  else:
    loss = jnp.mean(per_example)
  return loss, (class_stats, reweight_state)


# `reweight` is static: one compiled step before the reweighting starts, one after.
@functools.partial(jax.jit, static_argnames="reweight")
def train_step(params, opt_state, class_stats, reweight_state, inputs, labels, reweight):
  (loss, (class_stats, reweight_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      params, class_stats, reweight_state, inputs, labels, reweight)
  updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state, class_stats, reweight_state, loss


def main(num_steps: int = 100, reweight_start: int = 75, seed: int = 0) -> dict:
  """Trains `num_steps` steps; returns the state at the start and at the end.

  Returns:
    {'start', 'end'}: each {'params', 'class_stats', 'reweight_state'}; 'opt_state'; 'losses'
    [num_steps]; 'batch_counts' [num_steps, K], the reweighting's B_c after each step (0 before
    `reweight_start`).
  """
  inputs, labels = make_dataset(seed)
  params = init_params(jax.random.key(seed))
  opt_state = OPTIMIZER.init(params)
  class_stats = mr2_jax.init_class_stats(NUM_CLASSES)
  reweight_state = reweight_jax.init_reweight_state(NUM_CLASSES)
  start = {"params": params, "class_stats": class_stats, "reweight_state": reweight_state}
  batches = np.random.default_rng(seed)
  losses, batch_counts = [], []
  for step in range(num_steps):
    batch = batches.integers(0, labels.size, BATCH_SIZE)
    params, opt_state, class_stats, reweight_state, loss = train_step(
        params, opt_state, class_stats, reweight_state, inputs[batch], labels[batch],
        reweight=step >= reweight_start)
    losses.append(float(loss))
    batch_counts.append(np.asarray(reweight_state.batch_counts))
  end = {"params": params, "class_stats": class_stats, "reweight_state": reweight_state}
  return {"start": start, "end": end, "opt_state": opt_state, "losses": np.asarray(losses),
          "batch_counts": np.stack(batch_counts)}


if __name__ == "__main__":
  result = main()
  print(f"loss {result['losses'][0]:.3f} -> {result['losses'][-1]:.3f}")
  print("class statistics:", result["end"]["class_stats"])
  print("reweighting state:", result["end"]["reweight_state"])
