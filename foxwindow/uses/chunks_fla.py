"""The chunk-safety predictions checked chunk by chunk on flash-linear-attention's own chunked kernels, on the CPU.

fla 0.6's chunked ops (chunk_gla, chunk_gated_delta_rule, chunk_kda) are Triton kernels. They run on the CPU under
Triton's interpreter (TRITON_INTERPRET=1, set before fla is imported) with three shims, applied only inside
`interpreted()`: the autotuner's timing (which needs a GPU driver) returns one constant, so the first config
runs; a Python `range` in the kernels yields ints with a `.to()` (compiled Triton's loop index is a tensor,
the interpreter's a Python int, which fla 0.6's `i_t.to(tl.int64)` calls); and fla's `gather = tl.gather`
alias is looked up when called (the interpreter patches tl.gather only while a kernel runs). Nothing else is
changed: the kernels' own arithmetic runs, in float32.

Each check runs a kernel on adversarial decays and compares, chunk by chunk, the chunks whose output is not
finite with the prediction of chunks.first_overflow for the form the kernel uses (an overflow poisons every
later chunk of its sequence through the state, so a chunk is predicted bad when it or an earlier one
overflows):

    chunk_gla (GLA, per-channel decay)          re-centred: exp(cum_i - cum_j) per pair, between sub-chunks
                                                exp(g - g_n) anchored at a boundary on the right side: never
    chunk_gated_delta_rule (Gated DeltaNet)     re-centred (exp(g_i - g_j) masked per pair, the state's
                                                exp(g_last - g_j)): never
    chunk_kda (KDA, default path)               re-centred per pair in the diagonal sub-chunks: never
    chunk_kda(safe_gate=True, lower_bound=lb)   anchored: each 16-token sub-chunk's factors at G_0 - d,
                                                d = 15 s / 2 with s = 2 (chunk_kda does not hand lower_bound to
                                                its intra kernel, so s is the default 2 whatever lb is): d = 15
                                                nats; overflows once a sub-chunk's b_i - 15 > theta (b_i the sum
                                                of its increments after its first token), i.e. for gates in
                                                [lb, 0] only when lb < -(theta + 15) / 15 = -6.91 nats
    chunks.chunked_attention (textbook)         k exp(-cum): overflows when a chunk's sum passes theta

    DECAYS                          the adversarial cases (strong, saturated, mixed, bound-violating)
    run_kernel(name, log_g, ...)    one kernel's output, its per-chunk non-finite mask
    check(...)                      every kernel x case: predicted and measured bad chunks, agreement
    main                            `python -m foxwindow.chunks_fla` (also `python chunks.py --fla-check`)
"""
import builtins
import contextlib
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from foxwindow import outputs
from foxwindow.uses import chunks

CHUNK = 64                      # fla's chunk size (BT) for all three ops
SUB = 16                        # KDA's sub-chunk (BC)
KDA_LOWER_BOUND = -5.0
KDA_SHIFT = (SUB - 1) * 2.0 / 2     # fla 0.6 chunk_kda_fwd_intra's GATE_SHIFT s = 2 (lower_bound not passed to it)


def _cases(T):
    """{name: (description, log_g (T,) float32 pattern for head 0, the same for head 1)}."""
    t = np.arange(T)
    rng = np.random.default_rng(0)
    mixed = np.where(rng.random(T) < 0.1, -30.0, -0.02)                     # bursts of near-total decay
    ramp = -0.5 * (1 + t // CHUNK)                                          # weak to strong, chunk by chunk
    late10 = np.where((t >= 2 * CHUNK + 2) & (t < 2 * CHUNK + 18), -10.0, -0.01)   # a burst inside chunk 2
    late6 = np.where((t >= CHUNK + 16) & (t < CHUNK + 32), -6.0, -0.01)           # one sub-chunk of chunk 1
    return {
        "strong": ("log g = -6 per token (past 5.545: a textbook 16-chunk overflows), head 1: -1.5",
                   np.full(T, -6.0), np.full(T, -1.5)),
        "saturated": ("log g = -100 per token (exp underflows to 0 within one token), head 1: -1e4",
                      np.full(T, -100.0), np.full(T, -1e4)),
        "mixed": ("log g = -0.02 with 10% of tokens at -30, head 1: -0.5 (chunk 0), -1, -1.5, -2 (chunk 3)",
                  mixed, ramp),
        "late-burst": ("log g = -0.01 but 16 tokens at -10 inside chunk 2, head 1: one sub-chunk at -6 in chunk 1",
                       late10, late6),
        "bound-violating": (f"log g = -12 per token, below KDA's lower_bound {KDA_LOWER_BOUND:g} (safe_gate "
                            "assumes gates in [lb, 0)), head 1: at the bound",
                            np.full(T, -12.0), np.full(T, KDA_LOWER_BOUND)),
        "within-bound": (f"log g = {KDA_LOWER_BOUND:g} per token (at the lower bound), head 1: -0.5",
                         np.full(T, KDA_LOWER_BOUND), np.full(T, -0.5)),
    }


KERNELS = ("gla", "gated_deltanet", "kda", "kda_safe_gate", "textbook")
FORM = {"gla": "recentred", "gated_deltanet": "recentred", "kda": "recentred", "kda_safe_gate": "anchored",
        "textbook": "textbook"}


class _Idx(int):
    """A loop index of the interpreter with compiled Triton's `.to(dtype)` (a no-op on an int)."""

    def to(self, *a, **k):
        return self


def _range(*args):
    for i in builtins.range(*[int(a) for a in args]):
        yield _Idx(i)


@contextlib.contextmanager
def interpreted():
    """fla's chunked ops importable and runnable under Triton's interpreter on the CPU (see the module docstring).
    Raises outputs.MissingPiece when fla is absent, RuntimeError when fla was imported without TRITON_INTERPRET."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        if any(n.startswith("fla.ops") for n in sys.modules):
            raise RuntimeError("fla's kernels were imported without TRITON_INTERPRET=1: run in a fresh process with "
                               "TRITON_INTERPRET=1 set")
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        # fla and triton: the optional kernels under test, imported after TRITON_INTERPRET is set
        import fla.ops.gated_delta_rule  # noqa: F401
        import fla.ops.gla  # noqa: F401
        import fla.ops.kda  # noqa: F401
        import triton.runtime.autotuner as at  # triton: its autotuner, shimmed below
    except ImportError as exc:
        raise outputs.MissingPiece(f"flash-linear-attention is needed for the kernel check ({exc}): "
                                   "pip install 'foxwindow[models]'") from None
    import triton.language as tl  # triton: fla's dependency, under its interpreter
    saved_bench = at.Autotuner._bench
    patched = [m for n, m in list(sys.modules.items()) if n.startswith("fla.ops") and m is not None]
    had = {m: m.__dict__.get("range") for m in patched}
    gathers = {m: m.gather for m in patched if getattr(m, "gather", None) is tl.gather}

    def late_gather(*a, **k):                      # tl.gather as the interpreter patches it while a kernel runs
        return tl.gather(*a, **k)

    at.Autotuner._bench = lambda self, *a, config=None, **k: [1.0, 1.0, 1.0]
    for m in patched:
        m.range = _range
    for m in gathers:
        m.gather = late_gather
    try:
        yield
    finally:
        at.Autotuner._bench = saved_bench
        for m, old in had.items():
            if old is None:
                m.__dict__.pop("range", None)
            else:
                m.range = old
        for m, old in gathers.items():
            m.gather = old


def _qkv(B, T, H, K, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, K, generator=g)
    beta = torch.sigmoid(torch.randn(B, T, H, generator=g))
    return q, k, v, beta


def run_kernel(name, log_g, K=16, seed=0):
    """Output of kernel `name` on scalar log-gates log_g (B, T, H) float32 (per-channel kernels get the same gate
    on every channel), unit-norm q, k. Returns (o (B, T, H, V) float32, bad (B, T // CHUNK, H) bool: the
    chunk's output has a NaN or inf). Call inside interpreted() (the textbook op needs no fla)."""
    B, T, H = log_g.shape
    q, k, v, beta = _qkv(B, T, H, K, seed)
    g = log_g.float()
    if name == "textbook":
        o, _ = chunks.chunked_attention(q, k, v, g, CHUNK, "float32")
    elif name == "gla":
        from fla.ops.gla import chunk_gla  # fla: the kernel under test
        o, _ = chunk_gla(q, k, v, g[..., None].expand(B, T, H, K).contiguous())
    elif name == "gated_deltanet":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # fla: the kernel under test
        o, _ = chunk_gated_delta_rule(q, k, v, g, beta)
    elif name in ("kda", "kda_safe_gate"):
        from fla.ops.kda import chunk_kda  # fla: the kernel under test
        kw = dict(safe_gate=True, lower_bound=KDA_LOWER_BOUND) if name == "kda_safe_gate" else {}
        o, _ = chunk_kda(q, k, v, g[..., None].expand(B, T, H, K).contiguous(), beta, **kw)
    else:
        raise ValueError(f"kernel must be one of {KERNELS}; got {name!r}")
    o = o.float()
    bad = ~torch.isfinite(o).reshape(B, T // CHUNK, CHUNK, H, -1).all(-1).all(2)           # (B, n, H)
    return o, bad


def predicted(name, log_g):
    """(B, n, H) bool: chunks predicted non-finite for kernel `name` (its form's own overflow, or an earlier one
    of the sequence reaching it through the state)."""
    lg = np.asarray(log_g, np.float64).transpose(0, 2, 1)                                     # (B, H, T)
    shift = KDA_SHIFT
    own = chunks.first_overflow(lg, CHUNK, "float32", FORM[name], sub=SUB, shift=shift)        # (B, H, n)
    return np.logical_or.accumulate(own, axis=-1).transpose(0, 2, 1)


def check(T=256, kernels=KERNELS, cases=None, progress=False):
    """Every kernel on every adversarial case (B = 1, H = 2 heads of different decays, K = 16, T tokens).
    Returns rows [{kernel, form, case, description, predicted [[per head: per chunk 0/1]], measured [[...]],
    agree, max_abs_o, seconds}]."""
    allc = _cases(T)
    cases = list(allc) if cases is None else list(cases)
    rows = []
    with interpreted():
        for name in kernels:
            for c in cases:
                desc, h0, h1 = allc[c]
                lg = torch.tensor(np.stack([h0, h1], -1)[None], dtype=torch.float32)          # (1, T, 2)
                t0 = time.perf_counter()
                o, bad = run_kernel(name, lg)
                pred = predicted(name, lg.numpy())
                meas = bad.numpy()
                fin = o[torch.isfinite(o)]
                rows.append(dict(kernel=name, form=FORM[name], case=c, description=desc,
                                 predicted=pred[0].T.astype(int).tolist(), measured=meas[0].T.astype(int).tolist(),
                                 agree=bool((pred == meas).all()),
                                 max_abs_o=float(fin.abs().max()) if fin.numel() else math.nan,
                                 seconds=round(time.perf_counter() - t0, 2)))
                if progress:
                    r = rows[-1]
                    print(f"  {name:>15s} {c:>16s}: {'agree' if r['agree'] else 'DIFFER'} ({r['seconds']:.1f} s)",
                          file=sys.stderr)
    return rows


def print_check(rows, file=None):
    file = file or sys.stdout
    print(outputs.fill(f"Chunk by chunk on fla's chunked kernels (Triton interpreter, CPU, float32; chunks of {CHUNK} "
                       "tokens, 2 heads; per head the chunks' state: '.' finite, 'X' NaN/inf; predicted | measured):"),
          file=file)
    hdr = f"{'kernel':>15s} {'form':>10s} {'case':>16s}  {'predicted':>11s} | {'measured':<11s} agree"
    print(hdr, file=file)
    print("-" * len(hdr), file=file)

    def cells(m):
        return " ".join("".join("X" if v else "." for v in h) for h in m)

    for r in rows:
        print(f"{r['kernel']:>15s} {r['form']:>10s} {r['case']:>16s}  {cells(r['predicted']):>11s} | "
              f"{cells(r['measured']):<11s} {'yes' if r['agree'] else 'NO'}", file=file)
    n = sum(r["agree"] for r in rows)
    print(outputs.fill(f"{n} of {len(rows)} kernel x case runs agree chunk by chunk (anchored form: sub-chunks of "
                       f"{SUB}, shift {KDA_SHIFT:g} nats)."), file=file)
    for c in dict.fromkeys(r["case"] for r in rows):
        print(outputs.fill(f"  {c}: {next(r['description'] for r in rows if r['case'] == c)}", indent="    "),
              file=file)


MAX_SEQ_LEN = 16384                 # --seq-len's bound


def main(argv=None):
    p = outputs.parser("Check the chunk-safety predictions chunk by chunk on flash-linear-attention's chunked kernels "
                       "(GLA, Gated DeltaNet, KDA with and without safe_gate) under Triton's interpreter on the CPU, "
                       "on adversarial decays, beside the textbook chunked op.")
    p.add_argument("--seq-len", type=int, default=256, help=f"tokens (a multiple of {CHUNK})")
    cases = list(_cases(CHUNK))
    p.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS, metavar="KERNEL",
                   help=f"the kernels to check (default all: {', '.join(KERNELS)})")
    p.add_argument("--cases", nargs="+", default=None, choices=cases, metavar="CASE",
                   help=f"the decay cases (default all: {', '.join(cases)})")
    p.add_argument("--json", default=None, help="write the rows as JSON to this path")
    outputs.add_common(p)
    a = p.parse_args(argv)
    outputs.positive("--seq-len", a.seq_len, lo=CHUNK)
    if a.seq_len % CHUNK:
        raise outputs.UsageError(f"--seq-len must be a multiple of {CHUNK}")
    if a.seq_len > MAX_SEQ_LEN:
        raise outputs.UsageError(f"--seq-len {a.seq_len} is beyond {MAX_SEQ_LEN} (Triton's interpreter takes about 2 s "
                                 f"a kernel and case at 256 tokens, and more with every chunk of {CHUNK})")
    for flag, vals in (("--kernels", a.kernels), ("--cases", a.cases or [])):
        twice = sorted({v for v in vals if vals.count(v) > 1}, key=vals.index)
        if twice:
            raise outputs.UsageError(f"{flag} lists {', '.join(twice)} more than once (each would run again); list "
                                     "each once")
    if a.json:
        a.json = outputs.check_writable(a.json, force=a.force, what="--json")
    t0 = time.perf_counter()
    rows = check(a.seq_len, a.kernels, a.cases, progress=True)
    print_check(rows)
    print(f"time {time.perf_counter() - t0:.1f} s")
    if a.json:
        outputs.write_json(a.json, {"info": {"chunk": CHUNK, "sub_chunk": SUB, "kda_lower_bound": KDA_LOWER_BOUND,
                                             "dtype": "float32", "backend": "Triton interpreter (CPU)"},
                                    "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(outputs.cli(main))
