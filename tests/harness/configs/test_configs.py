"""Every config in experiments/configs validates and reads as recorded in tests/fixtures/configs/;
a config file is read without the harness (ml_collections and the configs it starts from, no JAX,
no method module), starts from `default.py`, its family's data block or the config it varies, and
sets fields; no two configs share a run of six lines (a shared block lives in one file). The
papers' recipes run end to end on tiny data: the released reweighting recipe (three views,
AutoAugment + Cutout and SimCLR views, MiLeLR, CE then the reweighting), its cosine alternative,
ETF-DR (fixed ETF head, DR with GivenEw, mixup) and GLMC (paired re-balanced batches, two passes),
each alone and with the reweighting, on mock CIFAR-10 (`tfds.testing.mock_data`: 32×32×3, nothing
downloaded) with the small CNN (the config's own network in the slow run), 2 epochs with the
deferred losses starting at epoch 1 so both branches train."""

import ast
import importlib
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from experiments.configs import schema
from experiments.methods import registry
from experiments.train import loop

ROOT = pathlib.Path(__file__).resolve().parents[3]
CONFIG_DIR = ROOT / "experiments" / "configs"
# The shipped configs: every module with a get_config (schema.py is the check, not a config).
CONFIGS = sorted(p.stem for p in CONFIG_DIR.glob("*.py") if p.stem not in ("__init__", "schema"))
# Each config's values (`to_json`, keys sorted); a deliberate change of a config rewrites its file.
RECORDED = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "configs"


def load(name):
  return importlib.import_module(f"experiments.configs.{name}").get_config()


@pytest.mark.parametrize("name", CONFIGS)
def test_every_config_validates(name):
  schema.validate(load(name))


@pytest.mark.parametrize("name", CONFIGS)
def test_every_config_has_its_recorded_values(name):
  assert json.loads(load(name).to_json()) == json.loads((RECORDED / f"{name}.json").read_text())


def test_a_config_file_is_read_without_the_harness():
  """Reading every shipped config loads `ml_collections` and the configs' own modules: no JAX,
  no method module, no other package of the harness."""
  code = ("import importlib, json, sys\n"
          f"for name in {CONFIGS!r}:\n"
          "  importlib.import_module(f'experiments.configs.{name}').get_config()\n"
          "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
          "('experiments', 'jax', 'flax', 'mr2_jax', 'reweight_jax', 'mr2_reweight_core'))))")
  loaded = json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                                     capture_output=True, text=True).stdout)
  assert loaded == sorted(["experiments", "experiments.configs",
                           *(f"experiments.configs.{name}" for name in CONFIGS)])


def _starts_from(name) -> str:
  """The config module `name` starts from (its body's first statement)."""
  body = next(n for n in ast.parse((CONFIG_DIR / f"{name}.py").read_text()).body
              if isinstance(n, ast.FunctionDef)).body
  return ast.unparse(body[0]).removeprefix("config = ").removesuffix(".get_config()")


@pytest.mark.parametrize("name", [n for n in CONFIGS if n != "default"])
def test_every_config_starts_from_one_config_and_sets_fields(name):
  """big_vision's shape: a config imports `ml_collections` and the one config it starts from —
  `default.py`, its family's data block (`cifar10_lt_data.py`, `imagenet_data.py`) or the config
  it is a variant of — starts from its `get_config()` and sets fields, nothing else; the chain
  ends at `default.py`."""
  tree = ast.parse((CONFIG_DIR / f"{name}.py").read_text())
  imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
  modules = [(node.module, alias.name) if isinstance(node, ast.ImportFrom) else (alias.name, None)
             for node in imports for alias in node.names]
  base = _starts_from(name)
  assert set(modules) - {("ml_collections", None)} == {("experiments.configs", base)}, modules
  body = next(n for n in tree.body if isinstance(n, ast.FunctionDef)).body
  assert all(isinstance(stmt, ast.Assign) and ast.unparse(stmt.targets[0]).startswith("config.")
             for stmt in body[1:-1]), name
  assert ast.unparse(body[-1]) == "return config"
  seen = [name]
  while seen[-1] != "default":
    seen.append(_starts_from(seen[-1]))
    assert len(seen) <= 5, seen


def _code_lines(path: pathlib.Path) -> list[str]:
  """A config's `def get_config():` line and its statements, one line each (white space folded;
  comments, blank lines and line breaks inside a statement left out)."""
  function = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef))
  return ["def get_config():", *(" ".join(ast.unparse(stmt).split()) for stmt in function.body)]


def _longest_shared_run(a: list[str], b: list[str]) -> int:
  best = 0
  previous = [0] * (len(b) + 1)
  for x in a:
    current = [0] * (len(b) + 1)
    for j, y in enumerate(b, 1):
      if x == y:
        current[j] = previous[j - 1] + 1
        best = max(best, current[j])
    previous = current
  return best


def test_no_two_configs_share_a_run_of_six_statements():
  """What configs share (a family's data, a recipe a variant changes) is written once: no two
  shipped configs share six statements in a row."""
  lines = {name: _code_lines(CONFIG_DIR / f"{name}.py") for name in CONFIGS}
  shared = [(a, b, run) for i, a in enumerate(CONFIGS) for b in CONFIGS[i + 1:]
            if (run := _longest_shared_run(lines[a], lines[b])) >= 6]
  assert not shared, shared


def test_the_run_config_of_every_config_and_loss_holds_its_methods_sub_trees_alone():
  """For every shipped config and every registry entry its runs could train, the run's config
  (`schema.complete`) holds the shared fields and the sub-trees that entry reads, each complete,
  and nothing else."""
  shared = set(load("default"))
  for name in CONFIGS:
    config = load(name)
    for loss in registry.REGISTRY:
      config.loss = loss
      run = schema.complete(config)
      assert set(run) == shared | set(registry.method_trees(loss)), (name, loss)
      for key in registry.method_trees(loss):
        assert set(run[key]) == set(registry.CONFIG_TREES[key].defaults()), (name, loss, key)


def tiny(config, model):
  config = registry.with_method_trees(config)  # the loss's sub-trees, to set their fields
  config.dataset = "tfds:cifar10"
  config.data_dir = None
  config.imbalance_factor = 10.0
  config.model = model
  config.num_epochs = 2
  config.warmup_epochs = 1
  config.batch_size = 16
  config.eval_batch_size = 64
  if "reweight" in config:
    config.reweight.start_epoch = 1
  config.milelr_switch_epoch = 1
  config.step_epochs = (1,)
  config.progress_bar = False
  config.nc_metrics = config.head == "etf"  # NC2–NC4 against the fixed ETF: that head's path
  return config


# The released recipe and GLMC with the reweighting in the default run (the deferred loss starts at
# epoch 1: both phases train); ETF-DR's (its step: tests/harness/train/test_loop.py,
# tests/harness/methods/test_registry.py), the cosine alternative and the pipelines without the
# reweighting in the slow run.
RECIPES = [("cifar10_lt", "inverse_reweight"),
           ("cifar10_lt_glmc_reweight", "glmc+inverse_reweight"),
           pytest.param("cifar10_lt_etf_dr", "etf_dr+inverse_reweight", marks=pytest.mark.slow),
           pytest.param("cifar10_lt_cosine", "inverse_reweight", marks=pytest.mark.slow),
           pytest.param("cifar10_lt_etf_dr", "etf_dr", marks=pytest.mark.slow),
           pytest.param("cifar10_lt_glmc", "glmc", marks=pytest.mark.slow)]


@pytest.mark.parametrize("model", ["small_cnn", pytest.param("config", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name, loss", RECIPES)
def test_recipe_runs_end_to_end_on_mock_cifar10(name, loss, model, tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  config = load(name)
  config.loss = loss
  config = tiny(config, config.model if model == "config" else model)
  with tfds.testing.mock_data(num_examples=160):
    summary = loop.train_and_evaluate(config, tmp_path / name, max_steps=6)
  assert summary["steps"] == 6 and summary["epochs"] > 1  # past the start of the deferred loss
  assert np.isfinite(summary["overall_accuracy"])
  if config.nc_metrics:
    assert all(np.isfinite(v) for v in summary["neural_collapse"].values())
  if loss.endswith("inverse_reweight"):
    assert sum(summary["reweight_batch_counts"]) > 0  # the reweighting ran after epoch 1
