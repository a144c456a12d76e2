#!/usr/bin/env bash
# The pure-Python packages tools/reference.sh needs that the accelerator image lacks, as wheels
# in .whl/ (git-ignored; carry it). Run here, where pip reaches the registry.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation py \
  --platform any -d .whl "ml-collections>=1.0,<2" "tensorboardx>=2.6,<3"
ls -l .whl
