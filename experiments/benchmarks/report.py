"""`write_report`: a benchmark's Markdown table printed, and with a folder also written as JSON and
Markdown (the report of `host_threads` and `input_throughput`)."""

import json
import pathlib


def write_report(out: str | None, name: str, result: dict, lines: list[str]) -> None:
  """Prints the Markdown `lines`; with `out`, also writes `<out>/<name>.json` and `<out>/<name>.md`."""
  print("\n".join(lines))
  if out:
    folder = pathlib.Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (folder / f"{name}.md").write_text("\n".join(lines) + "\n")
