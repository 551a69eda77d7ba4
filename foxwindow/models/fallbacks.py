"""The CPU fallbacks of gated models: while a model runs on the CPU, this project's exact PyTorch reference stands in
for the GPU-only attention op of a softmax family (fla's and the official forgetting attention), and
cpu_standins.CPU_STANDINS for the other Triton-only ops; the same context records attention-mass windows.

    attention_ops(layers, mass_eps=None, rows=None, cpu=True)   the context (layers: adapters.find_layers(model))
    runs_on_cpu(module, adapter)                                 whether a layer's code runs on the CPU here
    mass_windows_qk(q, k, lg, scale, eps, rows)                  the attention-mass window from the op's inputs

models/adapters.py's capture_log_decays enters the context for a model on the CPU; models/hf_capture.py enters it
batch by batch with the mass windows on.
"""
import contextlib
import importlib
import sys

import torch

from foxwindow.models import attention as fa
from foxwindow.models.cpu_standins import CPU_STANDINS, StandinError

__all__ = ["attention_ops", "runs_on_cpu", "mass_windows_qk"]


def runs_on_cpu(module, adapter):
    """Whether a gated layer runs on the CPU here: its adapter says so (GateAdapter.cpu: the family's code runs
    there with these fallbacks), or the layer is transformers' own implementation."""
    return adapter.cpu or type(module).__module__.startswith("transformers.")


# ----------------------------------------------------------------------------- attention op

@torch.no_grad()
def mass_windows_qk(q, k, lg, scale, eps, rows):
    """Attention-mass window of FoX attention from the op's inputs: for query rows `rows` (R,) int64,
    the smallest d with sum_{j=i-d..i} A_ij >= 1 - eps, A = softmax_j(q_i.k_j scale + c_i - c_j) causal.
    q (B, T, H, D), k (B, T, H_kv, D) (GQA: H % H_kv == 0), lg (B, T, H) log gates. Returns (B, R, H) int64.
    Computed head by head in float64 (memory B * R * T per head)."""
    B, T, H, _ = q.shape
    rep = H // k.shape[2]
    c = fa.cum_log_gate(lg)                                                     # (B, H, T) float64
    rows = rows.to(q.device)
    out = []
    for h in range(H):
        qh, kh = q[:, rows, h, None].double(), k[:, :, h // rep, None].double()  # (B, R, 1, D), (B, T, 1, D)
        logits = fa.fox_logits(qh.transpose(1, 2), kh.transpose(1, 2), c[:, h:h + 1, rows], c[:, h:h + 1], scale,
                               q_pos=rows, dtype=torch.float64)[:, 0]           # (B, R, T), keys after i masked
        A = torch.softmax(logits, -1)
        suf = A.flip(-1).cumsum(-1).flip(-1)                                     # mass within distance i - j
        jstar = (suf >= 1 - eps).sum(-1) - 1                                    # (B, R)
        out.append(rows[None, :] - jstar)
    return torch.stack(out, -1).cpu()                                           # (B, R, H)


def _fla_reference(q, k, v, g, scale=None, window_size=None, cu_seqlens=None):
    if window_size is not None or cu_seqlens is not None:
        raise StandinError("the CPU stand-in of fla's forgetting attention has no window_size / cu_seqlens; use a GPU")
    return fa.forgetting_attention_reference(q, k, v, g.float(), sm_scale=scale).to(q.dtype)


def _official_reference(q, k, v, log_fgate, *, head_first=False, seq_start=None, sm_scale=None,
                        adaptive_threshold=None):
    if seq_start is not None:
        raise StandinError("the CPU stand-in of the official FoX attention has no padding (seq_start); use a GPU")
    if head_first:                                                              # (B, H, T, D), (B, H, T)
        q, k, v, log_fgate = (t.transpose(1, 2) for t in (q, k, v, log_fgate))
    o = fa.forgetting_attention_reference(q, k, v, log_fgate.float(), sm_scale=sm_scale).to(q.dtype)
    return o.transpose(1, 2) if head_first else o                               # adaptive pruning only skips ~0 terms


def _op_inputs(family, args, kw):
    """(q, k (B, T, H, D), log gates (B, T, H), scale) from an attention op's arguments."""
    names = ("q", "k", "v", "g" if family == "fla-fox" else "log_fgate")
    q, k, _, g = list(args[:4]) + [kw.get(n) for n in names[len(args):]]
    if family == "fla-fox":
        scale = args[4] if len(args) > 4 else kw.get("scale")
    else:
        scale = kw.get("sm_scale")
        if kw.get("head_first"):                                               # official: (B, H, T, ...)
            q, k, g = q.transpose(1, 2), k.transpose(1, 2), g.transpose(1, 2)
    return q, k, g, (q.shape[-1] ** -0.5 if scale is None else scale)


@contextlib.contextmanager
def attention_ops(layers, mass_eps=None, rows=None, cpu=True, record=None):
    """While active (layers: [(name, module, GateAdapter)] as adapters.find_layers returns them): every
    softmax-family layer's attention op records attention-mass windows
    {layer name: [(B, R, H) int64 per call]} (when mass_eps is given; record: only those of the layer names
    in it, None: every layer's) and, when `cpu`, runs this
    project's exact PyTorch reference in place of a GPU-only kernel (and CPU_STANDINS replace the
    other Triton-only ops). Yields the windows dict."""
    layers = [(n, m, a) for n, m, a in layers if a.kind == "softmax" and a.attention_op]
    windows, current, handles, patched = {}, [None], [], []
    ours = {"fla-fox": _fla_reference, "fox-official": _official_reference}
    try:
        for n, m, a in layers:
            # the op is attributed to the layer running it; outside any layer it records nothing
            handles.append(m.register_forward_pre_hook(lambda mod, args, n=n: current.__setitem__(0, n)))
            handles.append(m.register_forward_hook(lambda mod, args, out: current.__setitem__(0, None)))
        for fam in sorted({a.family for _, _, a in layers}):
            mod_path, sym = next(a for _, _, a in layers if a.family == fam).attention_op
            try:
                mod = importlib.import_module(mod_path)
            except ImportError:                     # the op's package is not installed: nothing calls it
                continue
            orig = getattr(mod, sym)
            run = ours[fam] if cpu and fam in ours else orig

            def op(*args, _run=run, _fam=fam, **kw):
                if mass_eps is not None and current[0] is not None and (record is None or current[0] in record):
                    q, k, g, scale = _op_inputs(_fam, args, kw)
                    windows.setdefault(current[0], []).append(mass_windows_qk(q, k, g, scale, mass_eps, rows))
                return _run(*args, **kw)

            patched.append((mod, sym, orig))
            setattr(mod, sym, op)
        for mod_path, sym, standin in CPU_STANDINS if cpu else ():
            mod = sys.modules.get(mod_path)
            if mod is not None and hasattr(mod, sym):
                patched.append((mod, sym, getattr(mod, sym)))
                setattr(mod, sym, standin)
        yield windows
    finally:
        for mod, sym, orig in reversed(patched):
            setattr(mod, sym, orig)
        for h in handles:
            h.remove()
