"""A study's exported run carries its final parameters and BatchNorm statistics
(`checkpoints.write_variables_npz` through `regenerate_reports.export_runs`): the same arrays as the
run's latest checkpoint, read back into the layout `model.apply` takes."""

import jax
import numpy as np

from experiments.configs import digits_lt
from experiments.data import loading
from experiments.studies import regenerate_reports
from experiments.train import checkpoints
from experiments.train import loop
from experiments.train import train_state


def test_an_exported_run_carries_its_final_model_variables(tmp_path):
  config = digits_lt.get_config()
  config.batch_size = 32
  config.progress_bar = False
  config.nc_metrics = False
  config.checkpoint_every_steps = 4
  workdir = tmp_path / "work" / "ce" / "seed0"
  loop.train_and_evaluate(config, workdir, max_steps=6)
  written = regenerate_reports.export_runs(tmp_path / "work", tmp_path / "runs")
  assert [p.name for p in written] == ["ce-seed0.json"]
  path = tmp_path / "runs" / "ce-seed0.variables.npz"
  step, exported = checkpoints.read_variables_npz(path)
  train, _, _ = loading.load_data(config)
  model = train_state.build_model(config, train.num_classes)
  saved_step, saved = checkpoints.read_variables(workdir, model, train.images.shape[1:])
  assert step == saved_step == 6
  assert jax.tree.structure(exported) == jax.tree.structure(jax.tree.map(np.asarray, saved))
  for got, want in zip(jax.tree.leaves(exported), jax.tree.leaves(saved)):
    np.testing.assert_array_equal(got, np.asarray(want))
  # The model runs on them as read back.
  logits = model.apply(exported, train.images[:2].astype(np.float32), train=False)
  assert np.asarray(logits[0] if isinstance(logits, tuple) else logits).shape[0] == 2
