#!/usr/bin/env bash
# Installs attnprof, its dependencies and its test tools into a project virtual
# environment, .venv, so that it works on a distribution's externally-managed
# python3 (PEP 668: Debian 12+, Ubuntu 23.04+) as well as on pyenv/conda Pythons.
#
# - Inside an activated virtual environment, that environment is used instead,
#   and .venv is made a link to it, so `.venv/bin/attnprof` works either way.
# - torch first: a CPU build of torch 2.13.0 where the environment has none (on
#   this project's machines it comes from local disk; on a GPU machine PyPI's
#   Linux wheel of the same version carries CUDA). An existing torch is kept.
# - PYTHON=/path/to/python chooses the interpreter that creates .venv.
# - ATTNPROF_EXTRAS=test,ray chooses the extras (default: test).
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "setup: $*" >&2; exit 1; }

if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
  if [ ! -e .venv ]; then ln -s "$VIRTUAL_ENV" .venv; fi
  [ "$(cd .venv && pwd -P)" = "$(cd "$VIRTUAL_ENV" && pwd -P)" ] \
    || fail ".venv exists and is not the active environment $VIRTUAL_ENV; remove one of them"
elif [ ! -x .venv/bin/python ]; then
  PY=${PYTHON:-python3}
  command -v "$PY" >/dev/null 2>&1 || fail "no $PY on the PATH; install Python 3.11+ or set PYTHON=/path/to/python"
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || fail "$("$PY" -V 2>&1) is too old: attnprof needs Python 3.11+ (set PYTHON=/path/to/python3.11)"
  "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 \
    || fail "$PY cannot create virtual environments; on Debian/Ubuntu: sudo apt-get install python3-venv"
  echo "setup: creating .venv with $("$PY" -V 2>&1)" >&2
  "$PY" -m venv .venv || { rm -rf .venv; fail "could not create .venv with $PY"; }
fi

VPY=.venv/bin/python
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing torch==2.13.0 into .venv" >&2
  "$VPY" -m pip install -q "torch==2.13.0"
fi
"$VPY" -m pip install -q -e ".[${ATTNPROF_EXTRAS:-test}]"
# An editable install leaves attnprof's own modules uncompiled (pip compiles only what it
# copies); compile them now, as a regular install would, so that no command pays for it
# (~0.2 s per start-up where PYTHONDONTWRITEBYTECODE keeps Python from caching them itself).
"$VPY" -m compileall -q -x '(^|/)(\.venv[^/]*|\.git|runs|test-artifacts|build|dist)(/|$)' . >/dev/null \
  || echo "setup: could not precompile attnprof's modules (not needed; start-up is a little slower)" >&2
"$VPY" -c "import attnprof.cli, torch; print('setup: attnprof ready in .venv, torch', torch.__version__)" >&2
