"""The methods, one module each: a method's batch objective, its config sub-tree (defaults and
ranges), the state it carries, its recipe (model wrapper, views, sampler, paired batches, epoch-end
pass) and, where it has one, its per-example loss, declared as `METHODS = (Method(...), ...)`; the
library functions they call stay in `mr2_jax` and `reweight_jax`. `inverse_reweight` declares a
`WRAPPER` instead: the inverse reweighting around every method with a per-example loss.

Two modules here declare no method: `method` (what a method declares, and the typed values a loss
reads besides the batch) and `batch_means` (a loss's share of a global-batch mean). The registry,
`experiments.losses`, is built from the others; adding a method is one new module here and its
test, and nothing outside this package names a method.
"""
