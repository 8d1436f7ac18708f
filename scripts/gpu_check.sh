#!/usr/bin/env bash
# GPU check for a lent CUDA machine (written for one H200): run from the repository root.
#
#   OUT=/some/folder scripts/gpu_check.sh      # default folder: results/gpu
#
# Stages: deps, device (nvidia-smi + environment.json), gpu-tests (pytest -m gpu),
# sweep (a short real sweep), predict (fake-tensor predictions for the same points),
# compare (comparison.csv: predicted vs allocator peak vs NVML), gpu-model (the GPU
# memory model vs measured allocated/reserved/NVML for a small grid, each point in a
# fresh process: $OUT/gpu-model.csv and docs/measured-gpu.md), time-check (the sweep's
# measured step times vs the time model for this GPU: $OUT/time-comparison.csv and a
# section of docs/measured-gpu.md). Each stage's output is
# kept in $OUT/logs/<stage>.log; a failing stage is reported and the later ones still
# run; the script exits 1 at the end if any stage failed. Every stage has a time limit
# (override with the *_TIMEOUT_S variables): at most 9 minutes in all, about 5 typically.
# See docs/gpu.md.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-results/gpu}"
LOGS="$OUT/logs"
mkdir -p "$LOGS"
OUT="$(cd "$OUT" && pwd)"
LOGS="$OUT/logs"
: > "$OUT/stages.txt"

PYTHON="${PYTHON:-python3}"
DEPS_TIMEOUT_S="${DEPS_TIMEOUT_S:-90}"
TESTS_TIMEOUT_S="${TESTS_TIMEOUT_S:-90}"
SWEEP_TIMEOUT_S="${SWEEP_TIMEOUT_S:-120}"  # results.jsonl is flushed per point: a cut sweep still compares
PREDICT_TIMEOUT_S="${PREDICT_TIMEOUT_S:-60}"
GPU_MODEL_TIMEOUT_S="${GPU_MODEL_TIMEOUT_S:-180}"  # 9 points, each in a fresh process (~15 s each)
GPU_KEY="${GPU_KEY:-}"  # the GPU table key for the model (default: matched by device name)
# The points, shared by sweep and predict so the comparison joins one to one.
POINTS=(--max-len 16384 --min-len 1024 --d-model 1024 --heads 16 --layers 2 --dtype bfloat16)
# `python -m attnprof` works whether or not the console script got installed.
ATTNPROF=("$PYTHON" -m attnprof)
FAILED=()

stage() {  # stage NAME FUNCTION...: run, log, time, record; never stops the script
    local name="$1" start=$SECONDS rc
    shift
    echo "=== $name ==="
    set +e
    ( set -euo pipefail; "$@" ) 2>&1 | tee "$LOGS/$name.log"
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" -eq 0 ]; then
        echo "$name: ok ($((SECONDS - start)) s)" | tee -a "$OUT/stages.txt"
    else
        FAILED+=("$name")
        echo "$name: FAILED rc=$rc ($((SECONDS - start)) s), see $LOGS/$name.log" | tee -a "$OUT/stages.txt"
    fi
}

deps() {
    "$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
    # The lent machine may be offline: install what pip can, then check what imports.
    # SKIP_INSTALL=1 leaves an environment that already has attnprof installed untouched.
    if [ -z "${SKIP_INSTALL:-}" ]; then
        timeout "$DEPS_TIMEOUT_S" "$PYTHON" -m pip install -q --no-build-isolation --no-deps -e ".[test]" \
            || echo "editable install failed; using a PYTHONPATH link instead"
    fi
    local missing
    missing=$("$PYTHON" - <<'PY'
import importlib.util
wanted = {"pandas": "pandas", "matplotlib": "matplotlib", "typer": "typer", "psutil": "psutil",
          "pynvml": "nvidia-ml-py", "pytest": "pytest"}
print(" ".join(pkg for mod, pkg in wanted.items() if importlib.util.find_spec(mod) is None))
PY
)
    if [ -n "$missing" ] && [ -z "${SKIP_INSTALL:-}" ]; then
        timeout "$DEPS_TIMEOUT_S" "$PYTHON" -m pip install -q $missing
    fi
    "$PYTHON" -c "import attnprof.profiler.measure.gpu, pandas, matplotlib, typer, psutil, pynvml, pytest; print('imports ok')"
}

device() {
    nvidia-smi
    nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv
    "$PYTHON" - "$OUT/environment.json" <<'PY'
import json, sys
from attnprof.profiler.measure.gpu import default_memory_limit_bytes, device_environment, nvml_available
env = {**device_environment("cuda"), "nvml": nvml_available()[1],
       "default_memory_limit_bytes": default_memory_limit_bytes("cuda")}
print(json.dumps(env, indent=1))
json.dump(env, open(sys.argv[1], "w"), indent=1)
assert env["device_name"] and env["driver"], "device name or driver missing: " + env["note"]
PY
}

gpu_tests() {
    "$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'"
    timeout "$TESTS_TIMEOUT_S" "$PYTHON" -m pytest -q -rs -s -m gpu tests
}

sweep() {
    timeout --kill-after=15 "$SWEEP_TIMEOUT_S" "${ATTNPROF[@]}" sweep --device cuda "${POINTS[@]}" \
        --repeats 5 --warmup 2 --out "$OUT/gpu-sweep"
}

predict() {
    timeout "$PREDICT_TIMEOUT_S" "${ATTNPROF[@]}" predict "${POINTS[@]}" --json > "$OUT/predicted.json"
    "$PYTHON" -c "import json,sys; print(len(json.load(open(sys.argv[1]))), 'points predicted')" "$OUT/predicted.json"
}

compare() {
    "$PYTHON" - "$OUT" <<'PY'
"""comparison.csv: one row per point, predicted (fake tensors) vs allocator vs NVML."""
import csv, json, sys
from pathlib import Path
from attnprof.profiler.records import key_of_record
from attnprof.profiler.runner.storage import read_records
from attnprof.profiler.units import fmt_bytes

out = Path(sys.argv[1])
predicted = {key_of_record(r): r for r in json.loads((out / "predicted.json").read_text())}
measured = {key_of_record(r): r for r in read_records(out / "gpu-sweep")}  # last record per point wins
columns = ["variant", "mode", "scope", "seq_len", "batch", "dtype", "status", "predicted_peak_bytes",
           "measured_peak_bytes", "measured_over_predicted", "cuda_reserved_peak_bytes", "nvml_process_peak_bytes",
           "nvml_device_peak_bytes", "nvml_baseline_bytes", "nvml_process_over_baseline_bytes",
           "time_fwd_ms", "time_bwd_ms", "nvml_note", "reason"]
rows = []
for key, m in measured.items():
    p = predicted.get(key, {})
    pred, meas = p.get("predicted_peak_bytes"), m.get("measured_peak_bytes")
    proc, base = m.get("nvml_process_peak_bytes"), m.get("nvml_baseline_bytes")
    rows.append({**{c: m.get(c) for c in columns}, "predicted_peak_bytes": pred,
                 "measured_over_predicted": round(meas / pred, 4) if pred and meas else None,
                 "nvml_process_over_baseline_bytes": proc - base if proc is not None and base is not None else None})
with open(out / "comparison.csv", "w", newline="") as fh:
    writer = csv.DictWriter(fh, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
ok = [r for r in rows if r["status"] == "ok" and r["measured_over_predicted"] is not None]
print(f"{len(rows)} measured points, {len(ok)} ok with a prediction, "
      f"{len(predicted) - len(measured.keys() & predicted.keys())} predicted points not measured")
for r in ok:
    print(f"{r['variant']:<16} {r['mode']:<10} n={r['seq_len']:<6} predicted {fmt_bytes(r['predicted_peak_bytes']):>10}"
          f"  allocated x{r['measured_over_predicted']:.3f}  reserved {fmt_bytes(r['cuda_reserved_peak_bytes']):>10}"
          f"  nvml process {fmt_bytes(r['nvml_process_peak_bytes']):>10}  device {fmt_bytes(r['nvml_device_peak_bytes']):>10}")
sys.exit(0 if ok else "no measured point with a prediction to compare")
PY
}

time_check() {
    # measured step times vs the time model for this GPU: $OUT/time-comparison.csv, docs/measured-gpu.md
    "$PYTHON" scripts/gpu_time_check.py --out "$OUT" --doc docs/measured-gpu.md
}

gpu_model() {
    # measured allocated / reserved / NVML vs the model (attnprof predict --gpu): docs/measured-gpu.md
    timeout --kill-after=15 "$GPU_MODEL_TIMEOUT_S" "$PYTHON" scripts/gpu_model_check.py --out "$OUT" \
        --doc docs/measured-gpu.md --point-timeout 40 ${GPU_KEY:+--gpu "$GPU_KEY"}
}

# No editable install (offline machine)? Make `import attnprof` resolve to this checkout.
if ! "$PYTHON" -c "import attnprof" 2>/dev/null; then
    LINKS="$(mktemp -d)"
    ln -s "$(pwd)" "$LINKS/attnprof"
    export PYTHONPATH="$LINKS${PYTHONPATH:+:$PYTHONPATH}"
fi

# STAGES="predict compare" reruns a subset (e.g. compare after a cut sweep).
STAGES=" ${STAGES:-deps device gpu-tests sweep predict compare gpu-model time-check} "
for name in deps device gpu-tests sweep predict compare gpu-model time-check; do
    if [[ "$STAGES" == *" $name "* ]]; then
        stage "$name" "${name//-/_}"
    fi
done

echo "=== summary ($SECONDS s) ==="
cat "$OUT/stages.txt"
if [ "${#FAILED[@]}" -gt 0 ]; then
    echo "failed stages: ${FAILED[*]}"
    exit 1
fi
echo "all stages passed; results in $OUT"
