"""The rehearsal of foxwindow/kernels/gpu_check.sh without a GPU: a timing model of every step, from the
number of fresh Triton compiles it triggers and the number of cells it times.

    python -m foxwindow.kernels.gpu_plan                  # the table, and whether the call fits its budget
    python -m foxwindow.kernels.gpu_plan --check 420      # exit 1 when the modelled total exceeds 420 s
    python -m foxwindow.kernels.gpu_plan --limits         # the step:limit list gpu_check.sh runs under

Compile counts are enumerated from the code (a compile per distinct specialisation: kernel,
head dim, the constexpr flags, and Triton's divisible-by-16 / equal-to-1 integer classes):

  ours        per head dim: fwd without gradients (RES 0), fwd with (RES 1), Delta, dK/dV, dQ   5
  ours_acp    the same with ACP compiled in (Delta shared with ours)                          4
  ours_1pass  the one-pass kernel and the dQ reducer (forward and Delta shared with ours)     2
  official    forward, backward preprocess, dK/dV, dQ (its source: no autotune, configs
              picked by shape)                                                                 4
  official_acp adaptive forward, start- and end-index finders, adaptive dK/dV and dQ (upper
              bound: dK/dV may be shared)                                                      5
  cuDNN, flash SDPA: no Triton compile (cuDNN plans its graph: counted as one compile)

The warm step compiles all of them for both target head dims on B2 T256 (H 16 at D 128, H 32
at D 64), one process per column, all at once (16 cores; compiles are single-threaded, and
Triton's on-disk cache takes concurrent writers: a kernel two columns share may compile twice).
B 2 and T 256 fall in the same integer classes as the timed B2 T8192 / B4 T4096 (not 1,
divisible by 16), so the timed steps find every kernel in Triton's on-disk cache, and the
accuracy shape B1 T784 H16 D128 (bench.ACCURACY_SHAPE) reuses the D128 ones (ours has no
batch-size argument; T is never specialised).

Seconds per compile: COMPILE_S, measured here (sm_90 compiles of the shipped kernels with the
ptxas Triton ships, 2 busy CPU cores: 1.3-4.3 s, median 3.2 s over 8; the GPU machine has 16
cores, and a compile is one process). Per timed cell CELL_S: do_bench's 25 ms warm-up and 100 ms
of repeats, its first call and estimate, the float64 row check and the case's inputs: 1.5 s
assumed (not measured: no GPU here). Per Python process START_S: torch, CUDA and Triton start-up,
8 s assumed. The step limits in gpu_check.sh are the model's times with a margin (LIMIT_FACTOR),
rounded up to 5 s; the rows that matter (target128, acp128, onepass128) come before any step that
may be cut.
"""
import math
import os
import sys

if __name__ == "__main__":      # run as a script by gpu_check.sh: the repository root on the path, for foxwindow
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from foxwindow import outputs  # noqa: E402

__all__ = ["COMPILE_S", "CONTENTION", "CELL_S", "START_S", "LIMIT_FACTOR", "BUDGET", "COMPILES", "TARGETS", "ACP",
           "WARM_OWN", "steps", "limits", "main"]

COMPILE_S = 3.5         # measured median 3.2 s here, rounded up
CONTENTION = 1.5        # the parallel warm step's compiles share disk and memory bandwidth: assumed
CELL_S = 1.5            # assumed
START_S = 8.0           # assumed
LIMIT_FACTOR = 1.5
BUDGET = 420

COMPILES = dict(ours=5, ours_acp=4, ours_1pass=2, official=4, official_acp=5, sdpa_cudnn=1,
                sdpa_flash=0, materialised=0)
TARGETS = ["ours", "official", "sdpa_cudnn"]
ACP = ["ours_acp", "official_acp"]

# what each warm process compiles: its own kernels plus those it shares with ours (run alone)
WARM_OWN = dict(ours=5, ours_acp=4 + 1, ours_1pass=2 + 2, official=4, official_acp=5 + 1, sdpa_cudnn=1)


# (step, seconds the model gives it, what it is). Fresh compiles only where the warm step did
# not already make them; cells = shapes x modes x columns.
def steps():
    warm_compiles = 2 * sum(COMPILES[c] for c in TARGETS + ACP + ["ours_1pass"])   # D 128 and D 64
    longest = 2 * max(WARM_OWN.values())                                            # the slowest process
    return [
        ("env", 10, "pip install of the carried wheels; versions"),
        ("warm", START_S + longest * COMPILE_S * CONTENTION + 4 * 0.3,
         f"{warm_compiles} compiles (every kernel of the target columns at D 128 and D 64) in 6 "
         f"processes at once, the longest {longest}"),
        ("target128", START_S + 2 * len(TARGETS) * CELL_S,
         "B2 T8192 H16 D128 fwd, fwd+bwd: ours, official, cuDNN (0 fresh compiles)"),
        ("acp128", START_S + 2 * len(ACP) * CELL_S + 2 * CELL_S,
         "the same shape: ours_acp, official_acp (0 fresh compiles; + the plan)"),
        ("onepass128", START_S + 1 * CELL_S + 4 * CELL_S,
         "accuracy of ours, ours_1pass on B1 T784 H16 D128 (0 fresh compiles), then ours_1pass fwd+bwd"),
        ("target64", START_S + 2 * 6 * CELL_S,
         "B4 T4096 H32 D64: the six columns above (0 fresh compiles)"),
        ("tests", 60, "test_kernels.py, test_onepass.py natively: many compiles of small configs (cut ok)"),
        ("scan", 40, "the anchor shapes and the T scan (optional; cut ok)"),
        ("slow", 30, "fla, FlexAttention, flash-attn-4 (optional; cut ok)"),
        ("sweep", 25, "launch configs at D 128 (optional; cut ok)"),
        ("figure7", 10, "figure 7 from the JSON"),
        ("laws", 10, "bench_laws.py --gpu-only"),
    ]


def limits():
    return [(name, int(5 * math.ceil(t * (LIMIT_FACTOR if name in
                                           ("warm", "target128", "acp128", "onepass128", "target64") else 1) / 5)))
            for name, t, _ in steps()]


def main(argv=None):
    ap = outputs.parser(__doc__.split("\n")[0])
    ap.add_argument("--debug", action="store_true", help="on error, show the full traceback")
    ap.add_argument("--check", type=float, default=None, help="exit 1 when the limits add up to more than this")
    ap.add_argument("--limits", action="store_true", help="print name:limit pairs for gpu_check.sh and stop")
    args = ap.parse_args(argv)
    lim = dict(limits())
    if args.limits:
        print(" ".join(f"{n}:{s}" for n, s in lim.items()))
        return 0
    total_model = total_limit = 0.0
    print(f"{'step':<11} {'model s':>8} {'limit s':>8}  what")
    for name, t, what in steps():
        total_model += t
        total_limit += lim[name]
        print(f"{name:<11} {t:8.0f} {lim[name]:8d}  {what}")
    budget = BUDGET if args.check is None else args.check
    print(f"{'total':<11} {total_model:8.0f} {total_limit:8.0f}  (budget {budget:.0f} s; "
          f"target rows saved by {sum(lim[n] for n in ('env', 'warm', 'target128', 'acp128', 'onepass128'))} s)")
    if args.check is not None and total_limit > args.check:
        print(f"gpu_plan: the step limits add up to {total_limit:.0f} s, over {args.check:.0f} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(outputs.cli(main))
