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
# attnprof is imported from this checkout (a link on PYTHONPATH), never installed. Stages, the most
# important figures first (issue 38 item 5), each capped, all under one deadline:
#   environment  torch, CUDA, cuDNN, driver, device, the SDPA backend torch picks for the check's shapes
#   forks        after each warm-up step (the helper's imports and warm_up, a forward-only and a full fake-tensor
#                trace), threads, attnprof's fork rule and a forked child's CUDA forward+backward
#                (scripts/gpu_fork_check.py): whether the rule holds, and whether the helper may warm fake tensors
#   sweep        every built-in variant x plain, checkpoint, reversible at 4K (d_model 1024, 16 heads, 2 layers, bf16)
#   train        training steps: amp-bf16 + AdamW; grouped KV heads (--model-config tinyllama-1.1b, 2 layers);
#                --vocab 32000 with --loss-chunks 4
#   long         one 64K point per variant at the README's default shape (too large ones end `skipped`)
#   compare      predicted (fake tensors) vs allocator vs NVML over every point above
#   time         the time model vs the measured medians
#   models       the GPU memory and time MODELS vs every point measured above (gpu_models_vs_measured.py's
#                code, issue 39), and those measurements as a file to commit as test data
#   seconds      seconds per point of a slice of the README's full sweep (sdpa x 3 modes x 256, 8K, 64K, cold
#                prediction cache), and the 189-point sweep extrapolated at that pace
#   probe        first, in a fresh process, what each CUDA library takes outside the caching allocator, step by
#                step (scripts/gpu_library_probe.py: NVML minus reserved after the context, torch's kernels, cuBLAS,
#                cuBLASLt, autograd's thread, cuDNN/flash/memory-efficient attention); then the kernels the time
#                model could not pin down, each timed alone (scripts/gpu_kernel_probe.py: softmax forward/backward
#                over long rows, masked_fill, clone, QK^T bmm; the host's cost per op)
#   steps        whole steps of each measured kind under torch.profiler: every kernel's device time, the GPU's
#                idle time within the step, the aten ops' host time (scripts/gpu_step_profile.py, issue 39)
#   timeline     one point's predicted and real memory snapshots (issue 25; sdpa plain 4K at the check's shape)
#   gpu-model    the GPU memory model vs measured, each point in a fresh process (needs no forked worker)
#   gpu-tests    pytest -m gpu (a real one-point --device cuda sweep among them)
# Every point stage's summary line says how its points ended and, when any failed, the commonest reason;
# a sweep cut by its time or ending in an error still reports what it recorded, and the next stage runs.
#
# $OUT receives at most 8 files: summary.txt (one line per stage, with its headline), comparison.csv,
# time-comparison.csv, models-vs-measured.csv, measured-points.json, gpu-model.csv, timeline-pair.tgz
# (one small point's predicted snapshot + trace and its real snapshot, with compare-timelines' report), and
# gpu-check.tgz (every log, the raw run folders, environment.json), refreshed after each stage and once more
# on exit, so a killed run still returns what it has. On a CPU machine, `python scripts/gpu_report.py OUT`
# turns the folder into docs/measured-gpu.md. See docs/gpu.md.
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
    tar -czf "$OUT/gpu-check.tgz.tmp" -C "$WORK" --exclude=py --exclude=cache --exclude=cache-seconds --exclude=timeline . 2>/dev/null \
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
    if [ "$status" != ok ] && [ -z "$headline" ]; then  # why, in its own line: the log's last words
        headline="last line: $(grep -v '^\s*$' "$WORK/logs/$name.log" | tail -1 | cut -c1-200)"
    fi
    say "$name: $status ($((SECONDS - start)) s)${headline:+ - $headline}"
    [ "$status" = ok ] || tail -5 "$WORK/logs/$name.log"
    pack
}
run() { local limit="$1"; shift; timeout --kill-after=10 "$limit" "$@"; }
ATTNPROF=("$PYTHON" -m attnprof)

# The shapes. GPU: the check's model (d_model 1024, 16 heads of 64, 2 layers, bf16) at 4K, and the README's
# default shape (scenarios/presets/default.toml: float32, d_model 128, 4 heads, 2 layers, 2 repeats) for the
# 64K and seconds stages. Dry run: tiny shapes and fewer points (plain mode in the sweep; one variant or mode
# where a GPU stage has several): the same code and flags, within CI's 4 minutes on 2 cores.
# the variants never measured on a GPU first: a sweep cut by its cap loses those measured on 2026-12-04
VARIANTS=(--variant sliding_window,talking_heads,sparse_fixed,sdpa,full,lsh,sparse_strided)
if [ "$DRY" = 1 ]; then
    DEVICE=cpu; SHAPE=(--d-model 64 --heads 2 --layers 1); N=256; LONG=512; MODES=plain
    SECONDS_LENS=(--seq-len 256); REPS=(--repeats 1 --warmup 0); DRYFLAG=(--dry-run); README_REPS=("${REPS[@]}")
    LLAMA=(--layers 1 --d-model 64 --heads 8 --ffn-dim 128 --vocab 512); VOCAB=512
    AMP_VARIANTS=sdpa; GQA_VARIANTS=sdpa; VOCAB_MODES=plain; LONG_VARIANTS=(--variant sdpa); SECONDS_MODES=plain
    SECONDS_CACHE="$WORK/cache"  # warm: a cold one would recalibrate this CPU's time model (~10 s), no GPU's cost
else
    DEVICE=cuda; SHAPE=(--d-model 1024 --heads 16 --layers 2); N=4096; LONG=65536; MODES=plain,checkpoint,reversible
    SECONDS_LENS=(--seq-len 256 --seq-len 8192 --seq-len 65536); REPS=(--repeats 5 --warmup 2); DRYFLAG=()
    README_REPS=()  # the default scenario's own: 2 repeats, 1 warm-up
    LLAMA=(--layers 2); VOCAB=32000
    AMP_VARIANTS=sdpa,full; GQA_VARIANTS=sdpa,sliding_window; VOCAB_MODES=plain,checkpoint; LONG_VARIANTS=("${VARIANTS[@]}")
    SECONDS_MODES=plain,checkpoint,reversible; SECONDS_CACHE="$WORK/cache-seconds"  # cold, as a first run's
fi
COMMON=(--device "$DEVICE" --batch 1 "${REPS[@]}" --point-timeout 60 --no-report --quiet)

left() { echo $(( $1 - (SECONDS - STAGE_START) )); }  # left LIMIT: seconds this stage has left
# points NAME SHARES LIMIT SWEEP-ARGS...: one CUDA (dry run: CPU) sweep into runs/NAME, under 1/SHARES of the
# stage's time left; a cut or a sweep that could not start is kept in NOTES (with its last line) for the status
SWEEP_RC=0; NOTES=""
points() {
    local name="$1" shares="$2" limit="$3" budget rc; shift 3
    budget=$(( $(left "$limit") / shares ))
    [ "$budget" -ge 5 ] || { NOTES+="; $name: not run (stage time spent)"; SWEEP_RC=124; return; }
    run "$budget" "${ATTNPROF[@]}" sweep "$@" --out "$WORK/runs/$name" > "$WORK/logs/$name.txt" 2>&1
    rc=$?
    cat "$WORK/logs/$name.txt"
    case "$rc" in
        0|1) ;;  # 1: a sweep in which no point ended ok (issue 38 item 3): the status line says why
        124|137) NOTES+="; $name: cut after ${budget} s"; SWEEP_RC=124 ;;
        *) NOTES+="; $name: exit $rc: $(grep -v '^\s*$' "$WORK/logs/$name.txt" | tail -1 | cut -c1-160)"
           [ "$SWEEP_RC" = 124 ] || SWEEP_RC=$rc ;;
    esac
}
# status RUN...: the stage's one line (how its points ended, the commonest failure) and its exit
status() {
    local line rc
    line="$("$PYTHON" scripts/gpu_check_points.py status "$@" | grep '^HEADLINE: ' | tail -1 | cut -c11-)"
    rc=${PIPESTATUS[0]}
    echo "HEADLINE: ${line:-no status (see the log)}$NOTES"
    [ "$SWEEP_RC" = 0 ] || return "$SWEEP_RC"
    return "$rc"
}

environment() { run "$1" "$PYTHON" scripts/gpu_check.py environment "$WORK/environment.json" "${DRYFLAG[@]}"; }
forks() { run "$1" "$PYTHON" scripts/gpu_fork_check.py --out "$WORK/forks.json" "${DRYFLAG[@]}"; }
gpu_tests() {
    local rc failed
    run "$1" "$PYTHON" -m pytest -q -rfEs -p no:cacheprovider -m gpu tests > "$WORK/logs/pytest.txt" 2>&1
    rc=$?
    cat "$WORK/logs/pytest.txt"
    failed="$(grep -E '^(FAILED|ERROR) ' "$WORK/logs/pytest.txt" | head -1 | cut -c1-200)"
    echo "HEADLINE: $(grep -v '^\s*$' "$WORK/logs/pytest.txt" | tail -1 | tr -d '=' | sed 's/^ *//')${failed:+; first: $failed}"
    return "$rc"
}
# every built-in variant in each mode, one length (issue 38 item 5)
sweep() {
    points sweep 1 "$1" "${COMMON[@]}" "${SHAPE[@]}" --dtype bf16 "${VARIANTS[@]}" --mode "$MODES" --seq-len "$N"
    status "$WORK/runs/sweep"
}
# training steps: amp-bf16 + AdamW; grouped KV heads (TinyLlama-1.1B: 32 query heads, 4 KV heads; fewer layers);
# an LM head and loss in chunks (--vocab, --loss-chunks)
train() {
    points train-amp-adamw 3 "$1" "${COMMON[@]}" "${SHAPE[@]}" --dtype float32 --precision amp-bf16 \
        --optimizer adamw --variant "$AMP_VARIANTS" --mode plain --seq-len "$N"
    points train-gqa 2 "$1" "${COMMON[@]}" --model-config tinyllama-1.1b "${LLAMA[@]}" --dtype bf16 \
        --variant "$GQA_VARIANTS" --mode plain --seq-len "$N"
    points train-vocab 1 "$1" "${COMMON[@]}" "${SHAPE[@]}" --dtype bf16 --vocab "$VOCAB" --loss-chunks 4 \
        --variant sdpa --mode "$VOCAB_MODES" --seq-len "$N"
    status "$WORK"/runs/train-*
}
# one 64K point per variant at the README's default shape (dry run: sdpa at 512), plain: the longest the README promises
long() {
    points long 1 "$1" --device "$DEVICE" --scenario default "${LONG_VARIANTS[@]}" --mode plain --seq-len "$LONG" \
        "${README_REPS[@]}" --point-timeout 60 --no-report --quiet
    status "$WORK/runs/long"
}
ALL_RUNS() { ls -d "$WORK"/runs/*/ 2>/dev/null | sed 's:/$::'; }
compare() {
    local runs; mapfile -t runs < <(ALL_RUNS)
    [ "${#runs[@]}" -gt 0 ] || { echo "HEADLINE: no run folder: every point stage failed before its first point"; return 1; }
    run "$1" "$PYTHON" scripts/gpu_check.py compare "${runs[@]}" --csv "$OUT/comparison.csv"
}
# the GPU memory and time MODELS against every point measured here (scripts/gpu_models_vs_measured.py's code)
models() {
    local runs; mapfile -t runs < <(ALL_RUNS)
    [ "${#runs[@]}" -gt 0 ] || { echo "HEADLINE: no run folder: nothing measured to hold the models to"; return 1; }
    run "$1" "$PYTHON" scripts/gpu_check_points.py models "${runs[@]}" --csv "$OUT/models-vs-measured.csv" \
        --points-json "$OUT/measured-points.json" "${DRYFLAG[@]}"
}
# the kernels the time model could not pin down (issue 39: softmax over long rows, host cost per op), each alone
# and, first, in a fresh process, what each CUDA library takes outside the caching allocator (NVML minus reserved)
probe() {
    local lib kern lib_rc kern_rc=0 parts=()
    if [ "$DRY" = 1 ]; then
        lib="$(run "$(( $1 / 3 ))" "$PYTHON" scripts/gpu_library_probe.py --device cpu --out "$WORK/library-probe.json" 2>&1)"
    else
        lib="$(run "$(( $1 / 3 ))" "$PYTHON" scripts/gpu_library_probe.py --out "$WORK/library-probe.json" 2>&1)"
    fi
    lib_rc=$?
    if [ "$(left "$1")" -lt 5 ]; then
        kern="kernel probe: not run (under 5 s left)"; kern_rc=124
    elif [ "$DRY" = 1 ]; then
        kern="$(run "$(left "$1")" "$PYTHON" scripts/gpu_kernel_probe.py --device cpu --lengths 64 --heads 2 \
            --warmup 0 --repeats 2 --host-calls 50 --out "$WORK/kernel-probe.json" 2>&1)" || kern_rc=$?
    else
        kern="$(run "$(left "$1")" "$PYTHON" scripts/gpu_kernel_probe.py --out "$WORK/kernel-probe.json" 2>&1)" \
            || kern_rc=$?
    fi
    printf '%s\n%s\n' "$lib" "$kern" | grep -v '^HEADLINE: '
    # one HEADLINE for the stage's summary line: each script's own, or why it has none
    local h
    h="$(printf '%s\n' "$kern" | grep '^HEADLINE: ' | tail -1 | cut -c11-)"
    parts+=("${h:-kernel probe failed rc=$kern_rc: $(printf '%s\n' "$kern" | grep -v '^\s*$' | tail -1 | cut -c1-120)}")
    h="$(printf '%s\n' "$lib" | grep '^HEADLINE: ' | tail -1 | cut -c11-)"
    parts+=("${h:-library probe failed rc=$lib_rc: $(printf '%s\n' "$lib" | grep -v '^\s*$' | tail -1 | cut -c1-120)}")
    echo "HEADLINE: ${parts[0]}; ${parts[1]}"
    [ "$lib_rc" = 0 ] || return "$lib_rc"
    return "$kern_rc"
}
# issue 39: where each measured kind's step time goes, kernel by kernel, and how long the GPU waits for the host
steps() {
    if [ "$DRY" = 1 ]; then
        run "$1" "$PYTHON" scripts/gpu_step_profile.py --device cpu --points sdpa:plain:128,full:checkpoint:64 \
            --d-model 32 --heads 2 --layers 1 --dtype float32 --warmup 0 --repeats 1 --out "$WORK/step-profile.json"
    else
        run "$1" "$PYTHON" scripts/gpu_step_profile.py --out "$WORK/step-profile.json"
    fi
}
# seconds per point of a slice of the README's full sweep (`attnprof sweep --max-len 65536`: 189 points), from a
# cold prediction cache as a first run has; the full sweep at that pace is extrapolated, and says so
seconds_stage() {
    local t0 t1 rc
    t0=$(date +%s.%N)
    ATTNPROF_CACHE_DIR="$SECONDS_CACHE" run "$1" "${ATTNPROF[@]}" sweep --device "$DEVICE" --scenario default \
        --variant sdpa --mode "$SECONDS_MODES" "${SECONDS_LENS[@]}" "${README_REPS[@]}" --no-report --quiet \
        --out "$WORK/runs-seconds" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    "$PYTHON" scripts/gpu_check_points.py seconds "$WORK/runs-seconds" --wall-s "$("$PYTHON" -c "print($t1 - $t0)")" \
        | sed "$( [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo 's/^HEADLINE: /HEADLINE: cut after its '"$1"' s: /')"
    local summary=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || [ "$rc" = 1 ] || return "$rc"
    return "$summary"
}
gpu_model() {
    run "$1" "$PYTHON" scripts/gpu_model_check.py --out "$OUT" --doc "$WORK/gpu-model.md" --point-timeout 40 \
        --budget-s $(( $1 > 25 ? $1 - 20 : 5 )) "${DRYFLAG[@]}"
}
time_model() {
    local runs; mapfile -t runs < <(ALL_RUNS)
    [ "${#runs[@]}" -gt 0 ] || { echo "HEADLINE: no run folder: no measured time"; return 1; }
    run "$1" "$PYTHON" scripts/gpu_time_check.py --out "$OUT" --runs "${runs[@]}" \
        --environment "$WORK/environment.json" --doc "$WORK/time.md"
}

# --- issue 25: timeline --- one small point, its predicted and real memory snapshots side by side.
# The predicted side is `predict --gpu h200 --timeline`, the real one `sweep --device cuda --timeline` (on the
# dry run's CPU: the sweep's predicted files only), the comparison `compare-timelines` (docs/timelines.md).
# GPU: sdpa plain at 4K at the check's shape, the measured point the GPU memory model missed by most (+81 MiB
# allocated, issue 39): the first event that differs says where. Dry run: a small one.
if [ "$DRY" = 1 ]; then
    TL_POINT=(--variant sdpa --mode plain --d-model 256 --heads 4 --layers 1 --dtype bf16 --batch 1); TL_LEN=2048
else
    TL_POINT=(--variant sdpa --mode plain "${SHAPE[@]}" --dtype bf16 --batch 1); TL_LEN=4096
fi
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

# Most important figures first; each stage capped, all under one deadline (a cut stage still reports what it has).
ORDER="environment:40:environment forks:30:forks sweep:130:sweep train:90:train long:75:long compare:20:compare time:20:time_model
       models:60:models seconds:60:seconds_stage probe:60:probe steps:45:steps timeline:40:timeline
       gpu-model:70:gpu_model
       gpu-tests:80:gpu_tests"
WANTED=" ${STAGES:-$(for e in $ORDER; do printf '%s ' "${e%%:*}"; done)} "
for entry in $ORDER; do
    IFS=: read -r name cap fn <<< "$entry"
    if [[ "$WANTED" == *" $name "* ]]; then STAGE_START=$SECONDS; stage "$name" "$cap" "$fn"; fi
done

say "gpu_check: done in $SECONDS s; $(ls -1 "$OUT" | wc -l) files in $OUT"
cat "$OUT/summary.txt"
exit "$FAILED"
