"""Linear probes: a classifier trained on frozen features of a pretrained encoder.

  features     EfficientNet-Lite0 features of CIFAR-10, extracted once and cached
  linear_head  a linear head on cached features: the recipe, the methods, training, accuracy
  summary      runs over seeds: difficulty groups, mean ± std, paired Δ vs ERM, tables, plot
  lff          Learning from Failure: a biased and a debiased head trained together
  adapter      a trainable MLP adapter under the head, CE on two views + λ·SupCon

The studies that use them are `experiments.studies.linear_probe` and
`experiments.studies.probe_comparison`."""
