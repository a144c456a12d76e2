"""Linear probes: a classifier trained on frozen features of a pretrained encoder."""
