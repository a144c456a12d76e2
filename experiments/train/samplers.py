"""Samplers the trainer owns: a method that trains on an edited training set names one in its loss
entry (`Loss.sampler`); each maps (config, training split) to (the dataset positions one epoch draws
from, a record written to the run's sampler.json)."""

from experiments.train import jtt_error_set

SAMPLERS = {"jtt": jtt_error_set.upsampled_epoch}
