"""Picks one CIFAR-10 test image per class and writes them (uint8) plus preprocessed inputs."""
import numpy as np
from experiments.data import loading
from experiments.models.pretrained import efficientnet_lite as el

test = loading.load_split("cifar10_jpeg", "test", "/work/shared/data/cifar10_jpeg")
rng = np.random.default_rng(0)
idx = np.array([rng.choice(np.flatnonzero(test.labels == k)) for k in range(10)])
out = {"indices": idx, "images": test.images[idx], "labels": test.labels[idx]}
for r in (224, 160, 128, 97):
  out[f"x{r}"] = np.asarray(el.preprocess(test.images[idx], r))
np.savez("/tmp/port/inputs.npz", **out)
print(idx)
