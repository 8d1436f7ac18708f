#!/usr/bin/env bash
# The test suite on a CUDA build of torch, on a machine without a GPU (.ci/run runs it).
#
# A CUDA build reaches code a CPU build never does, GPU or not: torch.cuda._is_compiled() is true,
# so the fork rule counts threads (profiler/forks.py), a checkpoint of CPU tensors asks the CUDA
# runtime for devices, autograd starts its device threads, and RMSNorm's fused CUDA kernel exists.
# On 2026-12-05 this suite, on the lent GPU machine's release (torch 2.11.0+cu130), failed where the
# CPU build's had passed: a checkpoint's device query, another release's AutocastCUDA lists, tests
# that assumed a CPU build (docs/gpu.md "torch versions"). The GPU check runs on that release too,
# so this keeps the two from drifting apart.
#
#   scripts/cuda_build_suite.sh [PYTEST ARGS...]
#
#   CUDA_SUITE_TORCH=2.11.0        the torch release (PyPI's Linux wheel carries CUDA: ~3 GB to download, ~5 GB installed)
#   CUDA_SUITE_VENV=.venv-cuda     its virtual environment, made and filled once, kept for later runs
#   PYTHON=python3                 the interpreter that creates it (3.11+)
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH="${CUDA_SUITE_TORCH:-2.11.0}"
ENV="${CUDA_SUITE_VENV:-.venv-cuda}"
PY="${PYTHON:-python3}"
fail() { echo "cuda_build_suite: $*" >&2; exit 1; }

if [ ! -x "$ENV/bin/python" ]; then
  "$PY" -m venv "$ENV" || { rm -rf "$ENV"; fail "could not create $ENV with $PY"; }
fi
VPY="$ENV/bin/python"
have() { "$VPY" - "$TORCH" <<'PY' 2>/dev/null
import sys
import torch
sys.exit(0 if torch.__version__.split("+")[0] == sys.argv[1] and torch.version.cuda else 1)
PY
}
if ! have; then
  echo "cuda_build_suite: installing torch==$TORCH (a CUDA build, several GB) into $ENV" >&2
  "$VPY" -m pip install -q "torch==$TORCH" || fail "could not install torch==$TORCH"
  have || fail "torch==$TORCH in $ENV is not a CUDA build ($("$VPY" -c 'import torch; print(torch.__version__)' 2>&1))"
fi
"$VPY" -m pip install -q -e ".[test]" || fail "could not install attnprof[test] into $ENV"
echo "cuda_build_suite: $("$VPY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU visible:", torch.cuda.is_available())' 2>&1)" >&2
exec "$VPY" -m pytest -q -p no:cacheprovider "$@" tests
