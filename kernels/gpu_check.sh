#!/usr/bin/env bash
# One GPU session's worth of checks, most important first, inside BUDGET seconds (default 480):
#   1. the kernel tests, natively (GPU-only full-size cases and the sm_90 resource check included),
#      and a small FoX LM training on the fused kernel (fp32 and bf16 autocast)
#   2. kernels/bench.py --both --accuracy: every implementation on the ANCHORS.md shapes and the
#      T scan -> figures/kernel_bench.json + .png (what figure 7 reads)
#   3. bench_laws.py --gpu-only: batched window extraction rate (target >= 5e8 rows/s)
#   4. figure 7 from that JSON
#   5. the sm_90 resource report with the machine's own Triton
#   6. a sweep of our launch configs at B2 T8192 H16 D128 and B4 T4096 H32 D64 (candidates that
#      kernels/resources.py reads as spill-free)
#   7. FlexAttention at two shapes (slow compiles), merged into the JSON, figure 7 again
# Each step gets min(its limit, what is left). Results: $OUT/summary.txt (the tables), the figure
# and JSON files, and $OUT/results.tgz (every log). At most 8 files come back, so the rest is packed.
# Run from the repository root with the machine's python (not the CPU .venv):
#   bash kernels/gpu_check.sh
# flash-linear-attention: carry its wheel in .whl/ (kernels/NOTES.md says how); without it the
# fla column is skipped with the reason.
set -u
OUT=${OUT:-out}
W=$(mktemp -d)                  # logs, packed into $OUT/results.tgz after every step
mkdir -p "$OUT"
PY=${PY:-python3}
export FLA_TILELANG=0 PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
BUDGET=${BUDGET:-480}          # call the device with timeout_s >= BUDGET + 60
lim() { local left=$(( BUDGET - SECONDS )); [ "$1" -lt "$left" ] && echo "$1" || echo $(( left > 1 ? left : 1 )); }
log() { echo "== $(date +%T) [${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }
pack() { tar -czf "$OUT/results.tgz" -C "$W" . 2>/dev/null; }
step() {  # step NAME LIMIT CMD...: run, keep the log, append its tail to the summary
  local name=$1 limit=$2; shift 2
  log "$name (limit $(lim "$limit") s)"
  timeout "$(lim "$limit")" "$@" > "$W/$name.txt" 2>&1
  echo "rc=$?" >> "$W/$name.txt"
  tail -n 40 "$W/$name.txt" >> "$OUT/summary.txt"
  pack
}

log "environment"
if ls .whl/*.whl > /dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  $PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
  $PY -c "import fla; print('fla', fla.__version__)" 2>&1 | tail -1
} 2>&1 | tee -a "$OUT/summary.txt"

# pytest-xdist (on the machine's image) spreads the many first compiles over 8 processes
XDIST=$($PY -c "import xdist" 2>/dev/null && echo "-n 8")
step pytest_kernels 150 $PY -m pytest -q -rs $XDIST kernels/test_kernels.py \
    test_fox_attention.py::test_gpu_model_trains_on_fused_kernel

step bench_both 150 $PY kernels/bench.py --both --accuracy \
    --impls ours,sdpa_cudnn,sdpa_flash,fla,materialised \
    --json figures/kernel_bench.json --out figures/kernel_bench.png
cp figures/kernel_bench.json figures/kernel_bench.png "$OUT/" 2>/dev/null
$PY kernels/bench.py --report figures/kernel_bench.json >> "$OUT/summary.txt" 2>&1

step bench_laws 40 $PY bench_laws.py --gpu-only --json "$W/bench_laws.json"

step figure7 40 $PY figures/make_figures.py --only 7
cp figures/fig7_kernels.png figures/fig7_kernels.pdf "$OUT/" 2>/dev/null

step resources 40 $PY kernels/resources.py --json "$W/resources.json"

step sweep 60 $PY kernels/bench.py --shapes "2,8192,16,128" --json "$W/sweep_d128.json" --sweep \
    "|fwd=128,64,8,2|fwd=64,64,4,3|fwd=128,32,8,4|dkdv=16,128,8,3|dkdv=32,64,4,3|dq=128,32,8,3|dq=128,64,8,3"
step sweep64 30 $PY kernels/bench.py --shapes "4,4096,32,64" --json "$W/sweep_d64.json" --sweep \
    "|fwd=128,64,8,3|fwd=64,64,4,3|dkdv=32,128,8,3|dkdv=16,128,8,3"

step flex 70 $PY kernels/bench.py --both --shapes "8,2048,16,128;2,8192,16,128" --impls flex \
    --json "$W/bench_flex.json" --out "" --merge-into figures/kernel_bench.json
if grep -q "merged into" "$W/flex.txt"; then
  cp figures/kernel_bench.json "$OUT/"
  step figure7_flex 30 $PY figures/make_figures.py --only 7
  cp figures/fig7_kernels.png figures/fig7_kernels.pdf "$OUT/" 2>/dev/null
fi
log "done"
pack
