"""Fused causal forgetting attention (FoX) in Triton: forward and backward.

    logit_ij = q_i . k_j * sm_scale + c_i - c_j,   c = cumsum(log_fgate) over T,   j <= i
    o_i = softmax_j(logit_ij) v_j

FlashAttention-2 structure: the forward streams key blocks through an online softmax and keeps
only the row log-sum-exp; the backward recomputes P in two passes, one per key block (dK, dV and
the gate gradient) and one per query block (dQ). No atomics anywhere, so every gradient is
bitwise deterministic.

Precision of the gate. c is a running sum that grows like T * |log g| (1e5 for T = 32768 and
strong forgetting), while the logit needs c_i - c_j, which is small exactly where it matters
(a decay below about -100 is a weight under e^-100). Stored as one float32, c carries an absolute
error of half an ulp of |c|: 4e-3 at |c| = 1e5, a 0.4 % error in every nearby attention weight,
above the bf16 band. So the cumsum is taken in float64 and split into two float32 words,
c = hi + lo. Inside the kernel each tile picks an anchor row a in its own block and forms
    c_i - c_j = (hi_i - hi_a + lo_i - lo_a) + (hi_a - hi_j + lo_a - lo_j),
two O(block) vectors. hi_i - hi_a is exact when the two are within a factor 2 of each other
(Sterbenz), so each vector has a relative error of a few float32 ulps of the decay it
represents, independent of |c|: the logit's error is ~1e-7 * |c_i - c_j|, negligible for every
weight that is not already ~0. The forward and the dQ pass go one step further below the
diagonal: per key they load e_j = c_L - c_j relative to the last key L of its tile (float64 on
the host, rounded once), and add the tile's offset from the anchor, c_a - c_L, as one scalar on
the row term, so a key needs no arithmetic (foxwindow/kernels/NOTES.md, v5, v7). Since v7 every anchor is
chosen so that no term exceeds the pair's own decay, the tiles on the diagonal take c_i - c_j
from the words of both ends, and the stored lse is in the true logits' frame: fp32 holds on
the GPU's 128-row tiles as on the interpreter's (tests/kernels/test_tiles.py).

Gate gradient. With S_ij = logit_ij and dS = P * (dP - Delta), Delta_i = rowsum(dO_i * O_i):
    dc_t = rowsum_t(dS) - colsum_t(dS),   dlog_fgate_t = sum_{s >= t} dc_s
(c_s depends on log_fgate_t for every s >= t; the suffix sum is taken in float64). In exact
arithmetic rowsum(dS) = 0 (softmax is shift-invariant per row) and dc = -colsum(dS) alone, which
the dK/dV pass produces. In floating point Delta comes from the rounded O, and each row's dS then
sums to a rounding residual delta_i instead of 0; the colsum-only form adds all of them,
sum_{i >= t} delta_i, into dlog_fgate_t, while the true dlog_fgate_t = sum_{i >= t > j} dS_ij is
small under strong forgetting. So the dQ pass also writes rowsum(dS) (one row reduction per tile)
and dc keeps both terms: dlog_fgate_t is then (up to float32 rounding) the sum of the kernel's own dS over
{i >= t > j}, and the residuals enter only weighted by the attention mass on keys before t. In float32
neither sum holds the pair t = t (it cancels exactly; its two passes' roundings need not), and the
dK/dV pass's anchored tiles start where their row granule no longer precedes the key block
(bwd_direct_end): fp32 at log g ~ -10 the gate gradient is then ~4e-7 relative on every tile set.
Measured in bf16 (T = 200, log g ~ -3 U(0, 1)): relative error 7.1e-2 with colsum only, 2.1e-3
with both terms; no change for gates near 1.

Also here (foxwindow/kernels/NOTES.md, v6): head dims other than 16..256 powers of two run zero-padded;
fallback_reason() tells forgetting_attention which CUDA inputs go to the reference; adaptive
computation pruning (acp_plan) skips a prefix of key blocks per query block in all three passes;
backward="one_pass" (or FOX_ONEPASS_BWD=1) runs foxwindow/kernels/fox_bwd_onepass.py's one-pass backward
instead of the dK/dV and dQ passes.
"""
import dataclasses
import math
import os

import numpy
import torch
import triton
import triton.language as tl

__all__ = ["LOG2E", "interpreting", "tile_dot", "tile_cast", "seq_bounds", "fwd_kernel", "bwd_key_block",
           "bwd_key_anchor", "bwd_kv_tile", "bwd_dkdv_kernel", "bwd_dq_kernel", "HOPPER", "AMPERE", "NEWER", "SAFE",
           "SWEEP_CANDIDATES", "set_config", "suffix_sum", "ROW_GRANULE", "row_terms", "row_lo_terms", "bwd_delta",
           "dkdv_buffers", "dkdv_sum", "PruningPlan", "acp_plan", "BACKWARDS", "ONE_PASS_BACKWARD",
           "register_one_pass_backward", "backward_mode", "precision_of", "fallback_reason", "fox_attention_triton"]

LOG2E = 1.4426950408889634
TRITON_VERSION = tuple(int(x) for x in triton.__version__.split(".")[:2])     # (major, minor)


def interpreting():
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def interpreter_hint(err):
    """A RuntimeError that says what to change when the CPU interpreter failed for a known reason of
    the installed versions, else None. Triton 3.6's interpreter takes a loop bound held in a
    one-element array with int(array), which numpy >= 2.4 refuses ("only 0-dimensional arrays can
    be converted to Python scalars"; Triton 3.9's squeezes the array first): every kernel here
    loops to bounds computed in the kernel. The GPU compile is not affected."""
    if interpreting() and "only 0-dimensional arrays can be converted" in str(err):
        return RuntimeError(f"the Triton {triton.__version__} interpreter cannot run these kernels with numpy "
                            f"{numpy.__version__} (its loop bounds go through int() of a one-element array, "
                            f"which numpy >= 2.4 refuses): install numpy<2.4 or a newer Triton (3.9 works)")
    return None


# ----------------------------------------------------------------------------------------------
# kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def tile_dot(a, b, PREC: tl.constexpr):
    # PREC: "ieee" for float32 inputs (a true float32 product, not tf32), "tf32" (ignored by
    # 16-bit inputs), or "upcast": the CPU interpreter gets bf16 dots wrong (Triton 3.9), so there
    # the 16-bit operands go in as float32, which is exact (a product of two bf16 fits in float32)
    # and so computes what a bf16 MMA with float32 accumulation computes.
    # "exact" (float32 inputs in the interpreter): the products summed in float64 and rounded once.
    # The interpreter's float32 matmul (numpy's) sums the same D products in an order that depends on
    # the tile's shape, so two passes with different tiles got one q.k two ways (seen: 887 of the
    # 1024 entries of a 32 x 32 tile differ from the same entries of a 64 x 32 one); a GPU's float32
    # dot adds a pair's D products in one chain whatever the tile. Rounded once, every shape gives
    # the same word, as on the GPU, and the gate gradient's row and column sums (two passes) are
    # tested for what the kernel does, not for numpy's blocking.
    if PREC == "upcast":
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    elif PREC == "exact":
        return tl.dot(a.to(tl.float64), b.to(tl.float64)).to(tl.float32)
    else:
        return tl.dot(a, b, input_precision=PREC)


@triton.jit
def tile_cast(x, dtype: tl.constexpr, PREC: tl.constexpr):
    # The CPU interpreter converts float32 -> bf16 by truncation (Triton 3.9), twice the error of
    # the GPU's round-to-nearest-even; there, round the bits to nearest even first.
    if PREC == "upcast":
        if dtype == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def seq_bounds(CU, b, TQ, TK, VARLEN: tl.constexpr, SQUARE: tl.constexpr = False):
    # (batch row, first token, Tq, Tk) of program row b; in a packed batch (B == 1) b is a sequence.
    # SQUARE: the caller launched with TQ == TK, so queries and keys share positions (off = 0 is
    # then known to the compiler: the gate words of query rows load as aligned vectors)
    if VARLEN:
        bos = tl.load(CU + b)
        tq = tl.load(CU + b + 1) - bos
        return b * 0, bos, tq, tq
    elif SQUARE:
        return b, b * 0, TQ + b * 0, TQ + b * 0
    else:
        return b, b * 0, TQ + b * 0, TK + b * 0


@triton.jit
def _fwd_inner(acc, m_i, l_i, q, ha, la, pos_m, k_base, v_base, ch_base, cl_base, hl_base, e_base, s_kt,
               lo, hi, Tk, qk_scale,
               D: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr, PREC: tl.constexpr,
               ALIGN: tl.constexpr):
    # MASK (the diagonal blocks): m_i is the row max of the true logits (c_i - c_j included),
    # which stays O(|q.k|) whatever the gate and the tile, and so does the stored lse =
    # m_i + log2(l_i) (foxwindow/kernels/NOTES.md, v7). Otherwise (blocks below the diagonal) m_i is in the
    # anchor's frame, the true max minus u_i = c_i - c_a (a the query block's first row): the
    # caller moves it between the frames around this loop. BLOCK_N: this loop's key tile (the diagonal
    # loop's may be wider than the kernel's, fwd_diag_n); ALIGN: what every n0 is a multiple of.
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    # D = 128: the diagonal loop (1-2 iterations of 128 x 128 a program, fwd_diag_n) is not
    # software-pipelined: on sm_90 Triton 3.6 issues 895 instructions an iteration there unpipelined
    # against 974 pipelined (the loop below the diagonal 402 / 426); Triton 3.9 874 against 964, with
    # 68 spill loads and stores (412 below either way; with 128 x 64 tiles 489 / 530 and 527 / 530). At
    # D = 256 it is (Triton 3.9: 594 -> 571 below the diagonal, 686 -> 687 on it; 3.6 runs that
    # forward at 1 stage anyway), and at D <= 64 too.
    for n0 in tl.range(lo, hi, BLOCK_N, num_stages=1 if MASK and D == 128 else None):
        n0 = tl.multiple_of(n0, ALIGN)
        cols = n0 + offs_n
        if MASK:  # diagonal blocks: causal mask, which also hides keys past Tk
            # the rows' own gate words are loaded inside (hoisted out of the loop, they cost the loop
            # below the diagonal ~20 instructions an iteration on sm_90: register pressure)
            if BLOCK_N > ALIGN:     # wide diagonal tiles (fwd_diag_n): the words as pairs where that pays
                s, v, lq = _fwd_masked_scores(q, pos_m, k_base, v_base, ch_base, cl_base, hl_base, s_kt, n0,
                                              cols, offs_d, Tk, qk_scale, BLOCK_N, PREC, WORDS_PAIRED)
            else:
                s, v, lq = _fwd_masked_scores(q, pos_m, k_base, v_base, ch_base, cl_base, hl_base, s_kt, n0,
                                              cols, offs_d, Tk, qk_scale, BLOCK_N, PREC, False)
            m_new = tl.maximum(m_i, tl.max(s, 1) + lq)   # m_i is finite: the first block came first
            alpha = tl.math.exp2(m_i - m_new)
            p = tl.math.exp2(s - (m_new - lq)[:, None])
        else:     # blocks wholly below the diagonal are in bounds and need no mask
            k = tl.load(k_base + cols[:, None] * s_kt + offs_d[None, :])
            v = tl.load(v_base + cols[:, None] * s_kt + offs_d[None, :])
            ej = tl.load(e_base + cols)                   # (BLOCK_N,) c_L - c_j, L the tile's last key
            # logit - u_i = s + sh with sh = c_a - c_L one scalar for the tile from the exact
            # words: a score costs one FMA, as without a gate, and sh rides on the row max. Every
            # key here precedes the anchor (j <= L < n_full <= a + 1), so |e_j|, |sh| and |u_i|
            # are each at most the pair's decay c_i - c_j: their roundings are relative to it,
            # not to a tile's width (with the tile's first key as the base, e_j spanned
            # BLOCK_N |log g|).
            sh = (ha - tl.load(ch_base + n0 + BLOCK_N - 1)) + (la - tl.load(cl_base + n0 + BLOCK_N - 1))
            s = tile_dot(q, tl.trans(k), PREC) * qk_scale + ej[None, :]
            m_new = tl.maximum(m_i, tl.max(s, 1) + sh)
            alpha = tl.math.exp2(m_i - m_new)
            p = tl.math.exp2(s - (m_new - sh)[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tile_dot(tile_cast(p, v.dtype, PREC), v, PREC)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _fwd_masked_scores(q, pos_m, k_base, v_base, ch_base, cl_base, hl_base, s_kt, n0, cols, offs_d, Tk, qk_scale,
                       BLOCK_N: tl.constexpr, PREC: tl.constexpr, PAIRED: tl.constexpr):
    # a key block that touches the diagonal: its V and the scores (log2 units) less the rows' lo words,
    # s_ij - lo_i = q.k scale + (hi_i - hi_j) - lo_j, with the causal mask (which also hides keys past
    # Tk). hi_i - hi_j is one rounding of an exact difference (exact when the two are within a factor
    # 2) and lo_i, lo_j are tiny, so this is c_i - c_j to a few ulps of itself whatever the tile or the
    # gate; lo_i (returned, (BLOCK_M,)) rides on the row max, so a pair costs two adds, not three.
    # The gate words load without masks (_padded_words: finite past Tk and Tq); k and v need theirs.
    # keys past Tk read the last key's k and v instead of a masked load's zeros (no zero-fill of the
    # registers a masked load needs): the causal mask hides them from every row < Tq
    kr = tl.minimum(cols, Tk - 1)
    k = tl.load(k_base + kr[:, None] * s_kt + offs_d[None, :])
    v = tl.load(v_base + kr[:, None] * s_kt + offs_d[None, :])
    hq = tl.load(ch_base + pos_m)
    lq = tl.load(cl_base + pos_m)
    if PAIRED:    # the keys' words as (hi, lo) pairs, one 8-byte word a key (_paired_words)
        hj, lj = tl.split(tl.load(hl_base + 2 * cols[:, None] + tl.arange(0, 2)[None, :]))
    else:
        hj = tl.load((ch_base + n0) + tl.arange(0, BLOCK_N))
        lj = tl.load((cl_base + n0) + tl.arange(0, BLOCK_N))
    s = tile_dot(q, tl.trans(k), PREC) * qk_scale + (hq[:, None] - hj[None, :]) - lj[None, :]
    # the causal mask against the tile's own key offsets (constants of the layout, not recomputed)
    return tl.where((pos_m - n0)[:, None] >= tl.arange(0, BLOCK_N)[None, :], s, float("-inf")), v, lq


@triton.jit
def _fwd_first(q, pos_m, k_base, v_base, ch_base, cl_base, s_kt, n0, Tk, qk_scale,
               D: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
    # the first key block n0 (masked), which starts the online softmax: (acc, m, l) from P V
    # alone, no rescaling of a zero accumulator; m the row max of the true logits
    cols = n0 + tl.arange(0, BLOCK_N)
    s, v, lq = _fwd_masked_scores(q, pos_m, k_base, v_base, ch_base, cl_base, ch_base, s_kt, n0, cols,
                                  tl.arange(0, D), Tk, qk_scale, BLOCK_N, PREC, False)
    m = tl.max(s, 1)                # finite: every row (padded rows too) sees key n0 <= its position
    p = tl.math.exp2(s - m[:, None])
    m = m + lq                      # the true logits' frame
    acc = tile_dot(tile_cast(p, v.dtype, PREC), v, PREC)
    return acc, m, tl.sum(p, 1)


@triton.jit(do_not_specialize=["TQ", "TK"])   # one compile for all lengths
def fwd_kernel(Q, K, V, CH, CL, HL, E, O, ORES, LSE, KLO, CU,
                s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_cb, s_ch, s_lb, s_lh,
                H, GROUP, TQ, TK, qk_scale,
                D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                VARLEN: tl.constexpr, PREC: tl.constexpr, RES: tl.constexpr, ACP: tl.constexpr,
                DIAG_N: tl.constexpr = 0):
    # one program: BLOCK_M queries of one (batch, head). q, o: (B, Tq, H, D); k, v: (B, Tk, Hkv, D),
    # all with stride 1 on D. CH, CL: hi and lo words of log2(e) * c, (B, H, Tk) float32 (HL: the same
    # interleaved, (B, H, Tk, 2), for the diagonal tiles under WORDS_PAIRED); DIAG_N: the diagonal
    # loop's key tile (fwd_diag_n; 0: BLOCK_N); E: the
    # same c as an offset within each key tile, c_n0 - c_j (B, H, Tk) float32 (_tile_offsets).
    # LSE: (B, H, Tq) float32, the row's log2-sum-exp, kept for the backward. ORES (if RES): the
    # rounding residual of O in O's dtype, so that the backward's Delta sees O to ~u^2.
    # KLO (if ACP): (B, H, Tq) int32, per query row the first key not pruned (acp_plan): a
    # multiple of the pruning granule, which holds whole query and key tiles, so one load per tile.
    # causal work grows with the query block: launch the longest first (blocks are scheduled
    # in index order), so the short ones fill the last wave instead of a few long ones
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)
    pid_bh = tl.program_id(1)
    h = pid_bh % H
    b, bos, Tq, Tk = seq_bounds(CU, pid_bh // H, TQ, TK, VARLEN)
    m0 = pid_m * BLOCK_M
    if m0 >= Tq:
        return
    off = Tk - Tq                                   # queries are the last Tq positions
    b64 = b.to(tl.int64)
    t64 = bos.to(tl.int64)
    q_base = Q + b64 * s_qb + t64 * s_qt + h * s_qh
    kv_off = b64 * s_kb + t64 * s_kt + (h // GROUP) * s_kh
    c_off = b64 * s_cb + h * s_ch + bos

    offs_m = m0 + tl.arange(0, BLOCK_M)             # query rows within the sequence
    offs_d = tl.arange(0, D)
    m_ok = offs_m < Tq
    pos_m = offs_m + off                            # their absolute positions
    q = tl.load(q_base + offs_m[:, None] * s_qt + offs_d[None, :], mask=m_ok[:, None], other=0.0)

    # anchor a = first query of the block: u_i = c_i - c_a here, w_j = c_a - c_j per key block
    a = off + m0
    ha = tl.load(CH + c_off + a)
    la = tl.load(CL + c_off + a)
    u = (tl.load(CH + c_off + pos_m, mask=m_ok, other=0.0) - ha) \
        + (tl.load(CL + c_off + pos_m, mask=m_ok, other=0.0) - la)   # (BLOCK_M,)

    # The first key block is peeled off the loops (masked: it may touch the diagonal) and starts
    # the accumulator as a wgmma result. Zeroing acc before the loops instead left a path (the
    # unmasked loop running zero times) on which plain moves define the wgmma accumulator, and
    # ptxas then serialised every wgmma of the kernel (C7515: one wait per HGMMA, 24 of 24 at
    # D = 128; foxwindow/kernels/NOTES.md, v6).
    if ACP:     # pruned key blocks form a prefix: start after it
        n_lo = tl.load(KLO + b64 * s_lb + h * s_lh + bos + m0)
    else:
        n_lo = a * 0
    acc, m_i, l_i = _fwd_first(q, pos_m, K + kv_off, V + kv_off, CH + c_off, CL + c_off,
                               s_kt, n_lo, Tk, qk_scale, D, BLOCK_N, PREC)
    n_full = ((a + 1) // BLOCK_N) * BLOCK_N         # key blocks [.., n_full) lie below the diagonal
    # the first block and the diagonal blocks keep the row max in the true logits' frame; the
    # blocks below the diagonal in the anchor's (u_i off the max: no per-row work a score). The
    # moves cost one rounding of u_i in the max, relative to u_i = c_i - c_a, and every key they
    # touch lies at or before a, so a decay at least u_i away: an error of at most 2^-24 u e^-u
    # in any weight. When the loop below the diagonal is empty, nothing moves (the first block
    # may hold the diagonal, where a decay-0 pair must not pick up u_i's rounding).
    below = n_full > n_lo + BLOCK_N
    m_i = tl.where(below, m_i - u, m_i)
    acc, m_i, l_i = _fwd_inner(acc, m_i, l_i, q, ha, la, pos_m, K + kv_off, V + kv_off,
                               CH + c_off, CL + c_off, HL + 2 * c_off, E + c_off, s_kt, n_lo + BLOCK_N, n_full,
                               Tk, qk_scale, D, BLOCK_N, False, PREC, BLOCK_N)
    m_i = tl.where(below, m_i + u, m_i)
    # the diagonal: key tiles of DIAG_N (fwd_diag_n: BLOCK_M where the registers allow, one tile for
    # the BLOCK_M x BLOCK_M square instead of BLOCK_M / BLOCK_N, with one rescale of acc, not several)
    acc, m_i, l_i = _fwd_inner(acc, m_i, l_i, q, ha, la, pos_m, K + kv_off, V + kv_off,
                               CH + c_off, CL + c_off, HL + 2 * c_off, E + c_off, s_kt,
                               tl.maximum(n_full, n_lo + BLOCK_N), tl.minimum(a + BLOCK_M, Tk),
                               Tk, qk_scale, D, BLOCK_N if DIAG_N == 0 else DIAG_N, True, PREC, BLOCK_N)

    acc = acc / l_i[:, None]
    o_ptr = b64 * s_qb + t64 * s_qt + h * s_qh + offs_m[:, None] * s_qt + offs_d[None, :]
    o = tile_cast(acc, O.dtype.element_ty, PREC)
    tl.store(O + o_ptr, o, mask=m_ok[:, None])
    if RES:
        tl.store(ORES + o_ptr, tile_cast(acc - o.to(tl.float32), O.dtype.element_ty, PREC),
                 mask=m_ok[:, None])
    # the row's log2-sum-exp of the full logits; m_i is already in their frame, so no large
    # anchor term is added here (before v7: + u_i, ~BLOCK_M |log g| log2(e), cancelling m_i)
    tl.store(LSE + b64 * s_lb + h * s_lh + bos + offs_m, m_i + tl.math.log2(l_i), mask=m_ok)


@triton.jit(do_not_specialize=["TQ"])
def _bwd_delta_kernel(O, ORES, DO, DELTA, s_qb, s_qt, s_qh, s_lb, s_lh, H, TQ,
                      D: tl.constexpr, BLOCK_M: tl.constexpr, RES: tl.constexpr):
    # Delta_i = rowsum(dO_i * O_i) = sum_j P_ij dP_ij, the softmax backward's row term. Where
    # attention is peaked (strong forgetting) dS = P (dP - Delta) is a small difference, and O
    # rounded to bf16 alone would put an error of u |dO| |O| into it (measured: dq 9e-3 instead
    # of 2.5e-3 at log g ~ -3); O + its stored rounding residual is O to ~u^2.
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    m_ok = offs_m < TQ
    ptr = b * s_qb + h * s_qh + offs_m[:, None] * s_qt + offs_d[None, :]
    o = tl.load(O + ptr, mask=m_ok[:, None], other=0.0).to(tl.float32)
    if RES:
        o += tl.load(ORES + ptr, mask=m_ok[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + ptr, mask=m_ok[:, None], other=0.0).to(tl.float32)
    tl.store(DELTA + b * s_lb + h * s_lh + offs_m, tl.sum(o * do, 1), mask=m_ok)


@triton.jit
def bwd_key_block(K, V, kv_off, s_kt, n0, Tk, D: tl.constexpr, BLOCK_N: tl.constexpr):
    # The key block [n0, n0 + BLOCK_N) of one kv head, as both backwards hold it through their
    # query loops. K, V: the (B, Tk, Hkv, D) inputs; kv_off: the offset of the head's first key
    # (int64), rows s_kt apart. Returns offs_d (D,), cols (BLOCK_N,) key positions, n_ok = cols < Tk,
    # and k, v (BLOCK_N, D) in the input dtype, keys past Tk zero.
    offs_d = tl.arange(0, D)
    cols = n0 + tl.arange(0, BLOCK_N)
    n_ok = cols < Tk
    kv_ptr = kv_off + cols[:, None] * s_kt + offs_d[None, :]
    k = tl.load(K + kv_ptr, mask=n_ok[:, None], other=0.0)
    v = tl.load(V + kv_ptr, mask=n_ok[:, None], other=0.0)
    return offs_d, cols, n_ok, k, v


@triton.jit
def bwd_direct_end(n0, off, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # The first query row from which a key-block pass may use the anchored scores of bwd_kv_tile
    # for key block n0; the query tiles before it take c_i - c_j from the words of both ends
    # (MASK). Anchored, a pair's logit is (c_L - c_j) + (c_g - c_L) + (c_i - c_g) with L the block's
    # last key and g the first row of the query tile's granule (row_terms), and each term stays
    # within the pair's own decay only if j <= L <= g <= i: the granule must not start before L.
    # That also puts every row after every key (no causal mask needed). Only "every row after L"
    # (the condition before) let a key block narrower than the granule (BLOCK_N < ROW_GRANULE: the
    # D 256 table, SAFE, _TINY, the interpreter's) meet the query tiles of its own granule with
    # |c_i - c_g| up to ROW_GRANULE |log g|: a relative error of 2^-24 ROW_GRANULE log2(e) |log g|
    # in weights e^-|log g| small. Harmless for o, dq, dk, dv (2e-6 of a unit weight), but the gate
    # gradient is a sum of exactly such weights (fp32, log g -10, T100 D128 on the D 256 table:
    # 8.6e-5 relative, against 5.9e-7 on the D 128 table). n0: a key position of the sequence;
    # returns a query row, a multiple of ROW_GRANULE and so of BLOCK_M (queries: the last Tq of
    # Tk positions, off = Tk - Tq). Wide key blocks (BLOCK_N a multiple of ROW_GRANULE, Tq == Tk)
    # get the first tile below the diagonal, as before.
    last = tl.maximum(n0 + BLOCK_N - 1 - off, 0)        # L as a query row
    return tl.cdiv(last, ROW_GRANULE) * ROW_GRANULE


@triton.jit
def bwd_key_anchor(ch_base, cl_base, n0, cols, n_ok):
    # anchor a = the last key of the block: w_j = c_a - c_j here, u_i = c_i - c_a per query block,
    # for the query blocks wholly below the diagonal, where every row follows every key
    # (j <= a < i): then |w_j| and |u_i| are at most the pair's decay |c_i - c_j|, and their
    # roundings are relative to it, not to the block's width of decay (with the first key as the
    # anchor, w_j spanned BLOCK_N |log g|: foxwindow/kernels/NOTES.md v7). The diagonal blocks do not use
    # them (_fwd_masked_scores). ch_base, cl_base: one head's hi and lo gate words (float32, by
    # position); cols, n_ok: the block's key positions (BLOCK_N,) and which are < Tk. Returns
    # ha, la (scalars) and w (BLOCK_N,).
    last = n0 + tl.sum(n_ok.to(tl.int32), 0) - 1
    ha = tl.load(ch_base + last)
    la = tl.load(cl_base + last)
    w = (ha - tl.load(ch_base + cols, mask=n_ok, other=0.0)) \
        + (la - tl.load(cl_base + cols, mask=n_ok, other=0.0))     # (BLOCK_N,)
    return ha, la, w


@triton.jit
def bwd_kv_tile(dk, dv, k, v, w, ha, la, hj, lj, cols, n_ok, offs_d, q_base, do_base, ch_base, cl_base, rq_base,
                 z_base, delta_base, s_qt, m0, Tq, off, qk_scale, BLOCK_M: tl.constexpr, MASK: tl.constexpr,
                 PREC: tl.constexpr, FULL: tl.constexpr = False, KEY_LO: tl.constexpr = True):
    # One key block against query block m0, the part both backwards share (this one's dK/dV pass
    # and fox_bwd_onepass's single pass): P^T and dS^T as (BLOCK_N, BLOCK_M) tiles, added into dv
    # and dk. k, v: (BLOCK_N, D) in the input dtype; dk, dv: (BLOCK_N, D) float32; w: (BLOCK_N,)
    # float32, c_a - c_j against the key block's anchor a (hi + lo words ha, la); hj, lj: (BLOCK_N,)
    # the keys' own gate words (0 past Tk), for the tiles on the diagonal; cols: (BLOCK_N,)
    # key positions, n_ok: which are < Tk; offs_d: (D,) arange(0, D), made by the caller outside
    # its query loop. MASK (a tile touching the diagonal) takes c_i - c_j from the words of both
    # ends instead (as _fwd_masked_scores): there w_j + u_i would add two terms of up to a tile's width of
    # decay for pairs whose decay is ~0, and lse_i after them, not between them.
    # q_base, do_base: the head's (Tq, D) rows (row stride s_qt); ch_base, cl_base: its gate
    # words (by position); rq_base, z_base, delta_base: its (Tq,) float32 row terms, rq the rows' lo
    # words less lse_i (row_lo_terms, for the diagonal tiles), z the
    # log-sum-exp against the row's granule (row_terms): below the diagonal a row then costs one
    # add, z_i + (c_g - c_a), instead of four ((hi_i - ha) + (lo_i - la) - lse_i; at BLOCK_M = 32
    # and 8 warps a thread holds 8 of the tile's query columns, so each row op is 8 instructions).
    # FULL (not MASK): the caller knows every row of the tile is < Tq, so no load is masked (on
    # Triton 3.6 the masked loads of a pipelined loop cost a predicate per row chunk each iteration:
    # sm_90, D 128, the loop below the diagonal 452 -> ... instructions).
    # KEY_LO=False (MASK tiles of the dK/dV pass, 16-bit inputs): the keys' lo words stay out of the
    # logit, so P^T, dS^T, dk, dv and dc come out without the factor 2^-lo_j a key row, which the caller
    # applies once after its diagonal loop (_bwd_dkdv_head).
    # Returns dk, dv, dS^T (BLOCK_N, BLOCK_M) float32 and its one rounding to q's dtype (shared by
    # dK and, in the one-pass kernel, dQ), the query rows (BLOCK_M,) and their mask rows < Tq.
    rows = m0 + tl.arange(0, BLOCK_M)
    m_ok = rows < Tq
    pos_m = rows + off
    if FULL:
        q = tl.load(q_base + rows[:, None] * s_qt + offs_d[None, :])
        do = tl.load(do_base + rows[:, None] * s_qt + offs_d[None, :])
        delta = tl.load(delta_base + rows)
    else:
        q = tl.load(q_base + rows[:, None] * s_qt + offs_d[None, :], mask=m_ok[:, None], other=0.0)
        do = tl.load(do_base + rows[:, None] * s_qt + offs_d[None, :], mask=m_ok[:, None], other=0.0)
        # rows past Tq get lse = +inf (z = -inf), hence P = 0: they add nothing to dk, dv, dc (nor dq)
        delta = tl.load(delta_base + rows, mask=m_ok, other=0.0)
    if MASK:
        # rq_i = lo_i - lse_i, the row's lo word less lse_i (row_lo_terms: the same float32 subtraction
        # the dQ pass makes for its diagonal tiles, so both passes round the logit alike), -inf past Tq
        if FULL:
            rq = tl.load(rq_base + rows)
            hq = tl.load(ch_base + pos_m)
        else:
            rq = tl.load(rq_base + rows, mask=m_ok, other=float("-inf"))
            hq = tl.load(ch_base + pos_m, mask=m_ok, other=0.0)
        if KEY_LO:
            sT = tile_dot(k, tl.trans(q), PREC) * qk_scale + ((hq[None, :] - hj[:, None]) + (rq[None, :] - lj[:, None]))
        else:
            sT = tile_dot(k, tl.trans(q), PREC) * qk_scale + ((hq[None, :] - hj[:, None]) + rq[None, :])
        # the causal mask pos_i >= j as row offsets within the tile (constants of the layout) against
        # each key's offset from the tile's first row: two subtractions a tile, not one a query column
        sT = tl.where(tl.arange(0, BLOCK_M)[None, :] >= (cols - (m0 + off))[:, None], sT, float("-inf"))
    else:
        # z_i = (c_i - c_g) - lse_i, g the first row of the row's granule (ROW_GRANULE rows, which
        # hold whole query tiles); sg = c_g - c_a one scalar for the tile. The caller starts these
        # tiles where the granule begins at or after the key block's anchor a (bwd_direct_end):
        # j <= a <= g <= i, so w_j, sg and c_i - c_g are each at most the pair's own decay and
        # their roundings are relative to it.
        if FULL:
            z = tl.load(z_base + rows)
        else:
            z = tl.load(z_base + rows, mask=m_ok, other=float("-inf"))
        g = off + (m0 // ROW_GRANULE) * ROW_GRANULE
        sg = (tl.load(ch_base + g) - ha) + (tl.load(cl_base + g) - la)
        sT = tile_dot(k, tl.trans(q), PREC) * qk_scale + w[:, None] + (z + sg)[None, :]
    pT = tl.math.exp2(sT)                                           # (BLOCK_N, BLOCK_M)
    dv += tile_dot(tile_cast(pT, do.dtype, PREC), do, PREC)
    dpT = tile_dot(v, tl.trans(do), PREC)
    dsT = pT * (dpT - delta[None, :])
    ds16 = tile_cast(dsT, q.dtype, PREC)
    dk += tile_dot(ds16, q, PREC)
    return dk, dv, dsT, ds16, rows, m_ok


@triton.jit
def _bwd_dkdv_step(dk, dv, dc, k, v, w, ha, la, hj, lj, cols, n_ok, offs_d, q_base, do_base, ch_base, cl_base,
                   rq_base, z_base, delta_base, s_qt, m0, Tq, off, qk_scale,
                   BLOCK_M: tl.constexpr, MASK: tl.constexpr, PREC: tl.constexpr, FULL: tl.constexpr,
                   KEY_LO: tl.constexpr = True):
    # one key block against query block m0: dk, dv and dc_j -= colsum_j(dS)
    dk, dv, dsT, _, rows, _ = bwd_kv_tile(dk, dv, k, v, w, ha, la, hj, lj, cols, n_ok, offs_d, q_base, do_base,
                                           ch_base, cl_base, rq_base, z_base, delta_base, s_qt, m0, Tq,
                                           off, qk_scale, BLOCK_M, MASK, PREC, FULL, KEY_LO)
    if MASK and (PREC == "ieee" or PREC == "exact"):    # float32: the pair i = j enters neither
        dsT = tl.where(rows[None, :] + off > cols[:, None], dsT, 0.0)     # sum of dc (_bwd_dq_tile)
    return dk, dv, dc - tl.sum(dsT, 1)


@triton.jit
def _bwd_dkdv_inner(dk, dv, dc, k, v, w, ha, la, hj, lj, cols, n_ok, q_base, do_base, ch_base, cl_base,
                    rq_base, z_base, delta_base, s_qt, lo, hi, Tq, off, qk_scale,
                    D: tl.constexpr, BLOCK_M: tl.constexpr, MASK: tl.constexpr,
                    PREC: tl.constexpr, FULL: tl.constexpr, KEY_LO: tl.constexpr = True):
    # P^T and dS^T for one key block against query blocks [lo, hi): (BLOCK_N, BLOCK_M) tiles;
    # FULL: every row of [lo, hi) is < Tq; KEY_LO: bwd_kv_tile's
    offs_d = tl.arange(0, D)
    for m0 in range(lo, hi, BLOCK_M):
        m0 = tl.multiple_of(m0, BLOCK_M)
        dk, dv, dc = _bwd_dkdv_step(dk, dv, dc, k, v, w, ha, la, hj, lj, cols, n_ok, offs_d, q_base, do_base,
                                    ch_base, cl_base, rq_base, z_base, delta_base, s_qt, m0, Tq, off,
                                    qk_scale, BLOCK_M, MASK, PREC, FULL, KEY_LO)
    return dk, dv, dc


@triton.jit
def _bwd_dkdv_head(dk, dv, k, v, cols, n_ok, n0, m_lo, m_full, h, first, b64, bos, t64,
                   Q, DO, CH, CL, RQ, Z, DELTA, DC, QEND, s_qb, s_qt, s_qh, s_cb, s_ch, s_lb, s_lh,
                   Tq, off, qk_scale, D: tl.constexpr, BLOCK_M: tl.constexpr, PREC: tl.constexpr,
                   ACP: tl.constexpr):
    # the contribution of query head h to one key block's dk, dv; writes that head's dc
    c_off = b64 * s_cb + h * s_ch + bos
    if ACP:     # QEND: (B, H, Tk) int32, the first query row that prunes this key block
        m_end = tl.minimum(tl.load(QEND + c_off + n0), Tq)
    else:
        m_end = Tq
    q_off = b64 * s_qb + t64 * s_qt + h * s_qh
    l_off = b64 * s_lb + h * s_lh + bos
    ha, la, w = bwd_key_anchor(CH + c_off, CL + c_off, n0, cols, n_ok)
    hj = tl.load(CH + c_off + cols, mask=n_ok, other=0.0)      # the diagonal tiles' key words
    lj = tl.load(CL + c_off + cols, mask=n_ok, other=0.0)
    dc = tl.zeros_like(w)
    # Whole query tiles (every row < Tq) run without row masks, on the diagonal and below it; the
    # one tile holding rows past Tq, if any (it starts at m_even), runs last as straight code with
    # them (on Triton 3.6 the masked loads of the pipelined loop cost sm_90, D 128, 452 -> 326
    # instructions an iteration below the diagonal and 631 -> ... on it).
    m_even = (Tq // BLOCK_M) * BLOCK_M
    d_hi = tl.minimum(tl.minimum(m_full, m_end), m_even)
    if PREC == "ieee" or PREC == "exact":
        dk, dv, dc = _bwd_dkdv_inner(dk, dv, dc, k, v, w, ha, la, hj, lj, cols, n_ok, Q + q_off, DO + q_off,
                                     CH + c_off, CL + c_off, RQ + l_off, Z + l_off, DELTA + l_off, s_qt,
                                     m_lo, d_hi, Tq, off, qk_scale, D, BLOCK_M, True, PREC, True)
    else:
        # 16-bit inputs: the diagonal loop leaves the keys' lo words out of its logits (one add a
        # score less: sm_90, D 128, 403 -> 387 instructions an iteration on Triton 3.9) and its share of
        # dk, dv, dc is multiplied by 2^-lo_j here, once per key row. The float32 path keeps lo_j in
        # every logit, so that this pass and the dQ pass form the diagonal's dS alike (the gate gradient).
        if not first:       # the other heads' dk, dv (GQA without SPLIT) must not take this head's f
            dk = dk * tl.math.exp2(lj)[:, None]
            dv = dv * tl.math.exp2(lj)[:, None]
        dk, dv, dc = _bwd_dkdv_inner(dk, dv, dc, k, v, w, ha, la, hj, lj, cols, n_ok, Q + q_off, DO + q_off,
                                     CH + c_off, CL + c_off, RQ + l_off, Z + l_off, DELTA + l_off, s_qt,
                                     m_lo, d_hi, Tq, off, qk_scale, D, BLOCK_M, True, PREC, True, False)
        f = tl.math.exp2(-lj)                           # (BLOCK_N,), 1 past Tk (lj = 0)
        dk = dk * f[:, None]
        dv = dv * f[:, None]
        dc = dc * f
    dk, dv, dc = _bwd_dkdv_inner(dk, dv, dc, k, v, w, ha, la, hj, lj, cols, n_ok, Q + q_off, DO + q_off,
                                 CH + c_off, CL + c_off, RQ + l_off, Z + l_off, DELTA + l_off, s_qt,
                                 m_full, tl.minimum(m_end, m_even), Tq, off, qk_scale,
                                 D, BLOCK_M, False, PREC, True)
    if m_even < m_end:      # straight code, not a loop
        if m_even < m_full:
            dk, dv, dc = _bwd_dkdv_step(dk, dv, dc, k, v, w, ha, la, hj, lj, cols, n_ok, tl.arange(0, D),
                                        Q + q_off, DO + q_off, CH + c_off, CL + c_off, RQ + l_off,
                                        Z + l_off, DELTA + l_off, s_qt, m_even, Tq, off, qk_scale, BLOCK_M,
                                        True, PREC, False)
        else:
            dk, dv, dc = _bwd_dkdv_step(dk, dv, dc, k, v, w, ha, la, hj, lj, cols, n_ok, tl.arange(0, D),
                                        Q + q_off, DO + q_off, CH + c_off, CL + c_off, RQ + l_off,
                                        Z + l_off, DELTA + l_off, s_qt, m_even, Tq, off, qk_scale, BLOCK_M,
                                        False, PREC, False)
    tl.store(DC + c_off + cols, dc, mask=n_ok)
    return dk, dv


@triton.jit(do_not_specialize=["TQ", "TK"])   # one compile for all lengths
def bwd_dkdv_kernel(Q, K, V, DO, CH, CL, RQ, Z, DELTA, DK, DV, DC, KLO, QEND, CU,
                     s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_cb, s_ch, s_lb, s_lh, s_ob, s_ot, s_oh,
                     H, GROUP, TQ, TK, qk_scale, sm_scale,
                     D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     VARLEN: tl.constexpr, PREC: tl.constexpr, SPLIT: tl.constexpr,
                     ACP: tl.constexpr, SQUARE: tl.constexpr = False):
    # one program: BLOCK_N keys of one (batch, kv head), writes DC = dc (B, H, Tk) float32 for the
    # query heads it covers, and dk, dv to DK, DV with strides s_o*. Without SPLIT it loops over
    # the GROUP query heads sharing the kv head, summing dk, dv in registers in a fixed order;
    # under GQA that loop around the two pipelined query loops spills (sm_90, D = 128: 37 local
    # loads/stores an iteration). With SPLIT (GQA) a program covers one query head and writes its
    # float32 part of dk, dv to (B, Tk, H, D) buffers that the caller sums over the group: still
    # no atomics, still one fixed summation order.
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    heads = H if SPLIT else H // GROUP
    ho = pid_bh % heads                             # the head index of the dk, dv buffers
    hk = ho // GROUP if SPLIT else ho               # the kv head
    b, bos, Tq, Tk = seq_bounds(CU, pid_bh // heads, TQ, TK, VARLEN, SQUARE)
    n0 = pid_n * BLOCK_N
    if n0 >= Tk:
        return
    off = Tk - Tq
    b64 = b.to(tl.int64)
    t64 = bos.to(tl.int64)
    offs_d, cols, n_ok, k, v = bwd_key_block(K, V, b64 * s_kb + t64 * s_kt + hk * s_kh, s_kt, n0, Tk,
                                              D, BLOCK_N)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)

    # query blocks from the first that sees key n0; those before m_full take the direct decay
    m_lo = (tl.maximum(n0 - off, 0) // BLOCK_M) * BLOCK_M
    m_full = bwd_direct_end(n0, off, BLOCK_M, BLOCK_N)
    if SPLIT:
        dk, dv = _bwd_dkdv_head(dk, dv, k, v, cols, n_ok, n0, m_lo, m_full, ho, True, b64, bos, t64,
                                Q, DO, CH, CL, RQ, Z, DELTA, DC, QEND, s_qb, s_qt, s_qh, s_cb, s_ch,
                                s_lb, s_lh, Tq, off, qk_scale, D, BLOCK_M, PREC, ACP)
    else:
        for g in range(GROUP):
            dk, dv = _bwd_dkdv_head(dk, dv, k, v, cols, n_ok, n0, m_lo, m_full, hk * GROUP + g, g == 0,
                                    b64, bos, t64, Q, DO, CH, CL, RQ, Z, DELTA, DC, QEND, s_qb,
                                    s_qt, s_qh, s_cb, s_ch, s_lb, s_lh, Tq, off, qk_scale, D,
                                    BLOCK_M, PREC, ACP)
    o_ptr = b64 * s_ob + t64 * s_ot + ho * s_oh + cols[:, None] * s_ot + offs_d[None, :]
    tl.store(DK + o_ptr, tile_cast(dk * sm_scale, DK.dtype.element_ty, PREC), mask=n_ok[:, None])
    tl.store(DV + o_ptr, tile_cast(dv, DV.dtype.element_ty, PREC), mask=n_ok[:, None])


@triton.jit
def _bwd_dq_tile(q, do, ha, la, lse_u, hq, rq, delta, pos_m, k_base, v_base, ch_base, cl_base, e_base,
                 lse_base, s_kt, n0, Tk, qk_scale, D: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
                 PREC: tl.constexpr, FULL: tl.constexpr = False, HOIST: tl.constexpr = True,
                 E_N: tl.constexpr = 0):
    # one key block's dq term dS K and rowsum(dS): (BLOCK_M, D), (BLOCK_M,). Below the diagonal
    # P = exp2(q.k scale + w_j - lse_u_i), w_j = c_a - c_j and lse_u_i = lse_i - (c_i - c_a) with
    # a the block's first row: every key precedes a (j <= a <= i), so both terms are at most the
    # pair's decay. The diagonal tiles (MASK) take c_i - c_j from the words of both ends: hq (the
    # rows' hi words) and rq = lo_i - lse_i (their lo words less lse_i, one rounding relative to
    # lse_i, as the subtraction of lse_i after the pair's logit made), both per row from the caller,
    # so a pair costs (hq_i - hj_j) + (rq_i - lj_j): one add fewer than the decay's three and lse_i's
    # one. FULL (with MASK): every key of the block is < Tk, no key mask. Without HOIST (the layout
    # Triton >= 3.7 compiles better, DQ_SPLIT): the rows' words and lse_i (lse_base, by position)
    # are loaded in the tile and lse_i is subtracted after the pair's logit, as before.
    # 16-bit inputs (PREC not ieee / exact) take neither: their diagonal tiles use the below-diagonal
    # terms, masked (below); hq, rq, hj, lj are then dead and compiled out.
    cols = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    if MASK:
        if FULL:
            k = tl.load(k_base + cols[:, None] * s_kt + offs_d[None, :])
            v = tl.load(v_base + cols[:, None] * s_kt + offs_d[None, :])
            hj = tl.load(ch_base + cols)
            lj = tl.load(cl_base + cols)
        else:
            # keys past Tk read the last key (no zero-filled masked loads) and the gate words load
            # unmasked (_padded_words): the causal mask hides those keys from every row < Tq
            kr = tl.minimum(cols, Tk - 1)
            k = tl.load(k_base + kr[:, None] * s_kt + offs_d[None, :])
            v = tl.load(v_base + kr[:, None] * s_kt + offs_d[None, :])
            hj = tl.load((ch_base + n0) + tl.arange(0, BLOCK_N))
            lj = tl.load((cl_base + n0) + tl.arange(0, BLOCK_N))
        # the causal mask against the tile's own key offsets (constants of the layout)
        live = (pos_m - n0)[:, None] >= tl.arange(0, BLOCK_N)[None, :]
        if PREC != "ieee" and PREC != "exact":
            # 16-bit inputs: the below-diagonal form, e_j = c_L - c_j (L the tile's last key < Tk, as
            # _tile_offsets) and the row term lse_u_i - (c_a - c_L), plus the mask: one add a score
            # instead of three (sm_90, bf16: D 128 544 -> 470 instructions an iteration on Triton 3.6,
            # 547 -> 493 on 3.9; D 64 489 -> 429 and 476 -> 419). For rows i < L the two terms have
            # opposite signs, so the logit's rounding is 2^-24 times up to a tile's width of decay
            # (c_j - c_L), not the pair's: at log g = -10 and 64 keys ~6e-5 in log2 units, a relative
            # 4e-5 in P, against 16-bit rounding of 2^-8 (2^-11 for fp16). float32 keeps the two words,
            # whose rounding is the pair's (the gate gradient's bound, test_tiles).
            # (e_base is a _padded_words buffer: keys past Tk load finite words, masked as above)
            ej = tl.load(e_base + cols)
            EW: tl.constexpr = BLOCK_N if E_N == 0 else E_N     # the width of e's tiles
            nl = n0 + EW - 1 if FULL else tl.minimum(n0 + EW, Tk) - 1
            sh = (ha - tl.load(ch_base + nl)) + (la - tl.load(cl_base + nl))
            s = tile_dot(q, tl.trans(k), PREC) * qk_scale + ej[None, :]
            if EW == BLOCK_N:
                x = (lse_u - sh)[:, None]
            else:
                # a tile of two of e's tiles (dq_diag_n): each half's keys against its own last key
                # L_h, so each column takes its half's row term; which half a column is in is a
                # constant of the layout, so the select is resolved at compile time
                tl.static_assert(BLOCK_N == 2 * EW)
                nl2 = n0 + BLOCK_N - 1 if FULL else tl.minimum(n0 + BLOCK_N, Tk) - 1
                sh2 = (ha - tl.load(ch_base + nl2)) + (la - tl.load(cl_base + nl2))
                x = tl.where((tl.arange(0, BLOCK_N) < EW)[None, :], (lse_u - sh)[:, None], (lse_u - sh2)[:, None])
            p = tl.math.exp2(tl.where(live, s - x, float("-inf")))
        elif HOIST:
            s = tile_dot(q, tl.trans(k), PREC) * qk_scale + ((hq[:, None] - hj[None, :]) + (rq[:, None] - lj[None, :]))
            p = tl.math.exp2(tl.where(live, s, float("-inf")))
        else:
            # unmasked (_padded_words, lse too): rows past Tq get finite values, and are never stored
            hr = tl.load(ch_base + pos_m)
            lr = tl.load(cl_base + pos_m)
            lse = tl.load(lse_base + pos_m)
            rr = lr - lse
            s = tile_dot(q, tl.trans(k), PREC) * qk_scale + ((hr[:, None] - hj[None, :]) + (rr[:, None] - lj[None, :]))
            p = tl.math.exp2(tl.where(live, s, float("-inf")))
    else:
        k = tl.load(k_base + cols[:, None] * s_kt + offs_d[None, :])
        v = tl.load(v_base + cols[:, None] * s_kt + offs_d[None, :])
        # as the forward: e_j = c_L - c_j from the key tile's last key L (one word a key), and
        # sh = c_a - c_L one scalar a tile from the exact words, on the row term (a row op costs
        # 2 instructions a thread here, a key op 16: BLOCK_N / 4 keys a thread)
        ej = tl.load(e_base + cols)
        sh = (ha - tl.load(ch_base + n0 + BLOCK_N - 1)) + (la - tl.load(cl_base + n0 + BLOCK_N - 1))
        s = tile_dot(q, tl.trans(k), PREC) * qk_scale + ej[None, :]
        p = tl.math.exp2(s - (lse_u - sh)[:, None])
    dp = tile_dot(do, tl.trans(v), PREC)
    ds = p * (dp - delta[:, None])
    dq_j = tile_dot(tile_cast(ds, k.dtype, PREC), k, PREC)
    if MASK and (PREC == "ieee" or PREC == "exact"):
        # dc_t = rowsum_t(dS) - colsum_t(dS) holds dS_tt in both sums, and this pass and the dK/dV
        # pass each compute it: under strong forgetting its rounding (that of dP_tt - Delta_t, ~u |dP|)
        # is the largest of either sum's, while dlog_fgate is a sum of weights e^-|log g| small; the
        # two roundings cancel only if both passes' dots give dS_tt bit for bit (another tile shape
        # may sum the products in another order). In exact arithmetic dS_tt cancels, so in float32
        # neither pass adds it: strict row and column sums, by construction whatever the dots do.
        # 16-bit inputs keep it (their bound, 1.3 u, is far above that rounding) and the diagonal
        # loops' 35 (dK/dV) and 67 (dQ) instructions a tile that the select costs on sm_90 at D 128.
        ds = tl.where(pos_m[:, None] > cols[None, :], ds, 0.0)
    return dq_j, tl.sum(ds, 1)


@triton.jit
def _bwd_dq_inner(dq, dr, q, do, ha, la, lse_u, hq, rq, delta, pos_m, k_base, v_base, ch_base, cl_base,
                  e_base, lse_base, s_kt, lo, hi, Tk, qk_scale,
                  D: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr, PREC: tl.constexpr,
                  FULL: tl.constexpr = False, HOIST: tl.constexpr = True, E_N: tl.constexpr = 0):
    # the wide diagonal tile (E_N: dq_diag_n) unpipelined: pipelined, its 128 x 128 scores and dP beside
    # dq's accumulator spill (sm_90, D 128, Triton 3.9: 4 spill loads an iteration; unpipelined none)
    for n0 in tl.range(lo, hi, BLOCK_N, num_stages=1 if E_N != 0 else None):
        n0 = tl.multiple_of(n0, BLOCK_N)
        dq_j, dr_j = _bwd_dq_tile(q, do, ha, la, lse_u, hq, rq, delta, pos_m, k_base, v_base, ch_base,
                                  cl_base, e_base, lse_base, s_kt, n0, Tk, qk_scale, D, BLOCK_N, MASK, PREC,
                                  FULL, HOIST, E_N)
        dq += dq_j
        dr += dr_j
    return dq, dr


@triton.jit(do_not_specialize=["TQ", "TK"])   # one compile for all lengths
def bwd_dq_kernel(Q, K, V, DO, CH, CL, E, LSE, DELTA, DQ, DR, KLO, CU,
                   s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_cb, s_ch, s_lb, s_lh,
                   H, GROUP, TQ, TK, qk_scale, sm_scale,
                   D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   VARLEN: tl.constexpr, PREC: tl.constexpr, ACP: tl.constexpr, DIAG_N: tl.constexpr = 0):
    # one program: BLOCK_M queries of one (batch, head), the same key range and order as the forward;
    # DIAG_N: the key tile of the diagonal loop (dq_diag_n; 0: BLOCK_N)
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)
    pid_bh = tl.program_id(1)
    h = pid_bh % H
    b, bos, Tq, Tk = seq_bounds(CU, pid_bh // H, TQ, TK, VARLEN)
    m0 = pid_m * BLOCK_M
    if m0 >= Tq:
        return
    off = Tk - Tq
    b64 = b.to(tl.int64)
    t64 = bos.to(tl.int64)
    kv_off = b64 * s_kb + t64 * s_kt + (h // GROUP) * s_kh
    c_off = b64 * s_cb + h * s_ch + bos
    l_off = b64 * s_lb + h * s_lh + bos
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    m_ok = offs_m < Tq
    pos_m = offs_m + off
    q_ptr = b64 * s_qb + t64 * s_qt + h * s_qh + offs_m[:, None] * s_qt + offs_d[None, :]
    q = tl.load(Q + q_ptr, mask=m_ok[:, None], other=0.0)
    do = tl.load(DO + q_ptr, mask=m_ok[:, None], other=0.0)
    lse = tl.load(LSE + l_off + offs_m, mask=m_ok, other=float("inf"))
    delta = tl.load(DELTA + l_off + offs_m, mask=m_ok, other=0.0)
    a = off + m0
    ha = tl.load(CH + c_off + a)
    la = tl.load(CL + c_off + a)
    hq = tl.load(CH + c_off + pos_m, mask=m_ok, other=0.0)
    lq = tl.load(CL + c_off + pos_m, mask=m_ok, other=0.0)
    u = (hq - ha) + (lq - la)
    lse_u = lse - u             # P_ij = exp2(s_ij + w_j - lse_u_i): one FMA and one add a score
    rq = lq - lse               # the diagonal tiles' row term (_bwd_dq_tile); -inf past Tq
    if ACP:     # the forward's pruned prefix of key blocks
        n_lo = tl.load(KLO + l_off + m0)
    else:
        n_lo = a * 0
    if D <= 64:
        # the first key block peeled off the loops, as in the forward: dq starts as a wgmma
        # result (zeroed, it was serialised by ptxas on Triton 3.6 at D = 64: 24 waits for 24
        # HGMMA). Wider heads are not serialised either way, and there the peel costs 16-128
        # bytes of stack (readings in foxwindow/kernels/NOTES.md, v6), so they keep the zeroed start.
        dq, dr = _bwd_dq_tile(q, do, ha, la, lse_u, hq, rq, delta, pos_m, K + kv_off, V + kv_off,
                              CH + c_off, CL + c_off, E + c_off, LSE + l_off - off, s_kt, n_lo, Tk, qk_scale,
                              D, BLOCK_N, True, PREC, False, DQ_SPLIT)
        n_lo += BLOCK_N
    else:
        dq = tl.zeros([BLOCK_M, D], tl.float32)
        dr = tl.zeros([BLOCK_M], tl.float32)
    n_full = ((a + 1) // BLOCK_N) * BLOCK_N
    dq, dr = _bwd_dq_inner(dq, dr, q, do, ha, la, lse_u, hq, rq, delta, pos_m, K + kv_off, V + kv_off,
                           CH + c_off, CL + c_off, E + c_off, LSE + l_off - off, s_kt, n_lo, n_full, Tk, qk_scale,
                           D, BLOCK_N, False, PREC)
    d_lo = tl.maximum(n_full, n_lo)
    d_hi = tl.minimum(a + BLOCK_M, Tk)
    if DQ_SPLIT:
        # the diagonal tiles with every key < Tk without key masks, then the one past Tk, if any, as
        # straight code (Triton 3.6, sm_90, D 128: the diagonal loop 710 -> 616 instructions)
        n_even = (Tk // BLOCK_N) * BLOCK_N
        dq, dr = _bwd_dq_inner(dq, dr, q, do, ha, la, lse_u, hq, rq, delta, pos_m, K + kv_off, V + kv_off,
                               CH + c_off, CL + c_off, E + c_off, LSE + l_off - off, s_kt, d_lo,
                               tl.minimum(d_hi, n_even), Tk, qk_scale, D, BLOCK_N, True, PREC, True)
        n_t = tl.maximum(d_lo, n_even)
        if n_t < d_hi:
            dq_j, dr_j = _bwd_dq_tile(q, do, ha, la, lse_u, hq, rq, delta, pos_m, K + kv_off, V + kv_off,
                                      CH + c_off, CL + c_off, E + c_off, LSE + l_off - off, s_kt, n_t, Tk,
                                      qk_scale, D, BLOCK_N, True, PREC)
            dq += dq_j
            dr += dr_j
    else:
        # Triton 3.9 compiles that form to more (616 -> 695): there one masked loop, as before
        if DIAG_N == 0 or DIAG_N == BLOCK_N:
            dq, dr = _bwd_dq_inner(dq, dr, q, do, ha, la, lse_u, hq, rq, delta, pos_m, K + kv_off, V + kv_off,
                                   CH + c_off, CL + c_off, E + c_off, LSE + l_off - off, s_kt, d_lo, d_hi, Tk,
                                   qk_scale, D, BLOCK_N, True, PREC, False, False)
        else:
            dq, dr = _bwd_dq_inner(dq, dr, q, do, ha, la, lse_u, hq, rq, delta, pos_m, K + kv_off, V + kv_off,
                                   CH + c_off, CL + c_off, E + c_off, LSE + l_off - off, s_kt, d_lo, d_hi, Tk,
                                   qk_scale, D, DIAG_N, True, PREC, False, False, BLOCK_N)
    tl.store(DQ + q_ptr, tile_cast(dq * sm_scale, DQ.dtype.element_ty, PREC), mask=m_ok[:, None])
    tl.store(DR + l_off + offs_m, dr, mask=m_ok)


# ----------------------------------------------------------------------------------------------
# launch configuration: picked by device capability, no autotuning
# ----------------------------------------------------------------------------------------------
# (BLOCK_M, BLOCK_N, num_warps, num_stages) for each of the three kernels. Hopper: 128-row query
# tiles for the forward (two warpgroups, 64 rows each, keep wgmma busy) and 128-key tiles for
# dK/dV with thin query strips. Register budget: a (rows x D) float32 accumulator costs
# rows * D / (32 * num_warps) registers a thread; dK/dV hold two, so BLOCK_N * D * 2 / (32 * warps)
# must stay well under 255 (128 at BLOCK_N = 128, D = 128, 8 warps). Each entry was checked with
# foxwindow/kernels/resources.py (sm_90 compile, no GPU): it fits, uses wgmma (D = 256 dK/dV excepted: its
# 32-key tiles run mma.sync, the only tiles found that do not spill there) and has no spill inside
# a loop. Not yet timed on the chip: bench.py --config sweeps alternatives.
HOPPER = {
    32: dict(fwd=(128, 128, 8, 3), dkdv=(64, 128, 8, 3), dq=(128, 64, 8, 3)),
    64: dict(fwd=(128, 128, 8, 3), dkdv=(64, 128, 8, 3), dq=(128, 64, 8, 3)),
    128: dict(fwd=(128, 64, 8, 3), dkdv=(32, 128, 8, 3), dq=(128, 64, 8, 2)),
    256: dict(fwd=(64, 64, 8, 2), dkdv=(32, 32, 8, 2), dq=(64, 32, 8, 2)),
}
if TRITON_VERSION < (3, 7):
    # Triton 3.6 (the GPU machine's) pipelines the D 256 forward at 2 stages with 10 spill loads/stores
    # an iteration in its diagonal loop (192 bytes of stack); at 1 stage none, and fewer instructions in
    # both loops (492 / 816 against 498 / 864). Triton 3.9 goes the other way (1 stage: 15 spills a loop).
    HOPPER[256] = dict(HOPPER[256], fwd=(64, 64, 8, 1))
# Ampere, Ada and newer (100 KB of shared memory or more): the tutorial's safe middle.
AMPERE = {
    32: dict(fwd=(128, 64, 4, 3), dkdv=(32, 64, 4, 3), dq=(64, 32, 4, 3)),
    64: dict(fwd=(128, 64, 4, 3), dkdv=(32, 64, 4, 3), dq=(64, 32, 4, 3)),
    128: dict(fwd=(64, 64, 4, 2), dkdv=(32, 64, 4, 2), dq=(64, 32, 4, 2)),
    256: dict(fwd=(32, 32, 4, 1), dkdv=(16, 32, 4, 1), dq=(32, 16, 4, 1)),
}
# Blackwell and later (no such GPU here): Ampere's table, except the D <= 64 forward, whose
# 4-warp 128 x 64 tile compiles for sm_100 with 166-184 spill loads/stores an iteration
# (foxwindow/kernels/resources.py readings, Triton 3.9); 8 warps: none.
NEWER = {D: dict(c, fwd=(128, 64, 8, 3)) if D <= 64 else c for D, c in AMPERE.items()}
# Anything else, and the retry after an out-of-resources launch: small tiles, no pipelining.
SAFE = dict(fwd=(32, 32, 4, 1), dkdv=(16, 32, 4, 1), dq=(32, 16, 4, 1))
# The last retry: Turing-class shared memory (64 KB) cannot hold SAFE's D = 256 backward tiles.
_TINY = dict(fwd=(16, 16, 4, 1), dkdv=(16, 16, 4, 1), dq=(16, 16, 4, 1))
# The CPU interpreter: unequal, small tiles so that short test sequences span several blocks of
# both kinds (off-diagonal and diagonal) in every pass.
_INTERP = dict(fwd=(32, 16, 4, 1), dkdv=(16, 32, 4, 1), dq=(32, 16, 4, 1))

# Launch configs worth timing on Hopper beyond the shipped ones, per head dim, in the format of
# bench.py --config / --sweep ('' is the shipped config). Each compiles for sm_90 with pipelined
# wgmma and no spill inside a loop on Triton 3.6 (the GPU machine's; foxwindow/kernels/resources.py), except
# as noted. D = 128 forward 128 x 128 is the official FoX kernel's tile: its off-diagonal loop
# issues 622 instructions per 128 keys against 2 x 400 for the shipped 128 x 64 (3.6; 3.9: 643
# vs 2 x 405), at 255 registers (3.9: one spill load/store an iteration, in the diagonal loop
# or the off-diagonal one: not told apart). Left out after the same reading: dQ
# 128 x 64 x 3 and 128 x 32 x 3 at D = 128 (serialised on 3.6), dK/dV 64 x 128 at D = 128 and
# dQ 128 x 128 at D = 64, 64 x 64 at D = 256 (12-126 spills an iteration).
SWEEP_CANDIDATES = {
    64: ["", "fwd=128,64,8,3", "dkdv=32,128,8,3"],
    128: ["", "fwd=128,128,8,2", "fwd=128,64,8,2", "fwd=128,32,8,4"],
    256: ["", "fwd=64,32,8,2"],
}

_OVERRIDE = {}      # kernel name -> config tuple; set by set_config() for tuning sweeps
_FALLBACK = {}      # (kernel, device, D, dtype) -> fallback steps taken after running out of resources


def set_config(**cfg):
    """Override launch configs, e.g. set_config(fwd=(128, 64, 8, 3)); set_config() resets."""
    for name, c in cfg.items():
        if name not in SAFE:
            raise ValueError(f"unknown kernel {name!r}; choose from {sorted(SAFE)}")
        if len(c) != 4 or any(b < 16 or b & (b - 1) for b in c[:2]):
            raise ValueError(f"{name}: want (BLOCK_M, BLOCK_N, num_warps, num_stages) with "
                             f"power-of-two blocks >= 16; got {c}")
        if name == "dkdv" and c[0] > ROW_GRANULE:
            raise ValueError(f"dkdv: BLOCK_M {c[0]} over the row granule {int(ROW_GRANULE)} of row_terms "
                             f"(a query tile must lie in one granule)")
    _OVERRIDE.clear()
    _OVERRIDE.update(cfg)


def _config(name, device, D):
    if name in _OVERRIDE:
        return _OVERRIDE[name]
    if interpreting() or device.type != "cuda":
        return _INTERP[name]
    major, _ = torch.cuda.get_device_capability(device)
    # Ampere's table was sized for 100 KB of shared memory, so it also serves Ada and later chips
    table = HOPPER if major == 9 else NEWER if major >= 10 else AMPERE if major >= 8 else None
    return table[D][name] if table is not None and D in table else SAFE[name]


def _arch(device):
    """Compute capability x 10 of a CUDA device outside the interpreter, else None (fwd_diag_n)."""
    if interpreting() or device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def _launch_configs(name, device, D, dtype):
    """The configs _launch tries in order: the device's, then SAFE, then _TINY, minus those that
    already ran out of resources for this kernel, device, head dim and dtype."""
    chain = []
    for c in (_config(name, device, D), SAFE[name], _TINY[name]):
        if c not in chain:
            chain.append(c)
    return chain[min(_FALLBACK.get((name, str(device), D, dtype), 0), len(chain) - 1):]


def _launch(name, kernel, n_rows, n_prog, device, D, dtype, args, consts, granule=None):
    """Launch with the device's config; on OutOfResources step down to SAFE, then _TINY (never
    raise for an unknown GPU merely because its shared memory is smaller than we guessed).
    `args` may be a function of the config's BLOCK_N (the key-tile offsets depend on it). Under
    pruning every tile must lie inside one granule of the plan (else tiles would straddle it)."""
    key = (name, str(device), D, dtype)
    chain = _launch_configs(name, device, D, dtype)
    for i, (bm, bn, warps, stages) in enumerate(chain):
        if granule is not None and max(bm, bn) > granule:
            raise RuntimeError(f"{name}: launch config {(bm, bn, warps, stages)} has tiles wider than "
                               f"the pruning granule {granule} of the forward (set_config changed "
                               f"between the forward and the backward?)")
        tile = bn if name == "dkdv" else bm
        grid = (triton.cdiv(max(n_rows, 1), tile), n_prog)
        try:
            a = args(bn) if callable(args) else args
            kw = (dict(consts, DIAG_N=fwd_diag_n(bm, bn, warps, D, _arch(device))) if name == "fwd" else
                  dict(consts, DIAG_N=dq_diag_n(bm, bn, warps, D, _arch(device), dtype)) if name == "dq" else
                  consts)
            kernel[grid](*a, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages, **kw)
            return
        except triton.runtime.errors.OutOfResources:
            if i == len(chain) - 1:
                raise
            _FALLBACK[key] = _FALLBACK.get(key, 0) + 1
        except Exception as e:
            hint = interpreter_hint(e)
            if hint is None:
                raise
            raise hint from e


# ----------------------------------------------------------------------------------------------
# autograd wrapper
# ----------------------------------------------------------------------------------------------

def _gate_words(log_fgate, cu_seqlens):
    """c = cumsum(log_fgate) in float64, restarted per packed sequence, scaled by log2(e) and split
    into float32 words hi + lo (the kernels work in base 2). (B, T, H) -> hi, lo (B, H, T) float32
    and c itself (B, H, T) float64."""
    c = torch.cumsum(log_fgate.to(torch.float64), dim=1)
    if cu_seqlens is not None:  # subtract the running total before each sequence's first token
        starts = cu_seqlens[:-1].long()
        before = c[0, (starts - 1).clamp(min=0)] * (starts > 0)[:, None]           # (N, H)
        seq = torch.repeat_interleave(torch.arange(len(starts), device=c.device),
                                      (cu_seqlens[1:] - cu_seqlens[:-1]).long(),
                                      output_size=c.shape[1])
        c = c - before[seq][None]
    c = (c * LOG2E).transpose(1, 2).contiguous()
    hi, lo = _padded_words(c.shape, c.device), _padded_words(c.shape, c.device)
    hi.copy_(c)
    lo.copy_(c - hi.to(torch.float64))
    return hi, lo, c


WORD_PAD = 256      # zero words after the last head's gate words: > any tile side (fwd, dK/dV, dQ)


def _padded_words(shape, device):
    """A contiguous float32 tensor of `shape` (B, H, T) whose storage runs WORD_PAD zeros past its
    end. The diagonal tiles load gate words of whole key tiles and row tiles without a mask (keys
    past Tk, rows past Tq): a word past one head's end is the next head's (finite), past the last
    head's one of these zeros, never memory outside the buffer. The causal mask hides every such
    key from every row < Tq, and rows past Tq are never stored (the dK/dV pass masks them itself)."""
    n = math.prod(shape)
    buf = torch.zeros(n + WORD_PAD, device=device, dtype=torch.float32)
    return buf[:n].view(shape)


def _paired_words(ch, cl):
    """hi and lo (B, H, T) float32 interleaved, (B, H, T, 2), in a _padded_words buffer (WORD_PAD / 2
    pairs past the end, more than a diagonal key tile, fwd_diag_n <= 128): the forward's diagonal
    tiles load a key's two words as one 8-byte word (WORDS_PAIRED)."""
    hl = _padded_words((*ch.shape, 2), ch.device)
    hl[..., 0] = ch
    hl[..., 1] = cl
    return hl


def _tile_offsets(c, bn, cu_seqlens):
    """c as an offset within each key tile of width bn: e_j = c_L - c_j, L the last key of j's tile
    (tiles restart at each packed sequence; a sequence's last tile ends at its last key), from
    _gate_words' float64 c, rounded once to float32. (B, H, T) -> (B, H, T). The forward reads it
    in the tiles wholly below the diagonal, where every key precedes every query row, and adds the
    row's own offset c_i - c_L there: with L the tile's last key both terms are at most the pair's
    decay c_j - c_i in size, so their roundings are relative to it (the first key as the base made
    them a tile's width of decay, foxwindow/kernels/NOTES.md v7). A key costs one load and no arithmetic.
    The dQ pass reads it the same way (with its own tile width; v7: a key op there costs 16
    instructions a thread, a row op 2), and for 16-bit inputs in its diagonal tiles too, masked
    (_bwd_dq_tile; dq_diag_n's wide tile is two of these tiles). The forward's diagonal tiles take
    c_i - c_j from the two words directly (_fwd_masked_scores). In a _padded_words buffer: the dQ
    diagonal tiles load e_j of whole key tiles past Tk without clamping the index."""
    T = c.shape[-1]
    j = torch.arange(T, device=c.device)
    if cu_seqlens is None:
        base = torch.clamp(j - j % bn + bn - 1, max=T - 1)
    else:
        lens = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
        bos = torch.repeat_interleave(cu_seqlens[:-1].long(), lens, output_size=T)
        eos = torch.repeat_interleave(cu_seqlens[1:].long(), lens, output_size=T)
        base = torch.minimum(j - (j - bos) % bn + bn - 1, eos - 1)
    e = _padded_words(c.shape, c.device)
    e.copy_(c[..., base] - c)
    return e


def suffix_sum(dc, cu_seqlens):
    """dlog_fgate_t = sum_{s >= t} dc_s within each sequence, in float64. (B, H, T) -> (B, T, H)."""
    dc = dc.to(torch.float64)
    suf = dc.flip(-1).cumsum(-1).flip(-1)
    if cu_seqlens is not None:  # remove what later sequences added
        ends = cu_seqlens[1:].long()
        T = dc.shape[-1]
        after = torch.cat([suf, torch.zeros_like(suf[..., :1])], -1)[..., ends]     # (1, H, N)
        seq = torch.repeat_interleave(torch.arange(len(ends), device=dc.device),
                                      (cu_seqlens[1:] - cu_seqlens[:-1]).long(), output_size=T)
        suf = suf - after[..., seq]
    return suf.to(torch.float32).transpose(1, 2).contiguous()


# The dQ pass's diagonal tiles in the form each Triton version compiles to fewer instructions on sm_90
# (bwd_dq_kernel): key-mask-free whole tiles with the rows' words hoisted on 3.6 (the GPU machine's),
# the one masked loop on 3.7 and later (measured on 3.9). Both forms compute the same P to rounding.
DQ_SPLIT = tl.constexpr(TRITON_VERSION < (3, 7))
# The dK/dV pass compiled for Tq == Tk (seq_bounds' SQUARE: the rows' gate words then load as aligned
# vectors) on Triton 3.6, where that takes its diagonal loop from 455 to 435 instructions on sm_90 at
# D 128 (below the diagonal 327 -> 330); 3.9 compiles it to more (430 -> 431, 340 -> 343), as it does
# the forward (527 -> 572 on the diagonal) and dQ (547 -> 559), so only dK/dV on 3.6 takes it.
DKDV_SQUARE = TRITON_VERSION < (3, 7)
# The forward's diagonal tiles read the keys' gate words as (hi, lo) pairs from one interleaved buffer
# (_paired_words: one 8-byte load a key instead of two 4-byte ones) on Triton 3.7 and later, where the
# two separate loads of a 128-key tile cost sm_90 (D 128) 32 address computations an iteration; 3.6
# folds those into the loads' offsets and compiles the pairs to more (diagonal loop 921 -> 931).
WORDS_PAIRED = tl.constexpr(TRITON_VERSION >= (3, 7))


def fwd_diag_n(block_m, block_n, num_warps, D, arch=None):
    """The key tile of the forward's diagonal loop: BLOCK_M (the whole BLOCK_M x BLOCK_M square of a
    query tile's diagonal in one iteration, and one rescale of the accumulator instead of BLOCK_M /
    BLOCK_N) where its scores stay within 64 float32 registers a thread and D <= 128, on sm_90 (arch,
    compute capability x 10) and in the interpreter (arch None), else BLOCK_N. sm_100 compiles the wide
    tile of its D <= 64 table (128, 64, 8 warps) with 224-231 spill loads and stores inside loops.
    sm_90, D 128, (128, 64, 8 warps): 128 instead of 64, the diagonal loop 489 instructions a 128 x 64
    tile (0.478 a score) -> 895 a 128 x 128 one (0.437) on Triton 3.6, 527 (0.515) -> 874 (0.427) on 3.9
    (the official kernel 0.489 / 0.454); the loop below the diagonal 400 -> 402 and 409 -> 412."""
    if (arch is None or arch // 10 == 9) and block_m > block_n and block_m * block_m <= 64 * 32 * num_warps \
            and D <= 128:
        return block_m
    return block_n


def dq_diag_n(block_m, block_n, num_warps, D, arch=None, dtype=torch.bfloat16):
    """The key tile of the dQ pass's diagonal loop: BLOCK_M = 2 BLOCK_N (the tile of two of e's key
    tiles, each against its own last key, _bwd_dq_tile's E_N; the loop unpipelined) for 16-bit inputs
    on Triton 3.7 and later (not DQ_SPLIT), where the BLOCK_M x BLOCK_M scores fit 64 float32
    registers a thread, at D 128 on sm_90 (arch, compute capability x 10) and at D <= 128 in the
    interpreter (arch None: the tile tests), else BLOCK_N. sm_90, D 128, (128, 64, 8 warps), Triton
    3.9: the diagonal loop 493 instructions a 128 x 64 tile (0.481 a score, the official kernel 0.473)
    -> 850 a 128 x 128 one (0.415); pipelined it spills (4 loads an iteration). At D 64 the 128 x 64
    tile reads fewer a score (0.409; 128 x 128 0.456 before v10's row terms); float32 keeps the two
    words of each end on the diagonal, whose tiles are BLOCK_N wide."""
    wide = (arch is None and D <= 128) or (arch is not None and arch // 10 == 9 and D == 128)
    if not DQ_SPLIT and wide and precision_of(dtype) not in ("ieee", "exact") and block_m == 2 * block_n \
            and block_m * block_m <= 64 * 32 * num_warps:
        return block_m
    return block_n


ROW_GRANULE = tl.constexpr(64)     # rows per granule of row_terms; every backward query tile fits in one


def row_terms(ch, cl, lse, Tk, cu_seqlens=None):
    """z_i = (c_i - c_g) - lse_i per query row, g the first row of i's granule of ROW_GRANULE rows
    (counted from its sequence's first query; queries are the last Tq of Tk positions), in the
    kernels' base-2 units from the hi/lo gate words. The backward's key-block passes add one
    scalar per tile to it (c_g - c_a) instead of rebuilding c_i - c_a - lse_i per row and tile.
    ch, cl: (B, H, Tk) float32; lse: (B, H, Tq) float32. Returns (B, H, Tq) float32, lse's strides.
    No host synchronisation (packed sequences included)."""
    Tq = lse.shape[-1]
    G = int(ROW_GRANULE)
    r = torch.arange(Tq, device=lse.device)
    if cu_seqlens is None:
        pos = r + (Tk - Tq)
        g = pos - r % G
    else:
        lens = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
        bos = torch.repeat_interleave(cu_seqlens[:-1].long(), lens, output_size=Tq)
        pos = r
        g = r - (r - bos) % G
    z = torch.empty_like(lse)
    z.copy_(((ch[..., pos] - ch[..., g]) + (cl[..., pos] - cl[..., g])) - lse)
    return z


def row_lo_terms(cl, lse, Tk, cu_seqlens=None):
    """rq_i = lo_i - lse_i per query row: its gate's lo word (queries are the last Tq of Tk positions)
    less its log2-sum-exp, one float32 subtraction, as the dQ pass forms it in its diagonal tiles, so
    that the key-block passes (bwd_kv_tile) load one row term there instead of two and subtract
    nothing. cl: (B, H, Tk) float32; lse: (B, H, Tq) float32. Returns (B, H, Tq) float32, lse's
    strides."""
    Tq = lse.shape[-1]
    pos = torch.arange(Tq, device=lse.device) + (Tk - Tq if cu_seqlens is None else 0)
    rq = torch.empty_like(lse)
    rq.copy_(cl[..., pos] - lse)
    return rq


def bwd_delta(o, o_res, do, lse):
    """Delta_i = rowsum(dO_i * O_i) for both backwards (the delta kernel explains why O's
    rounding residual joins in).

    o, do:  (B, Tq, H, D)  q's dtype, contiguous
    o_res:  (B, Tq, H, D)  o's rounding residual, or None (Delta then uses o alone)
    lse:    (B, H, Tq)     float32; Delta gets its shape and strides
    returns (B, H, Tq) float32
    """
    B, Tq, H, D = o.shape
    delta = torch.empty_like(lse)
    bm = 8192 // D                              # 64 float32 registers a thread per tile
    _bwd_delta_kernel[(triton.cdiv(Tq, bm), B * H)](
        o, o if o_res is None else o_res, do, delta, o.stride(0), o.stride(1), o.stride(2),
        lse.stride(0), lse.stride(1), H, Tq, D=D, BLOCK_M=bm, RES=o_res is not None)
    return delta


def dkdv_buffers(k, v, H):
    """The dk, dv buffers the backward kernels write, and whether they are GQA parts.

    k, v: (B, Tk, Hkv, D); H: query heads. Under GQA (H != Hkv) a program covers one query head
    and writes its float32 part: (B, Tk, H, D) float32 each, summed over the group by dkdv_sum.
    Otherwise the finished gradients: k's and v's shape and dtype.
    returns dk, dv, split (bool: the GQA parts)
    """
    B, Tk, Hkv, D = k.shape
    split = H != Hkv
    if split:
        dk = torch.empty(B, Tk, H, D, device=k.device, dtype=torch.float32)
        dv = torch.empty_like(dk)
    else:
        dk = torch.empty_like(k)
        dv = torch.empty_like(v)
    return dk, dv, split


def dkdv_sum(dk, dv, k, v):
    """dk, dv from dkdv_buffers as gradients of k, v: (B, Tk, Hkv, D) in k's and v's dtype; GQA
    parts are summed over each group of query heads in a fixed order (deterministic)."""
    B, Tk, Hkv, D = k.shape
    if dk.shape[2] == Hkv:
        return dk, dv
    G = dk.shape[2] // Hkv
    return dk.view(B, Tk, Hkv, G, D).sum(3).to(k.dtype), dv.view(B, Tk, Hkv, G, D).sum(3).to(v.dtype)


# ----------------------------------------------------------------------------------------------
# adaptive computation pruning
# ----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class PruningPlan:
    """Which key blocks the kernels skip (adaptive computation pruning), and how many pairs that is.

    Queries and keys are cut into granules of `granule` positions (per sequence). A (query granule,
    key granule) pair wholly below the diagonal is skipped when its largest decay,
    c_{i_min} - c_{j_max} = sum_{t = j_max+1 .. i_min} log g_t (i_min the granule's first query
    position, j_max its last key), is below `threshold`. Since log g <= 0 the skipped key granules
    of a query granule form a prefix, and the forward, dK/dV and dQ passes all skip exactly
    these pairs (every tile lies inside one granule of each kind), so the gradients are those of
    the pruned forward. With threshold = -(2U + ln T) + ln(tol), U >= |q_i . k_j| * sm_scale, the
    attention mass a row loses is at most tol: a skipped weight is at most exp(2U + threshold).

    threshold:    (B, H) float64, natural-log units
    logit_bound:  (B, H) float64, U = sm_scale max_i |q_i| max_j |k_j| (1 + 1e-3), or None when
                  the threshold was given directly
    tol:          the tolerance on the pruned mass per row ("auto"), or None
    granule:      int, a power of two >= every tile side of the launch configs
    key_start:    (B, H, T_q) int32, per query row the first key not skipped (relative to its
                  sequence), a multiple of granule
    query_end:    (B, H, T_k) int32, per key the first query row that skips it (T_q if none)
    causal_pairs: int, all causal (query, key) pairs over B and H
    pruned_pairs: int, the skipped ones (a property: it reads key_start back from the device, the
                  plan's only host synchronisation, so only when asked)
    Building the plan copies nothing of q and k (their norms are reduced in their own dtype) and
    waits for nothing on the device: a call with pruning launches its kernels without a sync.
    """
    threshold: torch.Tensor
    logit_bound: object
    tol: object
    granule: int
    key_start: torch.Tensor
    query_end: torch.Tensor
    causal_pairs: int

    @property
    def pruned_pairs(self):
        """Skipped (query, key) pairs over B and H (int; synchronises with the device)."""
        return int(self.key_start.sum())

    @property
    def pruned_fraction(self):
        """Skipped over all causal (query, key) pairs: the share of the score work saved."""
        return self.pruned_pairs / max(self.causal_pairs, 1)


def _granule(device, D, dtype):
    # the largest tile side any of the three kernels would launch with (fallbacks only shrink it)
    return max(max(_launch_configs(n, device, D, dtype)[0][:2]) for n in ("fwd", "dkdv", "dq"))


def _plan_sequence(c, off, Tq, G, delta):
    """Pruning of one sequence. c: (B, H, T_k) float64 cumsum of log g (natural log), queries
    the last Tq positions; delta (B, H). Returns key_start (B, H, Tq), query_end (B, H, T_k)."""
    Tk = c.shape[-1]
    nq, nk = -(-Tq // G), -(-Tk // G)
    i_min = off + G * torch.arange(nq, device=c.device)                     # (nq,) positions
    j_max = torch.clamp(G * torch.arange(nk, device=c.device) + G - 1, max=Tk - 1)
    below = j_max[None, :] < i_min[:, None]                                 # (nq, nk)
    decay = c[..., i_min, None] - c[..., None, j_max]                       # (B, H, nq, nk)
    pruned = below & (decay < delta[..., None, None])
    lead = pruned.long().cumprod(-1).sum(-1)                                # (B, H, nq) prefix
    # with log g <= 0 the prefix grows with the query granule; if a positive gate breaks that,
    # prune less (each query granule keeps the smallest prefix of any later one) so that the
    # dK/dV pass, which needs a query end per key block, skips the same pairs as the forward
    lead = lead.flip(-1).cummin(-1).values.flip(-1)
    start = (lead * G).to(torch.int32)                                      # (B, H, nq)
    key_start = start.repeat_interleave(G, -1)[..., :Tq]
    g0 = G * torch.arange(nk, device=c.device)
    n_keep = (start[..., None, :] <= g0[:, None]).sum(-1)                   # (B, H, nk)
    query_end = torch.clamp(n_keep * G, max=Tq).to(torch.int32).repeat_interleave(G, -1)[..., :Tk]
    return key_start, query_end


def acp_plan(q, k, log_fgate, *, sm_scale=None, adaptive_threshold="auto", tol=1e-4,
             cu_seqlens=None, granule=None):
    """The pruning fox_attention_triton applies with the same arguments (a PruningPlan, with the
    pruned fraction); inputs as fox_attention_triton (v is not needed).

    adaptive_threshold: "auto" (threshold from the query/key norms and tol) or a float <= 0 used
                        as the threshold directly (natural-log units, like the official kernel's)
    tol:                float in (0, 1): the bound on the attention mass a row may lose ("auto")
    granule:            int power of two >= 16 to override the one the launch configs imply
    """
    max_seqlen = _validate(q, k, k, log_fgate, cu_seqlens)
    B, Tq, H, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    scale = D ** -0.5 if sm_scale is None else float(sm_scale)
    G = _granule(q.device, _padded_dim(D), q.dtype) if granule is None else granule
    if not (isinstance(G, int) and G >= 16 and G & (G - 1) == 0):
        raise ValueError(f"granule must be a power of two >= 16; got {granule!r}")
    U = None
    if isinstance(adaptive_threshold, str):
        if adaptive_threshold != "auto":
            raise ValueError(f'adaptive_threshold must be "auto" or a float <= 0; got {adaptive_threshold!r}')
        if not (isinstance(tol, (int, float)) and 0 < tol < 1):
            raise ValueError(f"tol must be a float in (0, 1); got {tol!r}")
        # Row norms reduced in the inputs' own dtype (float accumulation, one rounding of each
        # result to that dtype: at most half an ulp, eps / 2 relative): no float32 or float64
        # copy of q and k (before v7 each call made float64 copies of both, 1.5 s of the plan's
        # 1.7 s on the CPU at B2 T8192 H16 D128). The margin (1 + eps)^2 covers the two roundings.
        eps = torch.finfo(q.dtype).eps
        qn = torch.linalg.vector_norm(q.detach(), dim=-1).amax(1).double()             # (B, H)
        kn = torch.linalg.vector_norm(k.detach(), dim=-1).amax(1).double().repeat_interleave(H // Hkv, -1)
        # 1e-3: room for the kernel's own rounding of q.k (fp32 accumulation) above |q||k|
        U = scale * qn * kn * (1 + eps) ** 2 * (1 + 1e-3)
        n = max_seqlen if cu_seqlens is not None else Tk
        delta = -(2 * U + math.log(n)) + math.log(tol)
    else:
        t = adaptive_threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (math.isfinite(t) and t <= 0):
            raise ValueError(f'adaptive_threshold must be "auto" or a finite float <= 0; got {t!r}')
        delta = torch.full((B, H), float(t), dtype=torch.float64, device=q.device)
        tol = None
    c = _gate_words(log_fgate.detach(), cu_seqlens)[2] / LOG2E              # (B, H, Tk)
    if cu_seqlens is None:
        key_start, query_end = _plan_sequence(c, Tk - Tq, Tq, G, delta)
        causal = B * H * (Tq * (Tk - Tq) + Tq * (Tq + 1) // 2)
    else:
        key_start = torch.zeros(B, H, Tq, dtype=torch.int32, device=q.device)
        query_end = torch.zeros(B, H, Tk, dtype=torch.int32, device=q.device)
        causal = 0
        cu = cu_seqlens.tolist()
        for a, b in zip(cu, cu[1:]):
            if b > a:
                key_start[..., a:b], query_end[..., a:b] = _plan_sequence(c[..., a:b], 0, b - a, G, delta)
                causal += H * (b - a) * (b - a + 1) // 2
    return PruningPlan(threshold=delta, logit_bound=U, tol=tol, granule=G,
                       key_start=key_start.contiguous(), query_end=query_end.contiguous(),
                       causal_pairs=causal)


BACKWARDS = ("two_pass", "one_pass", "one_pass_ordered")


ONE_PASS_BACKWARD = []    # [fn]: the one-pass backward (fox_bwd_onepass registers it when imported; the package's
#                           __init__ imports it, so it is there whenever this module is)


def register_one_pass_backward(fn):
    """The function _FoxAttention.backward calls for backward="one_pass" / "one_pass_ordered" (fox_bwd_onepass's
    signature). fox_bwd_onepass builds on this module's kernels and helpers, so it registers itself here rather
    than being imported by this module."""
    ONE_PASS_BACKWARD[:] = [fn]


def backward_mode(backward=None):
    """The backward fox_attention_triton runs: `backward` if given, else the environment variable
    FOX_ONEPASS_BWD ("1": "one_pass"; "0" or unset: "two_pass"). Read once per call of
    fox_attention_triton and kept for that call's backward.

    "two_pass":         the dK/dV pass and the dQ pass (this module; P recomputed in each)
    "one_pass":         foxwindow/kernels/fox_bwd_onepass.py, dq_mode "workspace": one pass over key blocks,
                        dQ summed from per-key-block float32 partials by a second kernel in a fixed
                        order; needs B H ceil(T_k / BLOCK_N) (D + 1) T_q 4 bytes of workspace (8.7 GB
                        at B2 T8192 H16 D128 with 128-key blocks)
    "one_pass_ordered": the same pass, dq_mode "ordered": dQ summed in place behind per-query-block
                        counters (B H (D + 1) T_q 4 bytes); its spin waits have not run on a GPU
    All three are bitwise deterministic and take the same inputs, pruning included. Returns str."""
    if backward is None:
        flag = os.environ.get("FOX_ONEPASS_BWD", "0")
        if flag not in ("0", "1"):
            raise ValueError(f"FOX_ONEPASS_BWD must be 0 or 1; got {flag!r}")
        return "one_pass" if flag == "1" else "two_pass"
    if backward not in BACKWARDS:
        raise ValueError(f"backward must be one of {BACKWARDS} or None (FOX_ONEPASS_BWD decides); "
                         f"got {backward!r}")
    return backward


def precision_of(dtype):
    if dtype == torch.float32:
        return "exact" if interpreting() else "ieee"
    return "upcast" if interpreting() else "tf32"


class _FoxAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, log_fgate, sm_scale, cu_seqlens, max_seqlen, plan, backward):
        B, Tq, H, D = q.shape
        Tk, Hkv = k.shape[1], k.shape[2]
        ch, cl, c64 = _gate_words(log_fgate, cu_seqlens)
        hl = _paired_words(ch, cl) if TRITON_VERSION >= (3, 7) else ch     # WORDS_PAIRED (else unused)
        o = torch.empty_like(q)
        res = q.dtype != torch.float32 and any(ctx.needs_input_grad[:4])
        o_res = torch.empty_like(q) if res else o   # (B, Tq, H, D), only kept for the backward
        lse = _padded_words((B, H, Tq), q.device)     # the dQ pass's diagonal tiles load it unmasked
        varlen = cu_seqlens is not None
        nb = cu_seqlens.numel() - 1 if varlen else B
        prec = precision_of(q.dtype)
        cu = cu_seqlens if varlen else lse          # any pointer: unused when not varlen
        acp = plan is not None
        klo, qend = (plan.key_start, plan.query_end) if acp else (lse, lse)   # (unused if not acp)
        G = plan.granule if acp else None
        _launch("fwd", fwd_kernel, max_seqlen if varlen else Tq, nb * H, q.device, D, q.dtype,
                lambda bn: (q, k, v, ch, cl, hl, _tile_offsets(c64, bn, cu_seqlens), o, o_res, lse, klo, cu,
                            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1),
                            k.stride(2), ch.stride(0), ch.stride(1), lse.stride(0), lse.stride(1),
                            H, H // Hkv, Tq, Tk, sm_scale * LOG2E),
                dict(D=D, VARLEN=varlen, PREC=prec, RES=res, ACP=acp), granule=G)
        ctx.save_for_backward(q, k, v, o, o_res, lse, ch, cl, cu_seqlens, klo, qend)
        ctx.sm_scale, ctx.max_seqlen, ctx.res, ctx.granule = sm_scale, max_seqlen, res, G
        ctx.backward = backward
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, o_res, lse, ch, cl, cu_seqlens, klo, qend = ctx.saved_tensors
        B, Tq, H, D = q.shape
        Tk, Hkv = k.shape[1], k.shape[2]
        do = do.contiguous()
        G = ctx.granule
        if ctx.backward != "two_pass":
            if not ONE_PASS_BACKWARD:
                raise RuntimeError("the one-pass backward is not registered (import foxwindow.kernels.fox_bwd_onepass)")
            acp = G is not None
            grads = ONE_PASS_BACKWARD[0](
                q, k, v, o, o_res if ctx.res else None, do, lse, ch, cl, ctx.sm_scale, cu_seqlens,
                ctx.max_seqlen, dq_mode="ordered" if ctx.backward == "one_pass_ordered" else "workspace",
                key_start=klo if acp else None, query_end=qend if acp else None, granule=G)
            return grads + (None,) * 5
        varlen = cu_seqlens is not None
        nb = cu_seqlens.numel() - 1 if varlen else B
        prec = precision_of(q.dtype)
        cu = cu_seqlens if varlen else lse
        delta = bwd_delta(o, o_res if ctx.res else None, do, lse)
        z = row_terms(ch, cl, lse, Tk, cu_seqlens)
        rq = row_lo_terms(cl, lse, Tk, cu_seqlens)
        c64 = ch.double() + cl.double()             # c as the forward's float64 cumsum, to ~2^-48
        dq = torch.empty_like(q)
        dk, dv, split = dkdv_buffers(k, v, H)      # GQA: per-query-head float32 parts, summed below
        dc = torch.empty_like(ch)                   # (B, H, Tk)
        dr = torch.empty_like(lse)                  # (B, H, Tq)
        strides = (q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                   ch.stride(0), ch.stride(1), lse.stride(0), lse.stride(1))
        scales = (H, H // Hkv, Tq, Tk, ctx.sm_scale * LOG2E, ctx.sm_scale)
        consts = dict(D=D, VARLEN=varlen, PREC=prec, ACP=G is not None)
        _launch("dkdv", bwd_dkdv_kernel, ctx.max_seqlen if varlen else Tk,
                nb * (H if split else Hkv), q.device, D, q.dtype,
                (q, k, v, do, ch, cl, rq, z, delta, dk, dv, dc, klo, qend, cu) + strides
                + (dk.stride(0), dk.stride(1), dk.stride(2)) + scales,
                dict(consts, SPLIT=split, SQUARE=DKDV_SQUARE and Tq == Tk), granule=G)
        _launch("dq", bwd_dq_kernel, ctx.max_seqlen if varlen else Tq, nb * H, q.device, D,
                q.dtype, lambda bn: (q, k, v, do, ch, cl, _tile_offsets(c64, bn, cu_seqlens), lse, delta, dq, dr,
                                     klo, cu) + strides + scales, consts,
                granule=G)
        dc[..., Tk - Tq:] += dr                     # query i sits at key position Tk - Tq + i
        dk, dv = dkdv_sum(dk, dv, k, v)
        return dq, dk, dv, suffix_sum(dc, cu_seqlens), None, None, None, None, None


def _validate(q, k, v, log_fgate, cu_seqlens):
    for name, t in (("q", q), ("k", k), ("v", v), ("log_fgate", log_fgate)):
        if not torch.is_tensor(t):
            raise ValueError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if cu_seqlens is not None and not torch.is_tensor(cu_seqlens):
        raise ValueError(f"cu_seqlens must be a torch.Tensor or None; got {type(cu_seqlens).__name__}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be 4-D (B, T, H, D); got shapes {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape; got {tuple(k.shape)} and {tuple(v.shape)}")
    B, Tq, H, D = q.shape
    _, Tk, Hkv, _ = k.shape
    if k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"q and k must agree in batch and head dim; got {tuple(q.shape)} and {tuple(k.shape)}")
    if not 1 <= D <= 256:
        raise ValueError(f"head dim must be in 1..256 (the kernel pads it up to 16, 32, 64, 128 or "
                         f"256); got {D}")
    if H % Hkv != 0:
        raise ValueError(f"query heads ({H}) must be a multiple of key/value heads ({Hkv})")
    if Tq > Tk:
        raise ValueError(f"seqlen_q ({Tq}) must not exceed seqlen_k ({Tk})")
    if Tq == 0 or B == 0 or H == 0:
        raise ValueError(f"empty input: q has shape {tuple(q.shape)}")
    if q.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"q, k, v must be bfloat16, float16 or float32; got {q.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if log_fgate.shape != (B, Tk, H):
        raise ValueError(f"log_fgate must be (B, T_k, H) = {(B, Tk, H)}; got {tuple(log_fgate.shape)}")
    if log_fgate.dtype != torch.float32:
        raise ValueError(f"log_fgate must be float32; got {log_fgate.dtype}")
    if not (q.device == k.device == v.device == log_fgate.device):
        raise ValueError(f"q, k, v, log_fgate must be on one device; got {q.device}, {k.device}, "
                         f"{v.device}, {log_fgate.device}")
    if cu_seqlens is None:
        return None
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.dtype != torch.int32:
        raise ValueError(f"cu_seqlens must be int32 of shape (N + 1,), N >= 1; got "
                         f"{cu_seqlens.dtype} {tuple(cu_seqlens.shape)}")
    if cu_seqlens.device != q.device:
        raise ValueError(f"cu_seqlens must be on {q.device}; got {cu_seqlens.device}")
    if B != 1 or Tq != Tk:
        raise ValueError(f"cu_seqlens needs a packed batch: B == 1 and T_q == T_k; got q "
                         f"{tuple(q.shape)}, k {tuple(k.shape)}")
    cu = cu_seqlens.tolist()
    if cu[0] != 0 or cu[-1] != Tq or any(a > b for a, b in zip(cu, cu[1:])):
        raise ValueError(f"cu_seqlens must rise from 0 to T = {Tq} without decreasing; got {cu}")
    return max(b - a for a, b in zip(cu, cu[1:]))


_HEAD_DIMS = (16, 32, 64, 128, 256)


def _padded_dim(D):
    """The head dim the kernels run at: D itself, or the next of _HEAD_DIMS (zero padding)."""
    return next(d for d in _HEAD_DIMS if d >= D)


def _on_cuda(t):
    return t.is_cuda


def fallback_reason(q, k, v, log_fgate, *, causal=True, cu_seqlens=None):
    """Why the fused kernel cannot take these inputs on their device, or None when it can.

    For the dispatch in fox_attention.forgetting_attention: on CUDA an input the kernel does not
    take (float64, a head dim over 256, causal=False, mismatched dtypes or shapes, a float64
    gate) goes to the PyTorch reference with this reason in a warning instead of an error; off
    CUDA the kernel is never the default. Arguments as fox_attention_triton. Returns str or None.
    """
    if not _on_cuda(q):
        return f"inputs on {q.device}, the kernel runs on CUDA"
    if not causal:
        return "causal=False has no kernel"
    try:
        _validate(q, k, v, log_fgate, cu_seqlens)
    except ValueError as e:
        return str(e)
    return None


def fox_attention_triton(q, k, v, log_fgate, *, sm_scale=None, causal=True, cu_seqlens=None,
                         adaptive_threshold=None, tol=1e-4, backward=None):
    """Causal forgetting attention, fused (Triton), differentiable in q, k, v and log_fgate.

    q:          (B, T_q, H, D)    bfloat16 / float16 (float32 accepted, e.g. for the CPU interpreter)
    k, v:       (B, T_k, H_kv, D) same dtype as q; H % H_kv == 0 (grouped-query attention);
                T_q <= T_k and the queries are the last T_q positions (prefix / KV-cache decoding)
    log_fgate:  (B, T_k, H)       float32, log forget gates (<= 0, not checked), one per query head
    sm_scale:   float, default D ** -0.5
    causal:     only True is implemented
    cu_seqlens: optional int32 (N + 1,) offsets of N sequences packed along T (needs B == 1 and
                T_q == T_k); attention and the gate cumsum both restart at each sequence
    adaptive_threshold: None (dense), "auto" or a float <= 0: adaptive computation pruning. Key
                blocks whose largest decay is below a threshold are skipped in the forward and
                the backward alike; "auto" sets it from the query/key norms so that no row loses
                more than `tol` of its attention mass (then |o - o_dense| <= 2 tol max|v| per
                entry); a float is the threshold itself (natural-log units). acp_plan() with the
                same arguments gives the skipped blocks and the pruned fraction.
    tol:        float in (0, 1), the pruned-mass tolerance of "auto"
    backward:   None (the environment variable FOX_ONEPASS_BWD=0/1 decides, default "two_pass"),
                "two_pass", "one_pass" or "one_pass_ordered": which backward the call's gradients
                come from (backward_mode); the forward is the same for all three
    D (1..256): 16, 32, 64, 128 and 256 run as they are; any other D runs zero-padded to the next
    of those (q.k and the output's first D columns are unchanged, sm_scale stays D ** -0.5 of the
    true D), at the padded size's cost plus one copy of q, k, v.
    Returns o: (B, T_q, H, D) in q.dtype. Gradients: dq, dk, dv in the input dtype, dlog_fgate
    float32; all deterministic (no atomics).
    """
    if not causal:
        raise NotImplementedError("fox_attention_triton: causal=False (the symmetric decay "
                                  "-|c_i - c_j|) has no kernel; use forgetting_attention_reference")
    max_seqlen = _validate(q, k, v, log_fgate, cu_seqlens)
    bwd = backward_mode(backward)
    D = q.shape[-1]
    scale = D ** -0.5 if sm_scale is None else float(sm_scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"sm_scale must be a finite positive number; got {sm_scale!r}")
    Dp = _padded_dim(D)
    if Dp != D:     # zero columns add nothing to q.k and give zero output columns, cut off below
        q, k, v = (torch.nn.functional.pad(t, (0, Dp - D)) for t in (q, k, v))
    plan = None
    if adaptive_threshold is not None:
        plan = acp_plan(q, k, log_fgate, sm_scale=scale, adaptive_threshold=adaptive_threshold,
                        tol=tol, cu_seqlens=cu_seqlens)
    o = _FoxAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(),
                            log_fgate.contiguous(), scale, cu_seqlens, max_seqlen, plan, bwd)
    return o[..., :D] if Dp != D else o
