"""Running a loaded gated model over token windows and reading its gates (`python forget.py --model`).

    capture_batches(model, ids, ...)   every gated layer's log-decays, batch by batch, and the attention-mass
                                       windows of softmax families
    analysis_traces(decays)            the (S, T, H) traces to analyse (per head, or per channel)
    capture_traces(model, ids)         the library route: any gated nn.Module -> {layer: (S, T, H)} traces

The CPU fallbacks and the attention-mass windows are models/fallbacks.py's; loading the checkpoint, its tokenizer
and the text models/hf_load.py's; heads/hf_run.py joins the two with the
per-head analysis.
"""
import contextlib
import sys

import torch
from tqdm import tqdm

from foxwindow.models import adapters, fallbacks
from foxwindow.models.fallbacks import attention_ops
from foxwindow.models.hf_load import ModelError, first_line, supported

__all__ = ["capture_batches", "analysis_traces", "capture_traces"]

# ----------------------------------------------------------------------------- capture + analysis

def capture_batches(model, ids, batch, device, mass_eps=None, rows=None, per_channel=True, progress=False,
                    forward_kwargs=None, names=None, upto=None, stop=None):
    """Log-decays of every gated layer over ids (S, T), `batch` sequences per forward; per-channel
    decays are kept (S, T, H, K) when per_channel, else reduced to their channel mean batch by batch
    (a GLA model's channels would otherwise need S * T * key_dim floats per layer). progress: a bar over
    the forward passes on stderr. A model with `foxwindow_autocast` set (load_pretrained at --dtype bfloat16 /
    float16) runs under torch.autocast to that dtype, as its own code runs.
    forward_kwargs: the keywords of each forward (None: use_cache=False, for Hugging Face style models).
    names: the gated layers to read (None: every one; their mass windows only); upto: stop each forward pass
    after that layer (adapters.capture_log_decays). stop: checked before each batch, a true value (a
    parallel.StopFlag that Ctrl-C set) ends the capture there, with the batches done.
    Returns (decays {name: (S, T, H) or (S, T, H, K) float32}, family {name}, layer {name},
    mass {name: (S, R, H) int64} for softmax families). ModelError when a kernel cannot run here."""
    forward_kwargs = dict(use_cache=False) if forward_kwargs is None else dict(forward_kwargs)
    try:
        layers = adapters.find_layers(model)
    except ValueError as exc:
        raise ModelError(f"{exc}: not supported ({supported()})") from None
    cpu = not str(device).startswith("cuda")
    if cpu:
        slow = sorted({a.family for _, m, a in layers if not fallbacks.runs_on_cpu(m, a)})
        if slow:
            raise ModelError(f"family {', '.join(slow)}: its fused kernels are Triton-only and need a GPU "
                             f"(--device cuda); on the CPU run {', '.join(adapters.cpu_families())}")
    amp = getattr(model, "foxwindow_autocast", None)
    dev_type = "cuda" if not cpu else "cpu"
    parts, mass_parts, fam, lay = {}, {}, {}, {}
    starts = range(0, ids.shape[0], batch)
    bar = tqdm(total=ids.shape[0], desc="forward", unit="seq", disable=not progress or len(starts) < 2,
               file=sys.stderr)
    with attention_ops(layers, mass_eps, rows, cpu=cpu, record=None if names is None else set(names)) as win:
        for s in starts:
            if stop:
                break
            x = ids[s:s + batch].to(device)
            win.clear()
            try:
                with torch.autocast(dev_type, dtype=amp) if amp is not None else contextlib.nullcontext():
                    cap = adapters.capture_log_decays(model, x, cpu_fallbacks=False, names_filter=names, upto=upto,
                                                      **forward_kwargs)
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


def capture_traces(model, inputs, *, batch=8, per_channel=False, progress=False):
    """The log-decay traces of any gated model, ready for analysis: {layer name: (S, T, H) float32 tensor}.

    model: any torch.nn.Module with layers of a registered family (this package's FoX model, fla and Hugging Face
    checkpoints, the official FoX code, an nn.LSTM, a user's GateAdapter), on the device it runs on; on the CPU
    the GPU-only ops run by their PyTorch references (models/fallbacks.py). inputs: token ids (S, T) (or any
    (S, T, ...) input the model takes), `batch` sequences per forward. per_channel: per-channel families as
    H*K channel traces (else their per-head channel mean). ModelError when a kernel of the model cannot run here.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an integer >= 1 (sequences per forward); got {batch!r}")
    if not isinstance(per_channel, bool):
        raise ValueError(f"per_channel must be True or False; got {per_channel!r}")
    want = "(S, T) token ids (or any (S, T, ...) numeric input the model takes)"
    try:
        ids = torch.as_tensor(inputs)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"inputs must be {want}; got a {type(inputs).__name__} that is not one numeric array "
                         f"({' '.join(str(exc).split())})") from None
    if ids.dim() == 0:
        raise ValueError(f"inputs must be {want}; got a single number ({ids.item()!r})")
    if ids.dim() == 1:
        ids = ids[None]
    if ids.numel() == 0:
        raise ValueError(f"inputs are empty (shape {tuple(ids.shape)}): give (S, T) token ids with S, T >= 1")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    config = getattr(model, "config", None)
    kw = dict(use_cache=False) if config is not None and hasattr(config, "use_cache") else {}
    decays, _, _, _ = capture_batches(model, ids, batch, device, per_channel=per_channel, progress=progress,
                                      forward_kwargs=kw)
    return analysis_traces(decays, per_channel)
