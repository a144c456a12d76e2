"""Learning from Failure (Nam et al., "Learning from Failure: Training Debiased Classifier from
Biased Classifier", NeurIPS 2020, arXiv 2007.02561, Algorithm 1; reference code `alinlab/LfF`; one
of MR2's comparison methods).

Two models of the same architecture see the same batches: a biased one f_B, trained with the
generalized cross-entropy (GCE) so that it latches onto easy (bias-aligned) examples, and the
debiased one f_D (the one evaluated), trained with cross-entropy weighted towards the examples f_B
finds hard. The weights come from per-example EMAs of both models' losses over the N training
examples, so every step needs each example's dataset index. The state (`LfFState`) holds the two
EMAs and the visited mask; parameters, optimisers and batch statistics of the two models live in
the train state as usual (one backward pass of the summed loss, one optimiser per model).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from jax.typing import ArrayLike

from mr2_reweight_core import class_sums
from mr2_reweight_core import explicit_mesh
from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_finite_rows
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_hyperparameter
from mr2_reweight_core.checks import check_labels
from mr2_reweight_core.checks import check_num_classes
from mr2_reweight_core.checks import check_positive_int
from mr2_reweight_core.checks import check_where
from mr2_reweight_core.checks import count_skipped
from mr2_reweight_core.checks import finite_rows
from mr2_reweight_core.checks import index_labels
from mr2_reweight_core.checks import is_concrete
from mr2_reweight_core.checks import poison_unless
from mr2_reweight_core.checks import take_class_values
from mr2_reweight_core.checks import traced_checks_enabled
from mr2_reweight_core.cross_entropy import check_logits_and_labels as _check_logits_and_labels
from mr2_reweight_core.cross_entropy import cross_entropy_loss
from mr2_reweight_core.cross_entropy import finish_per_example as _finish
from mr2_reweight_core.cross_entropy import label_log_prob as _label_log_prob


class LfFState(NamedTuple):
  """Per-example loss EMAs over the training set (Nam et al., NeurIPS 2020, arXiv 2007.02561).

  Attributes:
    ema_biased: float32 [N], e_B (0 where unvisited).
    ema_debiased: float32 [N], e_D (0 where unvisited).
    seen: bool [N], whether example i has been visited (its first visit sets e ← ℓ).
    skipped_rows: int32 scalar, the real rows (inside `where`) that wrote nothing: an index outside
      [0, N) or a non-finite loss (docs: "Failure modes").
  """
  ema_biased: jax.Array
  ema_debiased: jax.Array
  seen: jax.Array
  skipped_rows: ArrayLike = np.int32(0)  # 0 when not given (built before the field existed)


class LfFAux(NamedTuple):
  """weights [B]: W_i (constant for back-propagation; 0 for padding); ce_biased, ce_debiased [B]:
  the per-example cross-entropies that updated the EMAs; gce_biased [B]: f_B's per-example GCE."""
  weights: jax.Array
  ce_biased: jax.Array
  ce_debiased: jax.Array
  gce_biased: jax.Array


def init_lff_state(num_examples: int) -> LfFState:
  """e_B = e_D = 0 and nothing seen, for a training set of `num_examples` examples.

  Nam et al., NeurIPS 2020, arXiv 2007.02561: the per-example loss EMAs of the two models.

  Args:
    num_examples: N, a positive Python int.

  Returns:
    `LfFState` with float32 [N] zeros, ``seen`` bool [N] False and ``skipped_rows`` 0.

  Raises:
    TypeError: `num_examples` is not an int.
    ValueError: `num_examples` < 1.

  Examples:
    >>> import reweight_jax
    >>> state = reweight_jax.baselines.init_lff_state(5)
    >>> print(state.ema_biased, state.seen)
    [0. 0. 0. 0. 0.] [False False False False False]
  """
  num_examples = check_positive_int(num_examples, "num_examples")
  return LfFState(jnp.zeros((num_examples,), jnp.float32), jnp.zeros((num_examples,), jnp.float32),
                  jnp.zeros((num_examples,), bool), jnp.zeros((), jnp.int32))


def gce_loss(logits: ArrayLike, labels: ArrayLike, *, q: ArrayLike = 0.7,
             where: ArrayLike | None = None) -> jax.Array:
  r"""Generalized cross-entropy as LfF codes it, per example [B].

  Zhang & Sabuncu, "Generalized Cross Entropy Loss for Training Deep Neural Networks with Noisy
  Labels", NeurIPS 2018, arXiv 1805.07836, as LfF (Nam et al., NeurIPS 2020, arXiv 2007.02561)
  trains its biased model with it:

  .. math:: \ell_i = q \operatorname{sg}(p_{i,y_i}^q) (-\log p_{i,y_i}), \qquad
     p_i = \operatorname{softmax}(z_i)

  so :math:`\partial\ell_i/\partial z_i = q\,p_y^q\,(\mathrm{softmax}(z_i) - \mathrm{onehot}(y_i))`,
  the gradient of :math:`(1 - p_y^q)/q` of Zhang & Sabuncu (2018), while the value is not
  :math:`(1 - p_y^q)/q` (`module/loss.py`, `GeneralizedCELoss`). :math:`p_y^q` is
  :math:`\exp(q \log p_y)` from the stable log-softmax, so it neither overflows nor is :math:`0^q`.

  Args:
    logits: float [B, K].
    labels: int [B] in [0, K).
    q: exponent in (0, 1] (0.7, the reference's default).
    where: optional bool [B]; padding rows give 0 and no gradient.

  Returns:
    float [B]; NaN for an out-of-range label under `jit` (never a clipped class). B = 0: an empty
    [0]. K = 1: 0 on every real row (a softmax over one class is certain).

  Raises:
    ValueError: q outside (0, 1], logits not [B, K], labels not [B], or (eagerly) a real row's
      label outside [0, K).
    TypeError: non-floating logits or non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.5]])
    >>> labels = jnp.array([0, 1, 2, 1])
    >>> print(np.asarray(reweight_jax.baselines.gce_loss(logits, labels, q=0.7), float).round(4))
    [0.1056 0.2958 0.0622 0.2348]
  """
  q, q_ok = check_hyperparameter(q, "q", 0.0, 1.0, low_closed=False, high_closed=True,
                                 what="an exponent")
  logits, labels, in_range = _check_logits_and_labels(logits, labels, where)
  log_prob = _label_log_prob(logits, labels, in_range)
  weight = jnp.multiply(q, jnp.exp(jnp.multiply(q, jax.lax.stop_gradient(log_prob))))
  if q_ok is not True:  # a traced q outside (0, 1]: NaN, never used silently
    weight = jnp.where(q_ok, weight, jnp.nan)
  return _finish(weight * -log_prob, labels, in_range, where, None, logits.shape[1])


def _check_state(state: LfFState) -> int:
  ema_biased = check_floating(state.ema_biased, 1, "state.ema_biased")
  check_floating(state.ema_debiased, 1, "state.ema_debiased")
  num_examples = ema_biased.shape[0]
  for name, value in (("state.ema_debiased", state.ema_debiased), ("state.seen", state.seen)):
    if value.shape != (num_examples,):
      raise ValueError(f"{name}: expected shape ({num_examples},) like state.ema_biased, got "
                       f"{value.shape}.")
  seen_dtype = jnp.asarray(state.seen).dtype
  if seen_dtype != jnp.bool_:
    raise TypeError(f"state.seen: expected a boolean mask, got {seen_dtype}.")
  return num_examples


def _check_indices(indices: ArrayLike, num_examples: int, where: jax.Array,
                   batch_name: str = "labels") -> jax.Array:
  """Checks dataset indices int [B] (B = where's length); returns the mask of in-range ones.

  Eagerly an out-of-range index of a real row raises; under tracing inside `traced_checks()` it is
  a `checkify` check; otherwise the callers write nothing for it and make its weight NaN.
  """
  indices = jnp.asarray(indices)
  if indices.ndim != 1:
    raise ValueError(f"indices: expected rank 1 [batch], got shape {indices.shape}.")
  if not jnp.issubdtype(indices.dtype, jnp.integer):
    raise TypeError(f"indices: expected an integer dtype, got {indices.dtype}.")
  check_batch_dim(indices, where.shape[0], "indices", batch_name)
  in_range = (indices >= 0) & (indices < num_examples)
  if is_concrete(indices) and is_concrete(where):
    values = np.asarray(indices)[np.asarray(where)]
    if values.size and (values.min() < 0 or values.max() >= num_examples):
      raise ValueError(f"indices: dataset indices must lie in [0, {num_examples}); got values "
                       f"from {values.min()} to {values.max()}.")
  elif traced_checks_enabled():
    checkify.check(jnp.all(in_range | ~where),
                   f"indices: dataset indices must lie in [0, {num_examples}).", debug=True)
  return in_range


def lff_update_ema(state: LfFState, indices: ArrayLike, loss_biased: ArrayLike,
                   loss_debiased: ArrayLike, *, alpha: ArrayLike = 0.7,
                   where: ArrayLike | None = None,
                   axis_name: str | None = None) -> LfFState:
  r"""The loss EMAs after one (global) batch, at the batch's dataset positions.

  Nam et al., NeurIPS 2020, arXiv 2007.02561 (the reference's `util.py`, `EMA`):

  .. math:: e_i \leftarrow \begin{cases} \ell_i & \text{on the first visit of example } i, \\
     \alpha e_i + (1 - \alpha) \ell_i & \text{afterwards,} \end{cases} \qquad e = e_B, e_D.

  The reference writes :math:`\alpha e + (1 - \alpha\, \mathrm{seen})\, \ell`, the same thing with
  e = 0 before the first visit. Losses are taken as constants (stop-gradient).

  Indices within one global batch are assumed distinct (an epoch's permutation). A repeated index
  is not accumulated: every repeat reads the pre-step e, and the row last in the global batch
  writes (deterministic, and the same on one device and on any split over devices).

  Data parallel (`axis_name`): the indices, losses and masks of the global batch are all-gathered
  (tiled, in device order), so every device applies the same update and holds an identical state
  (typed replicated under `shard_map`'s `check_vma=True`: return it with `out_specs=P()`). Without
  it, `jax.jit` over a batch laid out with `NamedSharding` gathers the batch's 3·B values once and
  gives the same state, replicated.

  Args:
    state: `LfFState` with N entries.
    indices: int [B] dataset positions in [0, N) of the local batch.
    loss_biased: [B] per-example losses ℓ_B of the biased model (cross-entropy in the reference).
    loss_debiased: [B] per-example losses ℓ_D of the debiased model.
    alpha: EMA decay α in [0, 1] (0.7).
    where: optional bool [B]; False marks padding, which writes nothing.
    axis_name: data-parallel axis name or None.

  Returns:
    The new `LfFState`. A real row with an out-of-range index raises eagerly; under `jit` it writes
    nothing (never a clipped position) and `lff_weights` / `lff_loss` give it NaN. A real row with a
    non-finite loss writes nothing either; both are counted in `skipped_rows`. B = 0 (or every
    row padding): the state unchanged.

  Raises:
    ValueError: α outside [0, 1], a state whose fields differ in shape, losses or indices not [B],
      or (eagerly) an index outside [0, N).
    TypeError: non-floating losses or EMAs, a non-boolean `seen`, non-integer indices.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> state = reweight_jax.baselines.init_lff_state(4)
    >>> state = reweight_jax.baselines.lff_update_ema(state, jnp.array([1, 3]), jnp.array([1.0, 2.0]),
    ...                                     jnp.array([0.5, 0.5]))
    >>> state = reweight_jax.baselines.lff_update_ema(state, jnp.array([1]), jnp.array([0.0]), jnp.array([1.5]),
    ...                                     alpha=0.5)
    >>> print(state.ema_biased, state.ema_debiased, state.seen)
    [0.  0.5 0.  2. ] [0.  1.  0.  0.5] [False  True False  True]
  """
  alpha, alpha_ok = check_hyperparameter(alpha, "alpha", 0.0, 1.0, high_closed=True,
                                         what="an EMA decay")
  num_examples = _check_state(state)
  loss_biased = check_floating(loss_biased, 1, "loss_biased")
  loss_debiased = check_floating(loss_debiased, 1, "loss_debiased")
  check_batch_dim(loss_debiased, loss_biased.shape[0], "loss_debiased", "loss_biased")
  real = check_where(where, loss_biased.shape[0])
  indices = jnp.asarray(indices)
  in_range = _check_indices(indices, num_examples, real, "loss_biased")
  writes = (real & in_range & check_finite_rows(loss_biased, real, "loss_biased")
            & check_finite_rows(loss_debiased, real, "loss_debiased"))
  skipped = count_skipped(real, writes, axis_name)
  positions = jnp.where(writes, indices, num_examples).astype(jnp.int32)
  # The global batch's positions and losses on every device (also when the batch is laid out over
  # Explicit mesh axes without `axis_name`): the update reads and writes the N-sized state there.
  (positions, loss_biased, loss_debiased), _ = class_sums.replicated_batch(
      axis_name, positions, *jax.lax.stop_gradient((loss_biased, loss_debiased)))
  losses = jnp.stack([loss_biased, loss_debiased]).astype(jnp.float32)
  # The last row of the global batch writing each position; earlier repeats write nothing.
  rows = jnp.arange(positions.shape[0], dtype=jnp.int32)
  last_row = jax.ops.segment_max(rows, positions, num_segments=num_examples)
  is_last = last_row[jnp.minimum(positions, num_examples - 1)] == rows
  targets = jnp.where((positions < num_examples) & is_last, positions, num_examples)
  read = jnp.minimum(targets, num_examples - 1)
  old = jnp.stack([state.ema_biased, state.ema_debiased]).astype(jnp.float32)[:, read]
  new = jnp.where(state.seen[read], alpha * old + (1 - alpha) * losses, losses)
  if alpha_ok is not True:  # a traced α outside [0, 1]: NaN EMAs, never a silent update
    new = jnp.where(alpha_ok, new, jnp.nan)
  ema_biased = state.ema_biased.at[targets].set(new[0].astype(state.ema_biased.dtype), mode="drop")
  ema_debiased = state.ema_debiased.at[targets].set(new[1].astype(state.ema_debiased.dtype),
                                                    mode="drop")
  seen = state.seen.at[targets].set(True, mode="drop")
  return LfFState(ema_biased, ema_debiased, seen, state.skipped_rows + skipped)


def lff_weights(state: LfFState, indices: ArrayLike, labels: ArrayLike, dataset_labels: ArrayLike,
                num_classes: int, *, where: ArrayLike | None = None) -> jax.Array:
  r"""LfF's per-example weights of the debiased model's cross-entropy, [B] in [0, 1).

  Nam et al., NeurIPS 2020, arXiv 2007.02561, Algorithm 1 (the relative difficulty score):

  .. math:: \tilde e_i = \frac{e_i}{\max\{e_j : y_j = y_i,\ j = 1, \ldots, N\}}, \qquad
     W_i = \frac{\tilde e_{B,i}}{\tilde e_{B,i} + \tilde e_{D,i} + 10^{-8}}

  Unvisited examples have e_j = 0. The class maxima run over all N training examples
  (`jax.ops.segment_max` over the dataset labels, O(N) per step, as the reference's
  `EMA.max_loss`). A class whose maximum is 0 (its members unvisited or with zero loss) gives ẽ = 0,
  hence W = 0, where the reference divides 0 by 0. W < 1 holds in exact arithmetic; in float32 (as
  in the reference) W rounds to 1 once ẽ_D + 1e-8 < 6e-8·ẽ_B, e.g. when f_D's loss has underflowed
  to 0. Pass the state after this step's `lff_update_ema`, as the reference does. No communication:
  the state is identical on every device.

  Args:
    state: `LfFState` with N entries.
    indices: int [B] dataset positions of the batch.
    labels: int [B] in [0, K), the batch's labels (which select the class maximum, as in the
      reference; they are the dataset labels at `indices`).
    dataset_labels: int [N] in [0, K), every training example's label.
    num_classes: K, the number of classes.
    where: optional bool [B]; padding rows give 0.

  Returns:
    float32 [B]; NaN for a real row with an out-of-range label or index under `jit`. B = 0: an
    empty [0]. K = 1: one class maximum, over every training example.

  Raises:
    ValueError: a bad state, `dataset_labels` not [N], indices or labels not [B], or (eagerly) a
      label or index out of range.
    TypeError: non-integer labels or indices.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> state = reweight_jax.baselines.init_lff_state(3)
    >>> state = reweight_jax.baselines.lff_update_ema(state, jnp.array([0, 1, 2]), jnp.array([2.0, 1.0, 1.0]),
    ...                                     jnp.array([1.0, 1.0, 0.5]))
    >>> dataset_labels = jnp.array([0, 0, 1])
    >>> weights = reweight_jax.baselines.lff_weights(state, jnp.array([0, 1, 2]), dataset_labels, dataset_labels, 2)
    >>> print(np.asarray(weights, float).round(4))
    [0.5    0.3333 0.5   ]
  """
  num_examples = _check_state(state)
  num_classes = check_num_classes(num_classes)
  labels = jnp.asarray(labels)
  label_ok = check_labels(labels, num_classes, where=where)
  real = check_where(where, labels.shape[0])
  indices = jnp.asarray(indices)
  index_ok = _check_indices(indices, num_examples, real)
  dataset_labels = jnp.asarray(dataset_labels)
  check_labels(dataset_labels, num_classes, "dataset_labels")
  if dataset_labels.shape != (num_examples,):
    raise ValueError(f"dataset_labels: expected shape ({num_examples},) like the state, got "
                     f"{dataset_labels.shape}.")
  emas = jnp.stack([state.ema_biased, state.ema_debiased]).astype(jnp.float32)  # [2, N]
  # An out-of-range dataset label (only under jit) joins no class: segment_max drops it.
  class_max = jax.vmap(lambda e: jax.ops.segment_max(e, dataset_labels, num_segments=num_classes))(
      emas)  # [2, K]; −inf for a class without examples
  class_max = jnp.where(class_max > 0, class_max, 1.0)  # ẽ = 0/1 = 0 where the maximum is 0
  batch_max = jax.vmap(lambda m: take_class_values(m, labels, label_ok))(class_max)  # [2, B]
  batch_emas = explicit_mesh.take(emas.T, jnp.where(index_ok, indices, 0)).T
  normalized = batch_emas / batch_max
  weights = normalized[0] / (normalized[0] + normalized[1] + 1e-8)
  weights = jnp.where(index_ok, weights, jnp.nan)
  return jnp.where(real, weights, 0.0)


def lff_loss(logits_biased: ArrayLike, logits_debiased: ArrayLike, labels: ArrayLike,
             indices: ArrayLike, state: LfFState, dataset_labels: ArrayLike, *, q: float = 0.7,
             alpha: float = 0.7, axis_name: str | None = None, where: ArrayLike | None = None
             ) -> tuple[jax.Array, LfFState, LfFAux]:
  r"""One LfF step of both models; returns `(loss, new_state, aux)`.

  Nam et al., NeurIPS 2020, arXiv 2007.02561, Algorithm 1 (and `train.py` of the reference):

  .. math:: \ell_{B,i} = \mathrm{CE}(z^B_i, y_i), \qquad \ell_{D,i} = \mathrm{CE}(z^D_i, y_i),
     \qquad \mathrm{loss} = \frac{1}{B} \sum_i \mathrm{GCE}_q(z^B_i, y_i)
       + \frac{1}{B} \sum_i W_i\, \mathrm{CE}(z^D_i, y_i),

  where ℓ_B and ℓ_D update the EMAs (`lff_update_ema`, constants) and W_i comes from the updated
  EMAs (`lff_weights`, a constant). The order is the reference's: EMA update with this step's losses
  first, then the class maxima and the weights, so an example on its first visit has e = ℓ. The
  biased model's gradient comes only from the GCE term and the debiased model's only from the
  weighted CE term, so one backward pass of the sum trains both.

  Data parallel (`axis_name`): the EMA update is the global batch's on every device (all-gathered),
  B counts the real rows of the global batch, and the returned loss is this device's share
  :math:`N_\mathrm{devices} \sum_{\text{local } i} (\mathrm{GCE}_{B,i} + W_i \mathrm{CE}_{D,i})/B`:
  `lax.pmean` of it (and of the gradients) is the loss (gradient) of the concatenated batch on one
  device. Under `jax.shard_map`'s default `check_vma=True` the loss is still this share and the new
  state is typed replicated (`out_specs=P()`); take the gradient of `lax.pmean(loss, axis_name)`,
  which JAX sums over the devices itself (the share's own gradient is N_devices times the global
  one). Without `axis_name`, `jax.jit` over a batch laid out with `NamedSharding` (Explicit or Auto
  mesh axes) sees the global batch: the loss is the global value, the state replicated.

  Args:
    logits_biased: float [B, K] logits of the biased model f_B.
    logits_debiased: float [B, K] logits of the debiased model f_D (the one evaluated).
    labels: int [B] in [0, K).
    indices: int [B] the examples' positions in the training set, [0, N).
    state: `LfFState` (`init_lff_state(N)` at the start).
    dataset_labels: int [N], every training example's label (for the class maxima).
    q: GCE exponent in (0, 1] (0.7).
    alpha: EMA decay in [0, 1] (0.7).
    axis_name: data-parallel axis name or None.
    where: optional bool [B]; False marks padding, which counts nowhere and writes nothing. Its
      logits (inf, NaN), indices and labels may be anything, eagerly too.

  Returns:
    (loss, new_state, LfFAux). A real row with an out-of-range label or index makes the loss NaN
    under `jit` and writes nothing into the state. B = 0 (or every row padding): loss 0, the state
    unchanged. K = 1: both cross-entropies and the GCE are 0, so the loss and every weight are 0.

  Raises:
    ValueError: logits of different shapes, labels or indices not [B], a bad state, q or α out of
      range, or (eagerly) a real row's label or index out of range.
    TypeError: non-floating logits, non-integer labels or indices.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.5]])
    >>> labels = jnp.array([0, 1, 2, 1])
    >>> state = reweight_jax.baselines.init_lff_state(4)  # a training set of 4 examples, all in this batch
    >>> indices, dataset_labels = jnp.array([0, 1, 2, 3]), labels
    >>> loss, state, aux = reweight_jax.baselines.lff_loss(logits, 2 * logits, labels, indices, state,
    ...                                          dataset_labels)
    >>> print(f"{loss:.4f}", np.asarray(aux.weights, float).round(4), int(state.seen.sum()))
    0.2551 [0.5   0.5   0.5   0.621] 4
  """
  logits_biased = check_floating(logits_biased, 2, "logits_biased")
  logits_debiased = check_floating(logits_debiased, 2, "logits_debiased")
  if logits_debiased.shape != logits_biased.shape:
    raise ValueError(f"logits_debiased: expected the shape {logits_biased.shape} of logits_biased, "
                     f"got {logits_debiased.shape}.")
  num_classes = logits_biased.shape[1]
  labels = jnp.asarray(labels)
  label_ok = check_labels(labels, num_classes, where=where)
  real = check_where(where, labels.shape[0])
  indices = jnp.asarray(indices)
  index_ok = _check_indices(indices, _check_state(state), real)

  ce_biased = cross_entropy_loss(logits_biased, labels, where=where)
  ce_debiased = cross_entropy_loss(logits_debiased, labels, where=where)
  gce_biased = gce_loss(logits_biased, labels, q=q, where=where)
  # Rows with a bad label (NaN cross-entropies), index or logit write nothing and are counted in
  # the state's `skipped_rows`; the loss and its gradient are NaN below.
  finite_logits = finite_rows(logits_biased) & finite_rows(logits_debiased)
  written = jax.lax.stop_gradient(
      jnp.where(finite_logits, jnp.stack([ce_biased, ce_debiased]), jnp.nan))
  new_state = lff_update_ema(state, indices, written[0], written[1], alpha=alpha, where=real,
                             axis_name=axis_name)
  weights = jax.lax.stop_gradient(lff_weights(
      new_state, jnp.where(real, indices, 0), index_labels(labels, real), dataset_labels,
      num_classes, where=real))
  weights = jnp.where(real & ~(label_ok & index_ok), jnp.nan, weights)

  per_example = jnp.where(real, gce_biased + weights * ce_debiased, 0.0)
  count = jnp.sum(real.astype(jnp.float32))
  if axis_name is not None:
    count = jax.lax.psum(count, axis_name)
  loss = class_sums.num_devices(axis_name) * jnp.sum(per_example) / jnp.maximum(count, 1.0)
  clean = label_ok & index_ok & finite_logits
  loss = poison_unless(loss, jnp.all(clean | ~real))
  return loss, new_state, LfFAux(weights, ce_biased, ce_debiased, gce_biased)

