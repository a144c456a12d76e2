"""Reading a run's final checkpoint in tests (plain NumPy trees, no target structure)."""

import pathlib

import orbax.checkpoint as ocp


def restore_latest(workdir):
  """(step, state dict) of the latest checkpoint in `workdir`/checkpoints."""
  manager = ocp.CheckpointManager(pathlib.Path(workdir) / "checkpoints")
  step = manager.latest_step()
  restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
  return step, restored.state
