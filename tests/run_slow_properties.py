"""Runs the property tests' slow twins (1,000 generated examples each) one test at a time, resumably.

    python -m tests.run_slow_properties --out workdirs/property_runs/<name> [--jobs 2] [-k EXPR]
    python -m tests.run_slow_properties --out workdirs/property_runs/<name> --summary
    python -m tests.run_slow_properties --out workdirs/property_runs/<name> --progress

The whole slow profile is hours of CPU on a small machine, so it is run as one pytest process per
test (at `nice` 19, `--jobs` at a time) and each test's log is kept in `--out`: a rerun skips the
tests whose log already records a result, so the run can stop and continue across sessions.
`--summary` writes `SUMMARY.md` there: per test, the generated examples that passed / failed /
were invalid (from `--hypothesis-show-statistics`), the wall time and the result; `--progress`
prints the examples begun so far by each running test (`strategies.record_progress`). A failure's log
holds the reproduction blob (`print_blob`) and hypothesis' seed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import time

FILES = ("tests/harness/methods/test_properties_registry.py", "tests/lib/test_properties_stats.py",
         "tests/lib/test_properties_comparisons.py",
         "tests/lib/reweight_jax/baselines/test_etf_dr.py",
         "tests/lib/reweight_jax/baselines/test_glmc.py")


def collect(expression: str | None) -> list[str]:
  """The slow twins (tests named `*_slow`) matching `expression`. Default-profile tests that
  conftest moves to the slow run (MOVED_TO_SLOW) are not twins: their 1,000-example twin covers
  them."""
  command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", *FILES]
  if expression:
    command += ["-k", expression]
  out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
  lines = (line.strip() for line in out.splitlines())
  return [line for line in lines if "::" in line and re.search(r"_slow(\[|$)", line)]


def display_name(test_id: str) -> str:
  """The test's name; for a test outside the `test_properties_*.py` files (whose names may repeat
  across files) `<file stem>.<test name>`."""
  path, name = test_id.split("::", 1)
  if not os.path.basename(path).startswith("test_properties_"):
    name = os.path.splitext(os.path.basename(path))[0] + "." + name
  return name


def log_path(out: str, test_id: str) -> str:
  return os.path.join(out, re.sub(r"[^A-Za-z0-9_.+=-]+", "_", display_name(test_id)) + ".log")


def finished(path: str) -> bool:
  if not os.path.exists(path):
    return False
  with open(path) as f:
    return re.search(r"^(\d+ (passed|failed)|.*\d+ (passed|failed).* in )", f.read(), re.M) is not None


def run_one(out: str, test_id: str) -> str:
  path = log_path(out, test_id)
  env = dict(os.environ, PROPERTY_REPORT_DIR=os.path.splitext(path)[0] + ".worst",
             PROPERTY_PROGRESS=path + ".progress")
  start = time.time()
  commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                          text=True, check=False).stdout.strip()
  with open(path + ".partial", "w") as log:
    log.write(f"commit={commit} started={time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    log.flush()
    result = subprocess.run(
        ["nice", "-n", "19", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-m", "slow", test_id, "--hypothesis-show-statistics"],
        stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    log.write(f"\nwall_seconds={time.time() - start:.0f} returncode={result.returncode}\n")
  os.replace(path + ".partial", path)
  if os.path.exists(path + ".progress"):
    os.remove(path + ".progress")
  return f"{test_id}: returncode {result.returncode}, {time.time() - start:.0f} s"


STATS = re.compile(r"(\d+) passing, (\d+) failing, and (\d+) invalid")


def summarize(out: str, test_ids: list[str]) -> str:
  rows = ["| test | commit | passing | failing | invalid | wall s | result |",
          "|---|---|---|---|---|---|---|"]
  for test_id in test_ids:
    path = log_path(out, test_id)
    if not finished(path):
      rows.append(f"| `{display_name(test_id)}` | – | – | – | – | – | not run |")
      continue
    text = open(path).read()
    counts = [tuple(map(int, m)) for m in STATS.findall(text)]
    passing, failing, invalid = (sum(c[i] for c in counts) for i in range(3))
    wall = re.search(r"wall_seconds=(\d+)", text)
    commit = re.search(r"^commit=(\S+)", text, re.M)
    result = "passed" if re.search(r"\b1 passed\b", text) else "FAILED"
    rows.append(f"| `{display_name(test_id)}` | {commit.group(1) if commit else '?'} | "
                f"{passing} | {failing} | {invalid} | "
                f"{wall.group(1) if wall else '?'} | {result} |")
  return "\n".join(rows) + "\n"


def progress(out: str, test_ids: list[str]) -> str:
  """The tests running now (a `.partial` log) and how many examples each has begun."""
  lines = []
  for test_id in test_ids:
    path = log_path(out, test_id)
    if os.path.exists(path + ".partial"):
      done = (open(path + ".progress").read().strip() if os.path.exists(path + ".progress")
              else "fewer than 25 examples")
      lines.append(f"{display_name(test_id)}: {done}")
  return "\n".join(lines) or "nothing running"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", required=True)
  parser.add_argument("--jobs", type=int, default=2)
  parser.add_argument("-k", dest="expression", default=None)
  parser.add_argument("--summary", action="store_true")
  parser.add_argument("--progress", action="store_true", help="what is running, how far")
  args = parser.parse_args()
  os.makedirs(args.out, exist_ok=True)
  test_ids = collect(args.expression)
  if args.progress:
    print(progress(args.out, test_ids))
    return
  if args.summary:
    table = summarize(args.out, test_ids)
    with open(os.path.join(args.out, "SUMMARY.md"), "w") as f:
      f.write("Slow property twins (`python -m tests.run_slow_properties`), one pytest process "
              "per test.\n\n" + table)
    print(table)
    return
  todo = [t for t in test_ids if not finished(log_path(args.out, t))]
  print(f"{len(test_ids) - len(todo)} of {len(test_ids)} already done; running {len(todo)}",
        flush=True)
  with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
    for line in pool.map(lambda t: run_one(args.out, t), todo):
      print(line, flush=True)


if __name__ == "__main__":
  main()
