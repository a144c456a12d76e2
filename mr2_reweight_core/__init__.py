"""The per-class core shared by `mr2_jax` and `reweight_jax` (private: not a public API).

Dependency direction: `mr2_jax` → `mr2_reweight_core` ← `reweight_jax`; neither method package imports the
other, and `mr2_reweight_core` imports neither. Users import the public names from `mr2_jax` / `reweight_jax`
(both re-export what they document from here).

Modules::

  class_sums     class slots and exact, psum-able per-class sums and counts.
  class_order    the batch sorted by class, rows without a partner last; prefix sizes for the
                 per-class work (MR2's ℓ_s̄ and class statistics when K > B).
  checks         argument checks (errors name the argument), the traced-check switch, the one
                 out-of-range label guard (`index_labels`, `take_class_values`).
  cross_entropy  the label's log-softmax and the plain per-example cross-entropy.
  explicit_mesh  where per-class results live when the batch is laid out over Explicit mesh axes
                 (`jax.jit` of sharded arrays): reductions replicated, per-row reads with the rows.
  metrics        per-class correct counts and loss sums, class means (NaN for an absent class),
                 Easy/Medium/Hard groups, worst class, spread, ρ.
"""
