"""Flax port vs the PyTorch reference on the same inputs: max abs diff and top-1 agreement."""
import jax, numpy as np
from experiments.models.pretrained import efficientnet_lite as el
inputs, ref = np.load("/tmp/port/inputs.npz"), np.load("/tmp/port/torch_out.npz")
variables = el.load_lite0_params()
model = el.EfficientNetLite0()
for r in (224, 160, 128, 97):
  logits, features = jax.jit(model.apply)(variables, inputs[f"x{r}"])
  tl, tf = ref[f"logits{r}"], ref[f"features{r}"]
  print(f"r={r}: max|Δlogits|={np.abs(logits - tl).max():.2e} (max|logit| {np.abs(tl).max():.1f}) "
        f"max|Δfeatures|={np.abs(features - tf).max():.2e} (max|f| {np.abs(tf).max():.2f}) "
        f"top1 agree {np.mean(np.argmax(logits, -1) == np.argmax(tl, -1)):.0%} "
        f"top1 flax {np.argmax(logits, -1).tolist()} torch {np.argmax(tl, -1).tolist()}")
