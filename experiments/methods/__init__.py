"""The methods, one module each: a method's batch objective, its config sub-tree (defaults and
ranges), the state it carries, its recipe (model wrapper, views, sampler, paired batches, epoch-end
pass) and, where it has one, its per-example loss, declared as `METHODS = (Method(...), ...)`; the
library functions they call stay in `mr2_jax` and `reweight_jax`. `inverse_reweight` declares a
`WRAPPER` instead: the inverse reweighting around every method with a per-example loss.

Three modules here declare no method: `method` (what a method declares, and the typed values a loss
reads besides the batch), `batch_means` (a loss's share of a global-batch mean) and `registry` (the
loss registry, `config.loss` → the method, built from the other modules by discovery). Adding a
method is one new module here and its test, and nothing outside this package names a method.
"""
