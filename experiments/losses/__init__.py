"""The loss registry: each method's batch objective (`Loss`: apply, the config sub-trees it reads, the
state it carries, a deferred start and the entry before it, its checks), keyed by `config.loss`.

`registry` holds the entries by name and builds a run's loss function (callers read every name of
the package from it); `entry` is what an entry is, `config_trees` the config sub-trees, `batch_means`
a loss's share of a global-batch mean; the method families compute the losses
(`reweighting_losses`, `long_tail_losses`, `dro_losses`, `contrastive_losses`, `debiasing_losses`,
`pipelines`)."""
