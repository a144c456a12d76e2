"""Training harness composing `mr2_jax` and `reweight_jax`: data, models, train, evaluate, configs."""
