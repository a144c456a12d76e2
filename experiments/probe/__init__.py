"""Frozen-feature studies' features: EfficientNet-Lite0 features of CIFAR-10, extracted once and
cached as a data source (`features`, written through `experiments.data.cached_features`). Every run
on them is a run of the trainer (`experiments/configs/probe_cifar10.py`); the studies are
`experiments.studies.linear_probe` and `experiments.studies.probe_comparison`."""
