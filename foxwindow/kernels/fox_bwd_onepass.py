"""A one-pass backward for the fused FoX kernel: dK, dV, dQ and the gate gradient from one P per tile.

The shipped backward (fox_triton.py) recomputes P twice, once per key block (dK, dV, colsum(dS))
and once per query block (dQ, rowsum(dS)): 7 matrix products per (query block, key block) tile,
against FlashAttention-2's 5. Here one program owns one key block of one query head and walks the
query blocks from the diagonal on, computing per tile

    P^T  = exp2(K Q^T * scale + w_j + u_i - lse_i)      (BLOCK_N, BLOCK_M)   product 1
    dV  += P^T dO                                                            product 2
    dP^T = V dO^T                                                            product 3
    dS^T = P^T * (dP^T - Delta_i)
    dK  += dS^T Q                                                            product 4
    dQ_n^T = K^T dS      -> float32 partial (D x BLOCK_M: M = D keeps it wgmma-sized)  product 5
    colsum(dS) -> dc_j (kept in registers),  rowsum(dS) -> a float32 partial beside dQ_n

dQ is a sum over key blocks, which different programs own. It stays deterministic without
floating-point atomics, in one of two ways (dq_mode):
  "workspace": each key block writes its float32 partial to its own slice of a workspace
    (B, heads, key blocks, D, T_q), and a second, memory-bound kernel sums the slices of each
    query block in a fixed order (key block 0, 1, ...), scales, rounds and stores dq; it sums the
    rowsum(dS) partials the same way. The workspace is allocated whole (uninitialised) but only
    the causal part is written and read: the reducer of query block m reads key blocks 0 .. the
    last that reaches m. Its allocation is bounded by launching the heads in chunks
    (`workspace_bytes`).
  "ordered": the key blocks of a query block add into one float32 running sum (B, H, D, T_q) one
    after another, from the last key block down to key block 0, behind an integer counter per
    query block (FlashAttention-3's deterministic scheme); key block 0 stores the finished dq.

Gate gradient: dc_t = rowsum_t(dS) - colsum_t(dS), dlog_fgate_t = sum_{s >= t} dc_s, as in
fox_triton. There the two sums came from the two passes' separately recomputed dS and had to agree
to float32 rounding to cancel; here both sums come from the same dS tile in registers, so they
cancel by construction up to the order of the float32 additions.

Everything else is the shipped kernel's: the row statistics (lse) and O with its rounding residual
from the shipped forward, Delta from its delta kernel, c as float64 split into float32 words
hi + lo with a per-tile anchor (the backward's two-word form), the P^T / dS^T tile with its dK, dV
updates (bwd_kv_tile, the dK/dV pass's loop body), the interpreter workarounds (tile_dot, tile_cast) and
the packed-sequence bounds (seq_bounds). These are fox_triton's shared helpers, imported by name below.

Wiring: fox_triton._FoxAttention.backward calls fox_bwd_onepass (registered there when this module is imported)
when fox_attention_triton is given backward="one_pass" ("workspace") or "one_pass_ordered" ("ordered"), or
FOX_ONEPASS_BWD=1 is set; fox_attention_onepass here is that call. Adaptive computation pruning: the forward's plan
(key_start, query_end, granule) bounds the query loop of each key block and the key blocks summed
for each query block, so the one-pass gradients are those of the pruned forward, as the two-pass ones.
"""

import torch
import triton
import triton.language as tl

from . import fox_triton as kt

# @triton.jit helpers and host helpers shared with the two-pass kernels, as this module's globals
from .fox_triton import (
    LOG2E,
    bwd_delta,
    bwd_direct_end,
    bwd_key_anchor,
    bwd_key_block,
    bwd_kv_tile,
    dkdv_buffers,
    dkdv_sum,
    interpreting,
    precision_of,
    row_lo_terms,
    row_terms,
    seq_bounds,
    suffix_sum,
    tile_cast,
    tile_dot,
)

__all__ = ["bwd_onepass_kernel", "HOPPER", "AMPERE", "SAFE", "set_config", "DQ_MODES", "fox_bwd_onepass",
           "fox_attention_onepass"]

# ----------------------------------------------------------------------------------------------
# kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _wait_until(counter, target, ASM: tl.constexpr):
    # Spin until *counter >= target. ASM (the GPU): every thread spins with its own acquire load,
    # so its later loads see what the releasing threads stored, with no CTA barrier. sm_90
    # readings of the query loop: a Triton while loop with barriers, and this PTX wait with
    # barriers, both left no cp.async in it (not software-pipelined); this PTX wait without
    # barriers keeps it. The interpreter cannot run PTX and runs programs one by one: there the
    # plain loop, which never spins.
    if ASM:
        tl.inline_asm_elementwise(
            asm="""{
            .reg .pred p;
            .reg .b32 c;
            WAIT_${:uid}:
            ld.acquire.gpu.global.b32 c, [$1];
            setp.lt.s32 p, c, $2;
            @p bra WAIT_${:uid};
            mov.b32 $0, c;
            }""",
            constraints="=r,l,r", args=[counter, target], dtype=tl.int32, is_pure=False, pack=1)
    else:
        while tl.atomic_add(counter, 0, sem="acquire") < target:
            pass


@triton.jit
def _release_add(counter, ASM: tl.constexpr):
    # ASM: every thread adds 1 with release semantics after its own stores (a program adds
    # num_threads in all, and waiters count in those units); no CTA barrier needed, see above.
    # Interpreter: one add of 1.
    if ASM:
        tl.inline_asm_elementwise(
            asm="red.release.gpu.global.add.s32 [$1], 1;\n mov.b32 $0, 0;",
            constraints="=r,l", args=[counter], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.atomic_add(counter, 1, sem="release")


@triton.jit
def _onepass_inner(dk, dv, dc, k, v, w, ha, la, cols, n_ok, q_base, do_base, ch_base, cl_base,
                   rq_base, z_base, delta_base, wq_base, wr_base, sem_base, dq_base, dr_base, klo_base, n,
                   n_kb, s_qt, s_wd, lo, hi, Tq, off, qk_scale, sm_scale,
                   D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
                   PREC: tl.constexpr, ORDERED: tl.constexpr, ASM_WAIT: tl.constexpr,
                   ARRIVALS: tl.constexpr, ACP: tl.constexpr):
    # key block n (of n_kb; BLOCK_N keys) against query blocks [lo, hi): (BLOCK_N, BLOCK_M) tiles.
    # wq_base: a (D, T_q) float32 slice of the dQ workspace (row stride s_wd); wr_base: a (T_q,)
    # slice of the rowsum(dS) workspace. Without ORDERED the slices are this key block's own and
    # every tile writes its partial there. With ORDERED they are shared by all key blocks: the
    # key blocks reaching query block m add into them one at a time, from the last key block down
    # to key block 0, each waiting until the counter sem_base[m / BLOCK_M] says that all later ones
    # have added; key block 0 writes the finished, scaled dq (dq_base: (Tq, D), stride s_qt) and
    # rowsum(dS) (dr_base) instead. A fixed order again, so deterministic, and the workspace is
    # one float32 dq (B, H, D, Tq) instead of n_kb of them. ACP (pruning): the key blocks before
    # klo_base[m0] (the query block's first kept key, a multiple of BLOCK_N) skip query block m0,
    # so the first kept key block, not key block 0, finishes it.
    offs_d = tl.arange(0, D)
    hj = tl.load(ch_base + cols, mask=n_ok, other=0.0)     # the keys' gate words (MASK tiles)
    lj = tl.load(cl_base + cols, mask=n_ok, other=0.0)
    for m0 in range(lo, hi, BLOCK_M):
        m0 = tl.multiple_of(m0, BLOCK_M)
        # P^T, dS^T and dK, dV as in the two-pass dK/dV loop; ds16: dS^T rounded once, for dK and dQ
        dk, dv, dsT, ds16, rows, m_ok = bwd_kv_tile(dk, dv, k, v, w, ha, la, hj, lj, cols, n_ok, offs_d, q_base,
                                                     do_base, ch_base, cl_base, rq_base, z_base, delta_base,
                                                     s_qt, m0, Tq, off, qk_scale, BLOCK_M, MASK, PREC)
        # dQ's partial transposed, K^T dS: (D, BLOCK_M), so that the product's M dimension is D
        # (64-row wgmma tiles need M >= 64; BLOCK_M is 16-32 here)
        dq_part = tile_dot(tl.trans(k), ds16, PREC)                         # (D, BLOCK_M) float32
        rs = tl.sum(dsT, 0)                                              # rowsum_i(dS), this block
        w_ptr = wq_base + offs_d[:, None] * s_wd + rows[None, :]
        if ORDERED:
            sem = sem_base + m0 // BLOCK_M
            # key blocks after n that reach query block m0 (the reducer's n_last, minus n)
            ahead = tl.minimum((off + m0 + BLOCK_M - 1) // BLOCK_N, n_kb - 1) - n
            _wait_until(sem, ahead * ARRIVALS, ASM_WAIT)
            if ahead > 0:                   # .cg: read L2, where the other programs' stores are
                dq_part += tl.load(w_ptr, mask=m_ok[None, :], other=0.0, cache_modifier=".cg")
                rs += tl.load(wr_base + rows, mask=m_ok, other=0.0, cache_modifier=".cg")
            if ACP:
                n_first = tl.load(klo_base + m0) // BLOCK_N
            else:
                n_first = n * 0
            if n == n_first:                # the last contribution: the finished dq and rowsum
                tl.store(dq_base + rows[None, :] * s_qt + offs_d[:, None],
                         tile_cast(dq_part * sm_scale, dq_base.dtype.element_ty, PREC), mask=m_ok[None, :])
                tl.store(dr_base + rows, rs, mask=m_ok)
            else:
                tl.store(w_ptr, dq_part, mask=m_ok[None, :])
                tl.store(wr_base + rows, rs, mask=m_ok)
                _release_add(sem, ASM_WAIT)
        else:
            tl.store(w_ptr, dq_part, mask=m_ok[None, :])
            tl.store(wr_base + rows, rs, mask=m_ok)
        dc -= tl.sum(dsT, 1)                                             # d c_j = -colsum_j(dS)
    return dk, dv, dc


@triton.jit(do_not_specialize=["TQ", "TK"])   # one compile for all lengths
def bwd_onepass_kernel(Q, K, V, DO, CH, CL, RQ, Z, DELTA, DK, DV, DC, WQ, WR, SEM, DQ, DR, KLO, QEND, CU,
                        s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_cb, s_ch, s_lb, s_lh,
                        s_ob, s_ot, s_oh, s_wb, s_wh, s_wn, s_wd, s_rb, s_rh, s_rn, s_sb, s_sh,
                        H, GROUP, TQ, TK, qk_scale, sm_scale, h0, hc,
                        D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        VARLEN: tl.constexpr, PREC: tl.constexpr, ORDERED: tl.constexpr,
                        ASM_WAIT: tl.constexpr = False, ARRIVALS: tl.constexpr = 1,
                        ACP: tl.constexpr = False):
    # one program: BLOCK_N keys, one batch row (or packed sequence) and one query head h of the
    # chunk [h0, h0 + hc). q, do: (B, Tq, H, D); k, v: (B, Tk, Hkv, D); CH, CL: the hi and lo words
    # of log2(e) * c, (B, H, Tk) float32; RQ, Z, DELTA: (B, H, Tq) float32 row terms (row_lo_terms,
    # row_terms, bwd_delta). Writes
    #   DK, DV: (B, Tk, H, D) float32 parts under GQA (summed over the group by the caller), else
    #           (B, Tk, Hkv, D) in k's dtype, both at head index h with strides s_o*;
    #   DC:     (B, H, Tk) float32, -colsum(dS);
    #   WQ:     (B, hc, n_key_blocks, D, Tq) float32, this key block's (dS K)^T (unscaled);
    #   WR:     (B, hc, n_key_blocks, Tq) float32, this key block's rowsum(dS).
    # With ORDERED: WQ (B, hc, 1, D, Tq) and WR (B, hc, 1, Tq) are running sums, SEM (programs
    # rows, hc, query blocks) int32 zeros their counters, and the finished dq (B, Tq, H, D) and
    # rowsum(dS) (B, H, Tq) go to DQ and DR. Key blocks then run from the last to the first
    # (program 0 holds the last): a key block waits only on later ones, which the GPU started
    # earlier (blocks are dispatched in index order), so a resident program never waits on one
    # that cannot start.
    # ACP (adaptive computation pruning, fox_triton.acp_plan): KLO (B, H, Tq) int32, per query row
    # the first kept key; QEND (B, H, Tk) int32, per key the first query row that prunes it (both
    # relative to the sequence, multiples of the plan's granule, which holds whole tiles): key
    # block n stops its query loop at QEND[n0], and the reducer and the ordered sum start at
    # key block KLO[m0] / BLOCK_N, so exactly the forward's pairs are visited.
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    hw = pid_bh % hc                                # head within the workspace chunk
    h = h0 + hw
    b, bos, Tq, Tk = seq_bounds(CU, pid_bh // hc, TQ, TK, VARLEN)
    n_kb = tl.cdiv(Tk, BLOCK_N)
    if pid_n >= n_kb:
        return
    if ORDERED:
        n = n_kb - 1 - pid_n                        # this program's key block: the last first
        slot = (n * 0).to(tl.int64)                 # the one shared workspace slice
    else:
        n = pid_n                                   # the first (longest) first
        slot = n.to(tl.int64)                       # its own workspace slice
    n0 = n * BLOCK_N
    off = Tk - Tq
    b64 = b.to(tl.int64)
    t64 = bos.to(tl.int64)
    offs_d, cols, n_ok, k, v = bwd_key_block(K, V, b64 * s_kb + t64 * s_kt + (h // GROUP) * s_kh, s_kt,
                                              n0, Tk, D, BLOCK_N)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)

    c_off = b64 * s_cb + h * s_ch + bos
    q_off = b64 * s_qb + t64 * s_qt + h * s_qh
    l_off = b64 * s_lb + h * s_lh + bos
    # workspace rows are the token positions of q (bos + row in a packed batch)
    w_off = b64 * s_wb + hw.to(tl.int64) * s_wh + slot * s_wn + t64
    r_off = b64 * s_rb + hw.to(tl.int64) * s_rh + slot * s_rn + t64
    sem_base = SEM + (pid_bh // hc) * s_sb + hw * s_sh
    ha, la, w = bwd_key_anchor(CH + c_off, CL + c_off, n0, cols, n_ok)     # w_j = c_a - c_j: (BLOCK_N,)
    dc = tl.zeros_like(w)

    # query blocks from the first that sees key n0; those before m_full touch the diagonal. The
    # reducer relies on exactly this range: key block n writes rows [m_lo, m_end) of its slice.
    m_lo = (tl.maximum(n0 - off, 0) // BLOCK_M) * BLOCK_M
    m_full = bwd_direct_end(n0, off, BLOCK_M, BLOCK_N)     # then the anchored scores (fox_triton)
    if ACP:     # the first query row that prunes this key block
        m_end = tl.minimum(tl.load(QEND + c_off + n0), Tq)
    else:
        m_end = Tq
    dk, dv, dc = _onepass_inner(dk, dv, dc, k, v, w, ha, la, cols, n_ok, Q + q_off, DO + q_off,
                                CH + c_off, CL + c_off, RQ + l_off, Z + l_off, DELTA + l_off,
                                WQ + w_off, WR + r_off, sem_base, DQ + q_off, DR + l_off, KLO + l_off,
                                n, n_kb, s_qt, s_wd, m_lo, tl.minimum(m_full, m_end), Tq, off, qk_scale,
                                sm_scale, D, BLOCK_M, BLOCK_N, True, PREC, ORDERED, ASM_WAIT, ARRIVALS,
                                ACP)
    dk, dv, dc = _onepass_inner(dk, dv, dc, k, v, w, ha, la, cols, n_ok, Q + q_off, DO + q_off,
                                CH + c_off, CL + c_off, RQ + l_off, Z + l_off, DELTA + l_off,
                                WQ + w_off, WR + r_off, sem_base, DQ + q_off, DR + l_off, KLO + l_off,
                                n, n_kb, s_qt, s_wd, m_full, m_end, Tq, off, qk_scale, sm_scale,
                                D, BLOCK_M, BLOCK_N, False, PREC, ORDERED, ASM_WAIT, ARRIVALS, ACP)
    tl.store(DC + c_off + cols, dc, mask=n_ok)
    o_ptr = b64 * s_ob + t64 * s_ot + h * s_oh + cols[:, None] * s_ot + offs_d[None, :]
    tl.store(DK + o_ptr, tile_cast(dk * sm_scale, DK.dtype.element_ty, PREC), mask=n_ok[:, None])
    tl.store(DV + o_ptr, tile_cast(dv, DV.dtype.element_ty, PREC), mask=n_ok[:, None])


@triton.jit(do_not_specialize=["TQ", "TK"])
def _dq_reduce_kernel(WQ, WR, DQ, DR, KLO, CU,
                      s_qb, s_qt, s_qh, s_lb, s_lh, s_wb, s_wh, s_wn, s_wd, s_rb, s_rh, s_rn,
                      H, TQ, TK, sm_scale, h0, hc,
                      D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      VARLEN: tl.constexpr, PREC: tl.constexpr, ACP: tl.constexpr):
    # one program: BLOCK_M query rows of one (batch row or sequence, head h0 + hw). Sums the dQ and
    # rowsum(dS) partials of key blocks n_first, ..., n_last in that order (deterministic), where
    # n_last is the last key block whose query loop started at or before this block (BLOCK_M and
    # BLOCK_N must be the main kernel's) and n_first is 0, or with ACP the first key block the
    # pruning keeps for it (KLO, as in the main kernel; the pruned slices were never written).
    # Writes dq (B, Tq, H, D) in q's dtype, scaled by sm_scale, and DR (B, H, Tq) float32.
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    hw = pid_bh % hc
    h = h0 + hw
    b, bos, Tq, Tk = seq_bounds(CU, pid_bh // hc, TQ, TK, VARLEN)
    m0 = pid_m * BLOCK_M
    if m0 >= Tq:
        return
    off = Tk - Tq
    b64 = b.to(tl.int64)
    t64 = bos.to(tl.int64)
    rows = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    m_ok = rows < Tq
    # key block n starts its loop at query block floor(max(n0 - off, 0) / BLOCK_M): it reached
    # this block iff n0 <= off + m0 + BLOCK_M - 1
    n_last = tl.minimum((off + m0 + BLOCK_M - 1) // BLOCK_N, tl.cdiv(Tk, BLOCK_N) - 1)
    w_ptr = WQ + b64 * s_wb + hw.to(tl.int64) * s_wh + t64 + rows[:, None] + offs_d[None, :] * s_wd
    r_ptr = WR + b64 * s_rb + hw.to(tl.int64) * s_rh + t64 + rows
    if ACP:
        n_first = tl.load(KLO + b64 * s_lb + h * s_lh + bos + m0) // BLOCK_N
    else:
        n_first = n_last * 0
    w_ptr += n_first * s_wn
    r_ptr += n_first * s_rn
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    dr = tl.zeros([BLOCK_M], tl.float32)
    for n in range(n_first, n_last + 1):            # key block order: fixed, deterministic
        acc += tl.load(w_ptr, mask=m_ok[:, None], other=0.0)
        dr += tl.load(r_ptr, mask=m_ok, other=0.0)
        w_ptr += s_wn
        r_ptr += s_rn
    q_ptr = b64 * s_qb + t64 * s_qt + h * s_qh + rows[:, None] * s_qt + offs_d[None, :]
    tl.store(DQ + q_ptr, tile_cast(acc * sm_scale, DQ.dtype.element_ty, PREC), mask=m_ok[:, None])
    tl.store(DR + b64 * s_lb + h * s_lh + bos + rows, dr, mask=m_ok)


# ----------------------------------------------------------------------------------------------
# launch configuration
# ----------------------------------------------------------------------------------------------
# (BLOCK_M, BLOCK_N, num_warps, num_stages) of the one-pass kernel; the reducer uses the same
# BLOCK_M, BLOCK_N (it must) with its own warps. Hopper rows: picked from sm_90 compile readings
# (foxwindow/kernels/NOTES.md, "One-pass backward"), never timed.
HOPPER = {32: (32, 128, 8, 3), 64: (32, 128, 8, 3), 128: (16, 128, 8, 2), 256: (16, 32, 8, 2)}
AMPERE = {32: (32, 64, 4, 2), 64: (32, 64, 4, 2), 128: (32, 64, 4, 2), 256: (16, 32, 4, 1)}
SAFE = (16, 32, 4, 1)
_TINY = (16, 16, 4, 1)
_INTERP = (16, 32, 4, 1)      # short test sequences span several blocks of both kinds
_OVERRIDE = []                # [config] set by set_config()


def set_config(cfg=None):
    """Override the one-pass launch config (BLOCK_M, BLOCK_N, num_warps, num_stages); None resets."""
    if cfg is None:
        _OVERRIDE.clear()
        return
    cfg = tuple(cfg)
    if len(cfg) != 4 or any(not isinstance(x, int) for x in cfg) or \
            any(b < 16 or b & (b - 1) for b in cfg[:2]):
        raise ValueError(f"cfg: want (BLOCK_M, BLOCK_N, num_warps, num_stages) ints with power-of-two "
                         f"blocks >= 16; got {cfg}")
    if cfg[0] > kt.ROW_GRANULE:
        raise ValueError(f"cfg: BLOCK_M {cfg[0]} over the row granule {int(kt.ROW_GRANULE)} of "
                         f"fox_triton.row_terms (a query tile must lie in one granule)")
    _OVERRIDE[:] = [cfg]


def _configs(device, D):
    """The configs to try in order: the device's, then SAFE, then _TINY."""
    if _OVERRIDE:
        first = _OVERRIDE[0]
    elif interpreting() or device.type != "cuda":
        first = _INTERP
    else:
        major, _ = torch.cuda.get_device_capability(device)
        table = HOPPER if major == 9 else AMPERE if major >= 8 else {}
        first = table.get(D, SAFE)
    chain = []
    for c in (first, SAFE, _TINY):
        if c not in chain:
            chain.append(c)
    return chain


def _heads_per_chunk(B, H, n_blocks, Tq, D, workspace_bytes):
    """Query heads per launch so that the (B, heads, n_blocks, D + 1, Tq) float32 workspace stays
    within workspace_bytes; at least one head (one head's workspace is the floor)."""
    per_head = B * n_blocks * Tq * (D + 1) * 4
    if workspace_bytes is None:
        return H
    return max(1, min(H, workspace_bytes // per_head))


# ----------------------------------------------------------------------------------------------
# the backward
# ----------------------------------------------------------------------------------------------

DQ_MODES = ("workspace", "ordered")


def fox_bwd_onepass(q, k, v, o, o_res, do, lse, ch, cl, sm_scale, cu_seqlens=None, max_seqlen=None,
                    dq_mode="workspace", workspace_bytes=None, key_start=None, query_end=None,
                    granule=None):
    """Gradients of causal forgetting attention from the shipped forward's saved tensors.

    q:          (B, Tq, H, D)    bf16 / fp16 / fp32, contiguous
    k, v:       (B, Tk, Hkv, D)  q's dtype, contiguous; H % Hkv == 0
    o:          (B, Tq, H, D)    the forward's output, q's dtype
    o_res:      (B, Tq, H, D)    o's rounding residual (fox_triton's forward stores it for 16-bit
                                 inputs), or None (float32, or not stored: Delta then uses o alone)
    do:         (B, Tq, H, D)    gradient of o, q's dtype
    lse:        (B, H, Tq)       float32, the forward's row log2-sum-exp of the full logits
    ch, cl:     (B, H, Tk)       float32, hi and lo words of log2(e) * cumsum(log_fgate) (float64
                                 sum, restarted per packed sequence): fox_triton._gate_words
    sm_scale:   float
    cu_seqlens: optional int32 (N + 1,) packed-sequence offsets (B == 1, Tq == Tk); then
                max_seqlen (int) is the longest sequence
    dq_mode:    "workspace": every key block writes its float32 dQ partial to its own slice,
                B * H * ceil(Tk / BLOCK_N) * (D + 1) * Tq * 4 bytes (allocated; the causal half is
                written and read), summed by a second kernel in key-block order. "ordered": the key
                blocks of a query block add into one float32 running sum, B * H * (D + 1) * Tq * 4
                bytes, one after another in a fixed order (counters in global memory, spin waits in
                inline PTX; relies on the GPU starting blocks in index order, as
                FlashAttention-3's deterministic mode does; never run on a GPU yet). Both are
                bitwise deterministic; they sum in different orders, so they differ from each
                other by float32 rounding.
    workspace_bytes: "workspace" only: bound on the workspace; heads are launched in chunks to
                respect it (one head at least). None: all heads at once.
    key_start, query_end, granule: adaptive computation pruning, as the forward applied it (all
                three or none): fox_triton.PruningPlan's key_start (B, H, Tq) and query_end
                (B, H, Tk) int32 and its granule (int). The gradients are then those of the pruned
                forward. Every tile must lie inside one granule: a config with a wider tile raises
                RuntimeError (only a set_config override can have one; the shipped tables fit).
    Returns (dq, dk, dv, dlog_fgate): dq (B, Tq, H, D), dk and dv (B, Tk, Hkv, D) in q's dtype,
    dlog_fgate (B, Tk, H) float32.
    """
    if dq_mode not in DQ_MODES:
        raise ValueError(f"dq_mode must be one of {DQ_MODES}; got {dq_mode!r}")
    acp = granule is not None
    if (key_start is None) != (not acp) or (query_end is None) != (not acp):
        raise ValueError("key_start, query_end and granule go together (pruning) or are all None")
    B, Tq, H, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    varlen = cu_seqlens is not None
    if varlen and max_seqlen is None:
        raise ValueError("max_seqlen is required with cu_seqlens")
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    ordered = dq_mode == "ordered"
    nb = cu_seqlens.numel() - 1 if varlen else B
    prec = precision_of(q.dtype)
    cu = cu_seqlens if varlen else lse              # any pointer: unused when not varlen
    delta = bwd_delta(o, o_res, do, lse)           # (B, H, Tq)
    z = row_terms(ch, cl, lse, Tk, cu_seqlens)     # (B, H, Tq), fox_triton.bwd_kv_tile
    rq = row_lo_terms(cl, lse, Tk, cu_seqlens)     # (B, H, Tq), its diagonal tiles' row term

    dk, dv, _ = dkdv_buffers(k, v, H)              # GQA: per-query-head float32 parts, summed below
    dq = torch.empty_like(q)
    dc = torch.empty_like(ch)                       # (B, H, Tk)
    dr = torch.empty_like(lse)                      # (B, H, Tq)
    n_rows = max_seqlen if varlen else Tk           # longest key range a program row sees
    chain = _configs(q.device, D)
    klo, qend = (key_start, query_end) if acp else (lse, lse)      # any pointers when not pruning
    for i, (bm, bn, warps, stages) in enumerate(chain):
        if acp and max(bm, bn) > granule:
            raise RuntimeError(f"one-pass backward: launch config {(bm, bn, warps, stages)} has tiles wider "
                               f"than the pruning granule {granule} of the forward (fox_bwd_onepass."
                               f"set_config with adaptive_threshold?)")
        n_blocks = triton.cdiv(max(n_rows, 1), bn)
        slices = 1 if ordered else n_blocks
        hc = H if ordered else _heads_per_chunk(B, H, n_blocks, Tq, D, workspace_bytes)
        wq = torch.empty(B, hc, slices, D, Tq, device=q.device, dtype=torch.float32)
        wr = torch.empty(B, hc, slices, Tq, device=q.device, dtype=torch.float32)
        asm_wait = ordered and not interpreting()
        try:
            for h0 in range(0, H, hc):
                hcur = min(hc, H - h0)
                # counters, one per (program row, head, query block); zeroed for every launch
                sem = torch.zeros(nb if ordered else 1, hcur, triton.cdiv(max(n_rows, 1), bm) if ordered else 1,
                                  device=q.device, dtype=torch.int32)
                bwd_onepass_kernel[(n_blocks, nb * hcur)](
                    q, k, v, do, ch, cl, rq, z, delta, dk, dv, dc, wq, wr, sem, dq, dr, klo, qend, cu,
                    q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                    ch.stride(0), ch.stride(1), lse.stride(0), lse.stride(1),
                    dk.stride(0), dk.stride(1), dk.stride(2),
                    wq.stride(0), wq.stride(1), wq.stride(2), wq.stride(3),
                    wr.stride(0), wr.stride(1), wr.stride(2), sem.stride(0), sem.stride(1),
                    H, H // Hkv, Tq, Tk, sm_scale * LOG2E, sm_scale, h0, hcur,
                    D=D, BLOCK_M=bm, BLOCK_N=bn, VARLEN=varlen, PREC=prec, ORDERED=ordered,
                    ASM_WAIT=asm_wait, ARRIVALS=32 * warps if asm_wait else 1, ACP=acp,
                    num_warps=warps, num_stages=stages)
                if ordered:
                    continue
                _dq_reduce_kernel[(triton.cdiv(max(max_seqlen if varlen else Tq, 1), bm), nb * hcur)](
                    wq, wr, dq, dr, klo, cu,
                    q.stride(0), q.stride(1), q.stride(2), lse.stride(0), lse.stride(1),
                    wq.stride(0), wq.stride(1), wq.stride(2), wq.stride(3),
                    wr.stride(0), wr.stride(1), wr.stride(2),
                    H, Tq, Tk, sm_scale, h0, hcur,
                    D=D, BLOCK_M=bm, BLOCK_N=bn, VARLEN=varlen, PREC=prec, ACP=acp, num_warps=4)
            break
        except triton.runtime.errors.OutOfResources:
            if i == len(chain) - 1:
                raise
        except Exception as e:
            hint = kt.interpreter_hint(e)
            if hint is None:
                raise
            raise hint from e
    del wq, wr
    dc[..., Tk - Tq:] += dr                         # query i sits at key position Tk - Tq + i
    dk, dv = dkdv_sum(dk, dv, k, v)
    return dq, dk, dv, suffix_sum(dc, cu_seqlens)


def _one_pass_backward(*args, **kw):
    return fox_bwd_onepass(*args, **kw)          # looked up at call time (tests count the calls)


kt.register_one_pass_backward(_one_pass_backward)


def fox_attention_onepass(q, k, v, log_fgate, *, sm_scale=None, causal=True, cu_seqlens=None,
                          dq_mode="workspace", adaptive_threshold=None, tol=1e-4):
    """Causal forgetting attention: fox_triton's fused forward, the one-pass backward.

    kernels.fox_attention_triton with backward="one_pass" (dq_mode "workspace") or
    "one_pass_ordered" (dq_mode "ordered"): same arguments, shapes, dtypes, errors and result.
    q (B, T_q, H, D), k and v (B, T_k, H_kv, D), log_fgate (B, T_k, H) float32, optional int32
    cu_seqlens (N + 1,) with B == 1, adaptive_threshold / tol as there; returns o (B, T_q, H, D) in
    q's dtype. Gradients dq, dk, dv in the input dtype and dlog_fgate float32, bitwise deterministic.
    """
    if dq_mode not in DQ_MODES:
        raise ValueError(f"dq_mode must be one of {DQ_MODES}; got {dq_mode!r}")
    return kt.fox_attention_triton(q, k, v, log_fgate, sm_scale=sm_scale, causal=causal,
                                    cu_seqlens=cu_seqlens, adaptive_threshold=adaptive_threshold, tol=tol,
                                    backward="one_pass" if dq_mode == "workspace" else "one_pass_ordered")
