"""Networks by name (`registry.create_model`): ResNet-32 / ResNet-50 / ViT-B/16 / small CNNs with
linear, cosine or fixed-ETF heads, the wrappers a method adds (projection, biased twin), and the
readers of pretrained weights (`pretrained/`). Like big_vision's `models/`, one module per family;
the registry maps `config.model` to one of them."""
