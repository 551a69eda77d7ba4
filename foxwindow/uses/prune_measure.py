"""What prune.py measures on the model itself: the pruned attention op with its statistics, decoding with
KV-cache horizons through the model's recurrent step and certified gate bounds (attention inputs and
attention-mass windows: traces.capture and traces.mass_windows).

    MeasuredPruning / run_pruned     fox_attention.forgetting_attention_pruned_naive as the layers' attention op
                                     (model.use_attention_op), each call's PruneStats recorded
    decode                           LM.step token by token, states from LM.init_states(horizons)
    certified_x_min                  the smallest increment the gate weights allow for any input
"""
import math
from dataclasses import dataclass

import numpy as np
import torch

from foxwindow.models import attention as fa
from foxwindow.models import fox as fm
from foxwindow.uses.prune_laws import BlockGrid

__all__ = ["PruneStats", "prune_stats", "MeasuredPruning", "merge_stats", "run_pruned", "decode", "bits_per_byte",
           "certified_x_min"]

# ----------------------------------------------------------------------------- the pruned op, measured


@dataclass
class PruneStats:
    """What one pruned attention call did, per head (H,) unless said: U and L used; pruned and causal
    block counts (summed over the batch); per-sequence pruned fraction of causal blocks (B, H) and of causal
    pairs (B, H, the attention FLOPs); the largest pruned attention mass of any row; the largest
    |pruned - dense| output entry, its bound (mass x range of v) and the largest excess over the bound."""
    U: np.ndarray
    L: np.ndarray
    pruned_blocks: np.ndarray
    causal_blocks: int
    frac_per_seq: np.ndarray
    flops_per_seq: np.ndarray
    max_pruned_mass: np.ndarray
    max_err: np.ndarray
    max_err_bound: np.ndarray
    max_excess: np.ndarray


def prune_stats(q, k, v, log_fgate, out, U, L_tol, block, scale):
    """PruneStats of a pruned output `out` (B, T, H, D) of q, k, v (B, T, H, D), log_fgate (B, T, H), from
    the dense attention of the same inputs. U: (H,) float64 tensor, the U the op used."""
    B, T, H, _ = q.shape
    g = BlockGrid.make(T, block)
    qq, kk, vv = (t.float().transpose(1, 2) for t in (q, k, v))              # (B, H, T, D)
    c = fa.cum_log_gate(log_fgate)
    Lh = fa.acp_level(L_tol, U, T)
    pruned = fa.acp_pruned_blocks(c, Lh, block)                                # (B, H, nI, nJ)
    pd = torch.softmax(fa.fox_logits(qq, kk, c, c, scale), -1)                 # dense attention
    err = (out.float().transpose(1, 2) - pd @ vv).abs().double()              # (B, H, T, D)
    mass = (pd * ~fa.acp_keep(pruned, T, block)).sum(-1).double()            # (B, H, T) pruned mass of each row
    bound = mass[..., None] * (vv.amax(2) - vv.amin(2)).double()[:, :, None, :]
    pairs = torch.from_numpy(g.pairs).double()
    return PruneStats(U.numpy(), Lh.numpy(), pruned.sum((0, 2, 3)).numpy(), int(g.causal.sum()) * B,
                      (pruned.sum((2, 3)).double() / g.causal.sum()).numpy(),
                      ((pruned * pairs).sum((2, 3)) / pairs.sum()).numpy(), mass.amax((0, 2)).numpy(),
                      err.amax((0, 2, 3)).numpy(), bound.amax((0, 2, 3)).numpy(), (err - bound).amax((0, 2, 3)).numpy())


class MeasuredPruning:
    """An attention op for model.use_attention_op: fox_attention.forgetting_attention_pruned_naive at L_tol with
    this U ("auto": ACP's bound from each call's q, k; or a number), each call's PruneStats appended to
    `record` (layers in call order)."""

    def __init__(self, L_tol, block, U="auto"):
        self.L_tol, self.block, self.U, self.record = L_tol, block, U, []

    def __call__(self, q, k, v, log_fgate, *, sm_scale=None, causal=True):
        scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
        H = q.shape[2]
        U = fa.acp_U(q, k, scale) if self.U == "auto" else torch.full((H,), float(self.U), dtype=torch.float64)
        outs, stats = [], []
        for b in range(q.shape[0]):             # one sequence at a time: (H, T, T) temporaries, not (B, H, T, T)
            qb, kb, vb, lb = (t[b:b + 1] for t in (q, k, v, log_fgate))
            outs.append(fa.forgetting_attention_pruned_naive(qb, kb, vb, lb, L_tol=self.L_tol, U=U, block=self.block,
                                                             sm_scale=scale, causal=causal))
            stats.append(prune_stats(qb, kb, vb, lb, outs[-1], U, self.L_tol, self.block, scale))
        self.record.append(merge_stats(stats))
        return torch.cat(outs, 0)


def merge_stats(stats):
    """One PruneStats for a batch from those of its sequences (in order)."""
    s0 = stats[0]
    return PruneStats(s0.U, s0.L, sum(s.pruned_blocks for s in stats), sum(s.causal_blocks for s in stats),
                      np.concatenate([s.frac_per_seq for s in stats]), np.concatenate([s.flops_per_seq for s in stats]),
                      *(np.max([getattr(s, f) for s in stats], axis=0)
                        for f in ("max_pruned_mass", "max_err", "max_err_bound", "max_excess")))


def run_pruned(model, x, L_tol, block, U="auto"):
    """Logits of `model` on tokens x with every FoX layer pruned at L_tol, and the layers' PruneStats."""
    op = MeasuredPruning(L_tol, block, U)
    with torch.no_grad(), fm.use_attention_op(model, op):
        logits = model(x)
    if len(op.record) != len(model.blocks):
        raise RuntimeError(f"expected {len(model.blocks)} attention calls in the pruned forward; saw {len(op.record)}")
    return logits, op.record


# ----------------------------------------------------------------------------- model-side measurements


@torch.no_grad()
def decode(model, tokens, horizons=None):
    """Token-by-token decoding of a FoXLM in its recurrent form (LM.step), head h of layer l keeping the keys
    at distance <= horizons[l][h] (None: every key). tokens (B, T) int64. Returns (logits (B, T, V) float32,
    kept (n_layers, H) int: the cache entries each head holds after the last token, min(h + 1, T))."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long or tokens.numel() == 0:
        raise ValueError(f"tokens must be a non-empty (B, T) int64 tensor; got {getattr(tokens, 'shape', tokens)}")
    T = tokens.shape[1]
    shape = (len(model.blocks), model.cfg.n_heads)
    hz = np.full(shape, T, dtype=np.int64) if horizons is None else np.asarray(horizons)
    if hz.shape != shape or not np.issubdtype(hz.dtype, np.integer) or (hz < 0).any():
        raise ValueError(f"horizons must be (n_layers, n_heads) = {shape} ints >= 0; got {hz.shape} {hz.dtype}")
    hz = np.minimum(hz, T)
    states = model.init_states([torch.from_numpy(h) for h in hz])
    out = []
    for t in range(T):
        logits, states = model.step(tokens[:, t], states)
        out.append(logits)
    return torch.stack(out, 1).float(), np.minimum(hz + 1, T)


def bits_per_byte(logits, targets):
    """Mean cross-entropy in bits, accumulated in float64: logits (B, T, V), targets (B, T) int64."""
    return float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(),
                                                   targets.reshape(-1)) / math.log(2))




def certified_x_min(attn, ln):
    """Certified smallest increment of each head of a ForgettingAttention fed by RMSNorm `ln`:
    the RMSNorm output is gamma * x_hat with ||x_hat||_2 <= sqrt(d), so the gate logit is at most
    b_h + sqrt(d) ||w_h * gamma||_2 for every input. Returns (H,) float64 numpy (0 for a fixed gate)."""
    if attn.f_proj is None:
        return np.zeros(attn.num_heads)
    w = attn.f_proj.weight.detach().double()                                     # (H, d)
    gamma = ln.weight.detach().double() if ln.weight is not None else torch.ones(w.shape[1], dtype=torch.float64)
    zmax = attn.f_proj.bias.detach().double() + math.sqrt(w.shape[1]) * (w * gamma).norm(dim=1)
    return torch.nn.functional.softplus(-zmax).numpy()                            # X = softplus(-z) >= this


if __name__ == "__main__":
    from foxwindow import outputs
    raise SystemExit(outputs.describe(__doc__))
