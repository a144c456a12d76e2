#!/usr/bin/env bash
# The pure-Python packages tools/reference.sh needs that the accelerator image lacks, as wheels
# in .whl/ (git-ignored; carry it). Run here, where pip reaches the registry.
#   bash tools/wheels.sh              download them to .whl/
#   source tools/wheels.sh --install  on the accelerator: install .whl/ (if carried) to /tmp/site,
#                                     put it and the checkout on PYTHONPATH, print the GPU
if [[ ${1:-} == --install ]]; then
  if compgen -G ".whl/*.whl" > /dev/null; then
    "${python:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
  fi
  export PYTHONPATH=$PWD:${PYTHONPATH:-}
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv || true
  return 0 2>/dev/null || exit 0
fi
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation py \
  --platform any -d .whl "ml-collections>=1.0,<2" "tensorboardx>=2.6,<3"
ls -l .whl
