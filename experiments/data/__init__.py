"""Data: sources (image folders, arrays, TFDS / ArrayRecord files), the long-tailed subset and the
validation hold-out, augmentation, batches and the input pipelines (NumPy threads or grain).

Like MaxText's `input_pipeline/` and big_vision's `pp/`, the data code sits below the models and the
trainer and knows nothing of either; unlike big_vision's string-built preprocessing, augmentations
are Python functions in a registry keyed by `config.augment_policy`, so a step's input is a plain
function of (seed, step)."""
