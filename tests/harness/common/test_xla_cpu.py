"""experiments.common.xla_cpu: the tuned XLA CPU flags change speed, not results."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from experiments.common import xla_cpu

REPO = pathlib.Path(__file__).resolve().parents[3]

# One ResNet-32 SGD step's gradients (MR2 + reweighting, the trainer's own loss and step) written to
# an .npz; run once with XLA's defaults and once with the tuned flags, each in a fresh process.
SCRIPT = r"""
import sys
import numpy as np
import jax
import jax.numpy as jnp
from experiments.methods import registry
from experiments import models
from experiments.train import steps
from experiments.train import train_state
from experiments.configs import digits_lt
config = digits_lt.get_config()
config.loss = "mr2+inverse_reweight"
config.reweight.start_epoch = 0
model = models.create_model("resnet32", 10)
rng = np.random.default_rng(0)
images = jnp.asarray(rng.normal(size=(64, 32, 32, 3)), jnp.float32)
labels = jnp.asarray(rng.integers(0, 10, 64), jnp.int32)
lr = train_state.create_learning_rate_fn(config, steps_per_epoch=10)
state = train_state.create_train_state(config, model, (32, 32, 3), 10, lr, jax.random.key(0))
task = steps.Task(class_counts=(10.0,) * 10, steps_per_epoch=10)
step = jax.jit(lambda s, b: steps.train_step(s, b, loss_fn=registry.make_loss_fn(config), task=task,
                                             learning_rate_fn=lr))
new_state, metrics = step(state, {"image": images, "label": labels})
leaves = jax.tree.leaves(jax.tree.map(lambda new, old: new - old, new_state.params, state.params))
np.savez(sys.argv[1], loss=np.asarray(metrics["loss"]), *[np.asarray(x) for x in leaves])
"""


def _run(out, xla_flags):
  env = {**os.environ, "XLA_FLAGS": xla_flags, "PYTHONPATH": str(REPO),
         "JAX_PLATFORMS": "cpu"}
  subprocess.run([sys.executable, "-c", SCRIPT, str(out)], cwd=REPO, env=env, check=True,
                 timeout=600)
  return np.load(out)


@pytest.mark.slow  # ≈ 60 s on 2 cores: two subprocesses compiling ResNet-32
def test_tuned_flags_give_the_same_update(tmp_path):
  default = _run(tmp_path / "default.npz", "")
  tuned = _run(tmp_path / "tuned.npz", " ".join(xla_cpu.TUNED_FLAGS))
  assert set(default.files) == set(tuned.files) and len(default.files) > 30
  np.testing.assert_allclose(tuned["loss"], default["loss"], rtol=1e-5)
  for name in default.files:
    scale = np.max(np.abs(default[name])) + 1e-12
    np.testing.assert_allclose(tuned[name], default[name], rtol=0, atol=1e-4 * scale)
  # The flags did take effect: other kernels, other float rounding (measured: 1.2e-7 relative at
  # batch 64; at batch 16 XLA keeps its default kernels and the two runs are bit-identical).
  assert any(not np.array_equal(tuned[name], default[name]) for name in default.files)


def test_configure_appends_without_overriding_the_user(monkeypatch):
  # Under pytest JAX is already initialised, so only the idempotent / refusing paths run here; the
  # appending path runs in every `python -m experiments.main` (test_train's subprocesses).
  monkeypatch.setenv("XLA_FLAGS", " ".join(xla_cpu.TUNED_FLAGS))
  assert xla_cpu.configure() == " ".join(xla_cpu.TUNED_FLAGS)
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
  assert xla_cpu.configure(enable=False) == "--xla_cpu_enable_fast_math=false"
  import jax
  jax.numpy.zeros(1).block_until_ready()  # make sure the backend exists
  with pytest.raises(RuntimeError, match="before the first JAX computation"):
    xla_cpu.configure()


def test_configure_before_jax_starts():
  code = ("import os; os.environ['XLA_FLAGS'] = "
          "'--xla_cpu_experimental_ynn_fusion_type=+eltwise --xla_cpu_enable_fast_math=false'\n"
          "from experiments.common import xla_cpu; print(xla_cpu.configure())\n"
          "import jax.numpy as jnp; jnp.ones(2).block_until_ready()")
  out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       check=True, env={**os.environ, "PYTHONPATH": str(REPO)}).stdout.strip()
  # The user's own ynn setting is kept; nothing is duplicated.
  assert out == ("--xla_cpu_experimental_ynn_fusion_type=+eltwise --xla_cpu_enable_fast_math=false")
  code = "from experiments.common import xla_cpu; print(xla_cpu.configure())"
  out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       check=True, env={**{k: v for k, v in os.environ.items() if k != "XLA_FLAGS"},
                                        "PYTHONPATH": str(REPO)}).stdout.strip()
  assert out == " ".join(xla_cpu.TUNED_FLAGS)
