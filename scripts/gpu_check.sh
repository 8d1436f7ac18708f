#!/usr/bin/env bash
# The GPU check, written for the lent machine (one H200, torch 2.11 in the image's python3,
# no package registry, 8 files back from $OUT, 15 minutes of device time a session).
#
#   scripts/gpu_check.sh              # on the GPU machine, from the repository root
#   scripts/gpu_check.sh --dry-run    # on a CPU machine: every stage's code, CUDA and NVML skipped (CI runs it)
#
#   PYTHON=...                   the interpreter (default python3, used as it is: no pip, no venv)
#   OUT=...                      the output folder (default results/gpu)
#   GPU_CHECK_DEADLINE_S=360     one deadline for everything; each stage gets the lesser of its cap and what is left
#   STAGES="sweep compare"       a subset, e.g. to rerun after a cut
#
# attnprof is imported from this checkout (a link on PYTHONPATH), never installed. Stages:
# environment (torch, CUDA, cuDNN, driver, device, the SDPA backend torch picks for the
# check's shapes), gpu-tests (pytest -m gpu, a real one-point --device cuda sweep among
# them), sweep (14 points: sdpa and full x plain and checkpoint x 4K-16K, lsh and
# sparse_strided at 8K), compare (predicted vs allocator vs NVML), timeline (one point's
# predicted and real memory snapshots; dry run: the predicted one and the CPU refusal), gpu-model (the GPU
# memory model vs measured, each point in a fresh process), time (the time model vs measured).
#
# $OUT receives at most 8 files: summary.txt (one line per stage, with its headline),
# comparison.csv, gpu-model.csv, time-comparison.csv, timeline-pair.tgz (stage timeline, issue
# 25: one small point's predicted snapshot + trace, `predict --gpu h200 --timeline`, and its
# real snapshot, `sweep --device cuda --timeline`, with compare-timelines' report), and
# gpu-check.tgz (every log, the raw records, environment.json), refreshed after each stage
# and once more on exit, so a killed run still returns what it has. On a CPU machine, `python scripts/gpu_report.py OUT` turns
# the folder into docs/measured-gpu.md. See docs/gpu.md.
set -uo pipefail

DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
if [ $# -gt 0 ]; then echo "gpu_check: unknown argument $1 (only --dry-run)" >&2; exit 2; fi
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"
OUT="${OUT:-results/gpu}"
DEADLINE_S="${GPU_CHECK_DEADLINE_S:-360}"
case "$DEADLINE_S" in ''|*[!0-9]*) echo "gpu_check: GPU_CHECK_DEADLINE_S must be whole seconds" >&2; exit 2;; esac
END=$((SECONDS + DEADLINE_S))
mkdir -p "$OUT" || { echo "gpu_check: cannot create $OUT" >&2; exit 2; }
OUT="$(cd "$OUT" && pwd)"
WORK="$(mktemp -d)"
mkdir -p "$WORK/logs" "$WORK/runs" "$WORK/py" "$WORK/cache"
ln -s "$ROOT" "$WORK/py/attnprof"
export PYTHONPATH="$WORK/py${PYTHONPATH:+:$PYTHONPATH}"  # this checkout, ahead of anything installed
export ATTNPROF_CACHE_DIR="$WORK/cache"  # every prediction computed here, none read from an old cache
export PYTHONUNBUFFERED=1
: > "$OUT/summary.txt"
FAILED=0

say() { echo "$*" | tee -a "$OUT/summary.txt"; }
pack() {  # everything but the few top-level files, in one tarball ($OUT takes 8 files)
    cp -f "$OUT/summary.txt" "$WORK/summary.txt" 2>/dev/null
    tar -czf "$OUT/gpu-check.tgz.tmp" -C "$WORK" --exclude=py --exclude=cache --exclude=timeline . 2>/dev/null \
        && mv -f "$OUT/gpu-check.tgz.tmp" "$OUT/gpu-check.tgz"
}
finish() { pack; rm -rf "$WORK"; }
trap finish EXIT

PRE=""
if [ "$DRY" = 1 ]; then MODE="dry run on the CPU: CUDA and NVML parts skipped"; else MODE="GPU"; fi
if [ "$DRY" = 0 ]; then  # stop at once, in one line, where there is nothing to check
    PRE="$("$PYTHON" -W ignore - <<'PY' 2>&1
import torch
from attnprof.profiler.gpumeasure import devices
if not torch.version.cuda:
    raise SystemExit(f"torch {torch.__version__} is not a CUDA build (torch.version.cuda is None)")
n = devices.device_count()
if n < 1:
    raise SystemExit(f"no GPU is visible to torch {torch.__version__} ({devices.probe().get('error') or 'count 0'})")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {n} GPU(s)")
PY
)" || { say "gpu_check: stopped: $(echo "$PRE" | tail -1)"; exit 2; }
fi
say "gpu_check: $MODE; $("$PYTHON" -V 2>&1); deadline ${DEADLINE_S} s; $(date -u +%Y-%m-%dT%H:%M:%SZ)${PRE:+; $PRE}"

stage() {  # stage NAME CAP_S FUNCTION: run under min(cap, time left), log, one summary line
    local name="$1" cap="$2" fn="$3" left limit start rc status headline
    left=$((END - SECONDS))
    limit=$(( cap < left ? cap : left ))
    if [ "$limit" -lt 5 ]; then say "$name: SKIPPED (deadline reached)"; FAILED=1; return; fi
    start=$SECONDS
    echo "=== $name (at most ${limit} s) ==="
    ( "$fn" "$limit" ) > "$WORK/logs/$name.log" 2>&1
    rc=$?
    headline="$(grep '^HEADLINE: ' "$WORK/logs/$name.log" | tail -1 | cut -c11-)"
    case "$rc" in
        0) status="ok" ;;
        124|137) status="TIMEOUT after ${limit} s"; FAILED=1 ;;
        *) status="FAILED rc=$rc"; FAILED=1 ;;
    esac
    say "$name: $status ($((SECONDS - start)) s)${headline:+ - $headline}"
    [ "$status" = ok ] || tail -5 "$WORK/logs/$name.log"
    pack
}
run() { local limit="$1"; shift; timeout --kill-after=10 "$limit" "$@"; }
ATTNPROF=("$PYTHON" -m attnprof)

if [ "$DRY" = 1 ]; then
    DEVICE=cpu; SHAPE=(--d-model 64 --heads 2 --layers 1); SHORT=(--min-len 256 --max-len 1024); ONE=512
    REPS=(--repeats 1 --warmup 0); DRYFLAG=(--dry-run)
else
    DEVICE=cuda; SHAPE=(--d-model 1024 --heads 16 --layers 2); SHORT=(--min-len 4096 --max-len 16384); ONE=8192
    REPS=(--repeats 5 --warmup 2); DRYFLAG=()
fi
COMMON=(--device "$DEVICE" "${SHAPE[@]}" --dtype bf16 --batch 1 "${REPS[@]}" --point-timeout 60 --no-report --quiet)

environment() { run "$1" "$PYTHON" scripts/gpu_check.py environment "$WORK/environment.json" "${DRYFLAG[@]}"; }
gpu_tests() { run "$1" "$PYTHON" -m pytest -q -rs -p no:cacheprovider -m gpu tests; }
sweep() {
    run "$1" "${ATTNPROF[@]}" sweep "${COMMON[@]}" --variant sdpa --variant full --mode plain --mode checkpoint \
        "${SHORT[@]}" --out "$WORK/runs/main" || return $?
    local left=$(( $1 - (SECONDS - STAGE_START) ))
    [ "$left" -ge 5 ] || return 124
    run "$left" "${ATTNPROF[@]}" sweep "${COMMON[@]}" --variant lsh \
        --variant sparse_strided --mode plain --min-len "$ONE" --max-len "$ONE" --out "$WORK/runs/extra"
}
compare() { run "$1" "$PYTHON" scripts/gpu_check.py compare "$WORK/runs/main" "$WORK/runs/extra" --csv "$OUT/comparison.csv"; }
gpu_model() {
    run "$1" "$PYTHON" scripts/gpu_model_check.py --out "$OUT" --doc "$WORK/gpu-model.md" --point-timeout 40 \
        "${DRYFLAG[@]}"
}
time_model() {
    run "$1" "$PYTHON" scripts/gpu_time_check.py --out "$OUT" --runs "$WORK/runs/main" "$WORK/runs/extra" \
        --environment "$WORK/environment.json" --doc "$WORK/time.md"
}

# --- issue 25: timeline --- one small point, its predicted and real memory snapshots side by side.
# The predicted side is `predict --gpu h200 --timeline`, the real one `sweep --device cuda --timeline` (on the
# dry run's CPU: the sweep's predicted files only), the comparison `compare-timelines` (docs/timelines.md).
TL_POINT=(--variant sdpa --mode plain --d-model 256 --heads 4 --layers 1 --dtype bf16 --batch 1)
TL_LEN=2048
timeline() {
    local dir="$WORK/timeline" notes=() left pred real
    mkdir -p "$dir/predicted" "$dir/real"
    run "$1" "${ATTNPROF[@]}" predict "${TL_POINT[@]}" --seq-len "$TL_LEN" --gpu h200 --timeline "$dir/predicted" \
        > "$dir/predict.txt" || return $?
    notes+=("predicted: $(ls -1 "$dir/predicted" | wc -l) file(s)")
    left=$(( $1 - (SECONDS - STAGE_START) ))
    [ "$left" -ge 5 ] || return 124
    if [ "$DRY" = 1 ]; then  # no allocator to record on a CPU: the sweep writes the predicted side only
        run "$left" "${ATTNPROF[@]}" sweep --device cpu --timeline "${TL_POINT[@]}" --min-len "$TL_LEN" \
            --max-len "$TL_LEN" "${REPS[@]}" --no-report --quiet --out "$dir/real-run" || return $?
        ls "$dir"/real-run/timelines/*.memory.pickle > /dev/null || { echo "sweep --timeline wrote no snapshot"; return 1; }
        if ls "$dir"/real-run/timelines/*.real.memory.pickle > /dev/null 2>&1; then
            echo "a CPU sweep wrote a real snapshot"; return 1
        fi
        notes+=("real: none on the CPU (the sweep wrote $(ls -1 "$dir"/real-run/timelines | wc -l) predicted file(s))")
    else
        run "$left" "${ATTNPROF[@]}" sweep --device cuda --timeline "${TL_POINT[@]}" --min-len "$TL_LEN" \
            --max-len "$TL_LEN" "${REPS[@]}" --point-timeout 60 --no-report --quiet --out "$dir/real-run" || return $?
        cp "$dir"/real-run/timelines/*.real.memory.pickle "$dir/real/" || return 1
        "$PYTHON" -m torch.cuda._memory_viz stats "$(ls -1 "$dir"/real/*.real.memory.pickle | head -1)" \
            > "$dir/real-stats.txt" || { echo "torch's reader cannot read the real snapshot"; return 1; }
        notes+=("real: $(ls -1 "$dir/real" | wc -l) snapshot(s)")
    fi
    pred="$(ls -1 "$dir"/predicted/*.memory.pickle 2>/dev/null | head -1)"
    real="$(ls -1 "$dir"/real/*.real.memory.pickle 2>/dev/null | head -1)"
    if [ -n "$pred" ] && [ -n "$real" ]; then
        left=$(( $1 - (SECONDS - STAGE_START) ))
        run "$left" "${ATTNPROF[@]}" compare-timelines "$pred" "$real" | tee "$dir/compare.txt"
        notes+=("compared: $(head -1 "$dir/compare.txt" | cut -c1-120)")
    fi
    rm -rf "$dir/real-run/timelines"  # the snapshot is in real/; the run's records stay
    tar -czf "$OUT/timeline-pair.tgz.tmp" -C "$dir" . && mv -f "$OUT/timeline-pair.tgz.tmp" "$OUT/timeline-pair.tgz" \
        || return 1
    echo "HEADLINE: $(IFS=';'; echo "${notes[*]}" | sed 's/;/; /g'); timeline-pair.tgz $(du -k "$OUT/timeline-pair.tgz" | cut -f1) KiB"
}

WANTED=" ${STAGES:-environment gpu-tests sweep compare timeline gpu-model time} "
for entry in environment:60:environment gpu-tests:120:gpu_tests sweep:150:sweep compare:30:compare \
             timeline:90:timeline gpu-model:120:gpu_model time:30:time_model; do
    IFS=: read -r name cap fn <<< "$entry"
    if [[ "$WANTED" == *" $name "* ]]; then STAGE_START=$SECONDS; stage "$name" "$cap" "$fn"; fi
done

say "gpu_check: done in $SECONDS s; $(ls -1 "$OUT" | wc -l) files in $OUT"
cat "$OUT/summary.txt"
exit "$FAILED"
