"""The loss registry: each method's batch objective (`Loss`: apply, the config sub-trees it reads, the
state it carries, a deferred start and the entry before it, its checks), keyed by `config.loss`."""
