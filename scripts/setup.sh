#!/usr/bin/env bash
# Installs attnprof, its dependencies and its test tools into the current Python.
# torch first: a CPU build of torch 2.13.0 where none is installed (on this project's
# machines it comes from local disk; on a GPU machine PyPI's Linux wheel of the same
# version carries CUDA). An existing torch >= 2.3 is kept as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing torch==2.13.0" >&2
  "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q -e ".[test]"
"$PY" -c "import attnprof.cli, torch; print('setup: attnprof ready, torch', torch.__version__)" >&2
