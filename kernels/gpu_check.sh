#!/usr/bin/env bash
# One GPU session's worth of checks for the fused FoX kernel, in well under 8 minutes:
#   1. the kernel tests, natively (GPU-only full-size cases included)
#   2. accuracy of every gated implementation vs float64 on B2 T777 H4 D128, then
#      forward+backward and forward timings on the ANCHORS.md shapes
#   3. a T scan, and a small sweep of our launch configs at B2 T8192 H16 D128
#   4. FlexAttention last (its compiles are slow)
# Installs nothing (the machine has torch and Triton; flash-linear-attention is used if present).
# Everything lands under $OUT (default ./out); each step has its own time limit, so one slow step
# cannot eat the others. Run from the repository root: bash kernels/gpu_check.sh
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
PY=${PY:-python}               # the machine's own torch and Triton (not a CPU-only .venv)
export FLA_TILELANG=0
B=("$PY" kernels/bench.py --out "")
BUDGET=${BUDGET:-420}          # seconds for the whole script; each step gets min(its limit, what is left)
lim() { local left=$(( BUDGET - SECONDS )); [ "$1" -lt "$left" ] && echo "$1" || echo $(( left > 1 ? left : 1 )); }
log() { echo "== $(date +%T) [${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }

log "environment"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  $PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
  $PY -c "import fla; print('fla', fla.__version__)" 2>&1 | tail -1
} 2>&1 | tee -a "$OUT/summary.txt"

log "1. pytest kernels/test_kernels.py (limit 150 s)"
timeout $(lim 150) $PY -m pytest -q -rs kernels/test_kernels.py > "$OUT/pytest.txt" 2>&1
echo "rc=$?" >> "$OUT/pytest.txt"; tail -15 "$OUT/pytest.txt" | tee -a "$OUT/summary.txt"

ANCH="8,2048,16,128;2,8192,16,128;1,32768,16,128;4,4096,32,64"
log "2a. accuracy + fwd+bwd, anchor shapes (limit 110 s)"
timeout $(lim 110) "${B[@]}" --shapes "$ANCH" --impls ours,sdpa_cudnn,sdpa_flash,fla,materialised --accuracy \
    --json "$OUT/bench_fwdbwd.json" > "$OUT/bench_fwdbwd.txt" 2>&1
echo "rc=$?" >> "$OUT/bench_fwdbwd.txt"; cat "$OUT/bench_fwdbwd.txt" >> "$OUT/summary.txt"

log "2b. forward only, anchor shapes (limit 45 s)"
timeout $(lim 45) "${B[@]}" --shapes "$ANCH" --impls ours,sdpa_cudnn,sdpa_flash,fla --fwd-only \
    --json "$OUT/bench_fwd.json" > "$OUT/bench_fwd.txt" 2>&1
echo "rc=$?" >> "$OUT/bench_fwd.txt"; cat "$OUT/bench_fwd.txt" >> "$OUT/summary.txt"

log "3a. T scan at B*T = 16384, H16 D128, fwd+bwd (limit 45 s)"
timeout $(lim 45) "${B[@]}" --shapes "32,512,16,128;16,1024,16,128;4,4096,16,128;1,16384,16,128" \
    --impls ours,sdpa_cudnn,fla --json "$OUT/bench_scan.json" > "$OUT/bench_scan.txt" 2>&1
echo "rc=$?" >> "$OUT/bench_scan.txt"; cat "$OUT/bench_scan.txt" >> "$OUT/summary.txt"

log "3b. config sweep, ours, B2 T8192 H16 D128 (20 s a config, while time allows)"
for cfg in "" \
    "fwd=128,128,8,3" "fwd=128,64,4,3" "fwd=64,64,4,4" \
    "dkdv=64,128,8,2;dq=128,64,8,2" "dkdv=32,64,4,3;dq=64,64,4,3" "dkdv=32,128,4,5;dq=128,32,4,5"; do
  [ $(( BUDGET - SECONDS )) -lt 100 ] && break   # leave room for step 4
  timeout $(lim 20) "${B[@]}" --shapes "2,8192,16,128" --impls ours --both --config "$cfg" --json "" 2>&1 \
      | grep -E "^B2|^TFLOP|Error|error" | sed "s|^|[$cfg] |" | tee -a "$OUT/sweep.txt"
done
cat "$OUT/sweep.txt" >> "$OUT/summary.txt"

log "4. FlexAttention, two anchor shapes, fwd+bwd (limit 75 s)"
timeout $(lim 75) "${B[@]}" --shapes "8,2048,16,128;2,8192,16,128" --impls flex,ours \
    --json "$OUT/bench_flex.json" > "$OUT/bench_flex.txt" 2>&1
echo "rc=$?" >> "$OUT/bench_flex.txt"; cat "$OUT/bench_flex.txt" >> "$OUT/summary.txt"

log "done"
