"""The best test epoch beside the final one: the number the LDAM-DRW release reports.

Cao et al. (NeurIPS 2019, arXiv 1906.07413; github.com/kaidic/LDAM-DRW, `cifar_train.py`) evaluate
the test set after every epoch and report the maximum over epochs, `best_acc1`. This project reports
the final epoch (no model is selected on the test set); to set our numbers beside published ones
made that way, runs with `config.test_every_epochs` log the test accuracy over training
(metrics.jsonl, 'test_accuracy'), and the report adds the best of those epochs in its own, labelled
column. It selects nothing and is never the headline.
"""

from __future__ import annotations

import json
import pathlib
from typing import Sequence

from experiments.report import seed_stats

BEST_EPOCH_LABEL = "best epoch (as the LDAM-DRW release reports it)"


def logged_test_accuracy(workdir: str | pathlib.Path) -> dict[float, float]:
  """{epoch: test accuracy} of a run's periodic test passes (empty when it logged none)."""
  path = pathlib.Path(workdir) / "metrics.jsonl"
  if not path.exists():
    return {}
  records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
  return {round(r["epoch"], 6): r["test_accuracy"] for r in records if "test_accuracy" in r}


def best_epoch(workdir: str | pathlib.Path) -> tuple[float, float] | None:
  """(the highest logged test accuracy, its epoch; the first on a tie), None if none was logged."""
  logged = logged_test_accuracy(workdir)
  if not logged:
    return None
  epoch = max(sorted(logged), key=lambda e: (logged[e], -e))
  return logged[epoch], epoch


def best_epoch_table(methods: dict[str, Sequence[str | pathlib.Path]],
                     summaries: dict[str, list[dict]]) -> dict[str, dict] | None:
  """Per method whose every run logged test passes: the final-epoch accuracy (the headline) and the
  best logged epoch's, each mean and sample std (ddof = 1) over seeds, and the best epochs; None
  when no method qualifies."""
  table = {}
  for name, dirs in methods.items():
    best = [best_epoch(d) for d in dirs]
    if not best or any(b is None for b in best):
      continue
    table[name] = {"final": seed_stats.mean_std([s["overall_accuracy"] for s in summaries[name]]),
                   "best": seed_stats.mean_std([b[0] for b in best]),
                   "best_epochs": [b[1] for b in best], "seeds": len(best)}
  return table or None


def best_epoch_markdown(table: dict[str, dict]) -> str:
  """The table of `best_epoch_table` in Markdown, with a line on how to read it."""
  lines = [f"Test accuracy (%), final epoch (the headline) and the {BEST_EPOCH_LABEL}: the maximum "
           "over the logged test passes, for comparison with published figures made that way; "
           f"nothing is selected by it ({seed_stats.spread([t['seeds'] for t in table.values()])}):",
           ""]
  rows = [[name, seed_stats.percent_cell(t["final"]), seed_stats.percent_cell(t["best"]),
           ", ".join(f"{e:g}" for e in t["best_epochs"])] for name, t in table.items()]
  lines += seed_stats.markdown_table(["method", "final epoch", BEST_EPOCH_LABEL, "best at epoch"],
                                    rows)
  return "\n".join(lines) + "\n"
