"""Running a loaded gated model over token windows and reading its gates (`python forget.py --model`).

    capture_batches(model, ids, ...)   every gated layer's log-decays, batch by batch, and the attention-mass
                                       windows of softmax families
    attention_ops(model, ...)          while active: the attention op records mass windows and, on the CPU,
                                       runs this project's exact reference (cpu_standins.py: the other ops)
    mass_windows_qk(q, k, lg, ...)     the attention-mass window of FoX attention from the op's inputs
    analysis_traces(decays)            the (S, T, H) traces to analyse (per head, or per channel)

Loading the checkpoint, its tokenizer and the text is hf_models.py's; hf_driver.py joins the two with the
per-head analysis.
"""
import contextlib
import importlib
import sys

import torch
from tqdm import tqdm

from foxwindow.models import adapters
from foxwindow.models import attention as fa
from foxwindow.models.cpu_standins import CPU_STANDINS
from foxwindow.models.hf_load import CPU_FAMILIES, ModelError, first_line, supported


def _runs_on_cpu(module, adapter):
    """False for the fla families whose kernels are Triton-only (a user's adapter is taken at its word)."""
    return adapter.family in CPU_FAMILIES or type(module).__module__.startswith("transformers.") or \
        "fla" not in adapter.packages


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
        raise ModelError("the CPU stand-in of fla's forgetting attention has no window_size / cu_seqlens; use a GPU")
    return fa.forgetting_attention_reference(q, k, v, g.float(), sm_scale=scale).to(q.dtype)


def _official_reference(q, k, v, log_fgate, *, head_first=False, seq_start=None, sm_scale=None,
                        adaptive_threshold=None):
    if seq_start is not None:
        raise ModelError("the CPU stand-in of the official FoX attention has no padding (seq_start); use a GPU")
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
def attention_ops(model, mass_eps=None, rows=None, cpu=True):
    """While active: every softmax-family layer's attention op records attention-mass windows
    {layer name: [(B, R, H) int64 per call]} (when mass_eps is given) and, when `cpu`, runs this
    project's exact PyTorch reference in place of a GPU-only kernel (and CPU_STANDINS replace the
    other Triton-only ops). Yields the windows dict."""
    layers = [(n, m, a) for n, m, a in adapters.find_layers(model) if a.kind == "softmax" and a.attention_op]
    windows, current, handles, patched = {}, [None], [], []
    ours = {"fla-fox": _fla_reference, "fox-official": _official_reference}
    try:
        for n, m, a in layers:
            # the op is attributed to the layer running it; outside any layer it records nothing
            handles.append(m.register_forward_pre_hook(lambda mod, args, n=n: current.__setitem__(0, n)))
            handles.append(m.register_forward_hook(lambda mod, args, out: current.__setitem__(0, None)))
        for fam in sorted({a.family for _, _, a in layers}):
            mod_path, sym = adapters.get_adapter(fam).attention_op
            mod = importlib.import_module(mod_path)
            orig = getattr(mod, sym)
            run = ours[fam] if cpu and fam in ours else orig

            def op(*args, _run=run, _fam=fam, **kw):
                if mass_eps is not None and current[0] is not None:
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


# ----------------------------------------------------------------------------- capture + analysis

def capture_batches(model, ids, batch, device, mass_eps=None, rows=None, per_channel=True, progress=False):
    """Log-decays of every gated layer over ids (S, T), `batch` sequences per forward; per-channel
    decays are kept (S, T, H, K) when per_channel, else reduced to their channel mean batch by batch
    (a GLA model's channels would otherwise need S * T * key_dim floats per layer). progress: a bar over
    the forward passes on stderr. A model with `foxwindow_autocast` set (load_model at --dtype bfloat16 /
    float16) runs under torch.autocast to that dtype, as its own code runs.
    Returns (decays {name: (S, T, H) or (S, T, H, K) float32}, family {name}, layer {name},
    mass {name: (S, R, H) int64} for softmax families). ModelError when a kernel cannot run here."""
    try:
        layers = adapters.find_layers(model)
    except ValueError as exc:
        raise ModelError(f"{exc}: not supported ({supported()})") from None
    cpu = not str(device).startswith("cuda")
    if cpu:
        slow = sorted({a.family for _, m, a in layers if not _runs_on_cpu(m, a)})
        if slow:
            raise ModelError(f"family {', '.join(slow)}: its fused kernels are Triton-only and need a GPU "
                             f"(--device cuda); on the CPU run FoX (ours, official, fla) and Mamba-2 (fla, "
                             f"transformers)")
    amp = getattr(model, "foxwindow_autocast", None)
    dev_type = "cuda" if not cpu else "cpu"
    parts, mass_parts, fam, lay = {}, {}, {}, {}
    starts = range(0, ids.shape[0], batch)
    bar = tqdm(total=ids.shape[0], desc="forward", unit="seq", disable=not progress or len(starts) < 2,
               file=sys.stderr)
    with attention_ops(model, mass_eps, rows, cpu=cpu) as win:
        for s in starts:
            x = ids[s:s + batch].to(device)
            win.clear()
            try:
                with torch.autocast(dev_type, dtype=amp) if amp is not None else contextlib.nullcontext():
                    cap = adapters.capture_log_decays(model, x, use_cache=False)
            except RuntimeError as exc:
                if "active drivers" in str(exc) or "CUDA" in str(exc):
                    raise ModelError(f"a kernel of this model needs a GPU ({first_line(exc)}); "
                                     f"run with --device cuda") from None
                raise
            for n, lg in cap.decays.items():
                parts.setdefault(n, []).append(lg if per_channel or lg.dim() == 3 else lg.mean(-1))
            fam.update(cap.family)
            lay.update(cap.layer)
            for n, ws in win.items():
                for k, w in enumerate(ws):
                    mass_parts.setdefault(n if k == 0 else f"{n}#{k}", []).append(w)
            bar.update(x.shape[0])
    bar.close()
    decays = {n: torch.cat(p, 0) for n, p in parts.items()}
    mass = {n: torch.cat(p, 0) for n, p in mass_parts.items() if n in decays}
    return decays, fam, lay, mass


def analysis_traces(decays, per_channel=False):
    """{name: (S, T, H)} traces to analyse from captured decays: scalar-per-head layers as they are;
    per-channel layers (S, T, H, K) as H*K channel traces (head-major: column h*K + k) when per_channel,
    else as their per-head channel mean (the log geometric-mean decay)."""
    out = {}
    for n, lg in decays.items():
        if lg.dim() == 4:
            out[n] = lg.flatten(2) if per_channel else lg.mean(-1)
        elif lg.dim() == 3:
            out[n] = lg
        else:
            raise ValueError(f"{n}: decays must be (S, T, H) or (S, T, H, K); got {tuple(lg.shape)}")
    return out
