"""Samplers the trainer owns: a method that trains on an edited training set names one in its recipe
(`recipes.Recipe.sampler`; a name, because a sampler may read another run through the train state,
which itself reads the recipes); each maps (config, training split) to (the dataset positions one epoch draws
from, a record written to the run's sampler.json)."""

from experiments.train import jtt_error_set

SAMPLERS = {"jtt": jtt_error_set.upsampled_epoch}
