"""foxwindow.analyse: the per-head analysis of anything that holds gates, in one call and one result type.

    analyse(x, *, eps=None, L=None, ...)  x: a trace file (.npz from save_trace), a {layer: (S, T, H)} mapping of
                                          log-gates, one (S, T, H) or (S, T) array / tensor, or a gated model
                                          (torch.nn.Module; its gates captured on `tokens`, with the CPU
                                          fallbacks on the CPU). Returns heads.result.HeadsResult.
"""
import math
import os
import warnings
from collections.abc import Mapping

import numpy as np
import torch

from foxwindow import safety
from foxwindow.heads import driver
from foxwindow.heads.result import HeadsResult
from foxwindow.heads.verdict import ALPHA
from foxwindow.laws import gates
from foxwindow.models import hf_capture, traces
from foxwindow.models.fox import FoXLM
from foxwindow.training import data

__all__ = ["analyse"]


def _user_info(traces, seed, n_boot, what, n_results):
    S, T = next(iter(traces.values())).shape[:2]
    return dict(source=what, split="user data", n_seq=int(S), seq_len=int(T), analysed_len=int(T), n_boot=n_boot,
                seed=seed, alpha=ALPHA, alpha_test=ALPHA / (2 * max(1, n_results)), layers=list(traces),
                rows=f"rows {T // 2}-{T - 1} of each sequence")


def _as_traces(x, layout=True):
    """{layer: (S, T, H) float64 array} from a mapping or one array / tensor ((S, T): one head), each of a real
    floating dtype (bfloat16 tensors read as float32, exactly), non-empty and (layout: the user's arrays) laid out as
    traces.check_layout asks of a trace file (a capture's own layout is known: per-channel captures may hold more
    channels than tokens). The values (finite, <= 0, within float32's range) are checked here, head by head, before any
    work."""
    items = list(x.items()) if isinstance(x, Mapping) else [("layer0", x)]
    if not items:
        raise ValueError("no traces: the mapping is empty")
    out = {}
    for name, a in items:
        what = f"log-gates '{safety.shown(str(name))}'"
        if isinstance(a, torch.Tensor):
            if not torch.is_floating_point(a):
                raise ValueError(f"{what} must be floating point; got dtype {a.dtype}")
            a = a.detach().cpu()
            a = (a.float() if a.dtype == torch.bfloat16 else a).numpy()
        else:
            if isinstance(a, np.ma.MaskedArray) and np.ma.is_masked(a):
                # np.asarray drops the mask: the masked values would be analysed as gates
                raise ValueError(f"{what}: a masked array with {int(np.ma.count_masked(a))} masked values; the "
                                 "analysis reads every value (its mask would be ignored): pass whole sequences")
            try:
                a = np.asarray(a)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{what} are not one array: {' '.join(str(exc).split())}") from None
        if not np.issubdtype(a.dtype, np.floating):
            raise ValueError(f"{what} must be a real floating-point array (S, T, H); got dtype {a.dtype}")
        if a.ndim == 2:
            S, T = a.shape
            if layout and 0 not in a.shape and (T < S or T < traces.MIN_TRACE_LEN):
                # a (T, H) capture of one sequence reads as many sequences of a few tokens: say what 2-D means
                raise ValueError(f"{what}: a 2-D array is read as (S, T), S sequences of one head; got shape "
                                 f"{a.shape}, {S} sequences x {T} tokens, and the analysis needs T >= max(S, "
                                 f"{traces.MIN_TRACE_LEN}). If it is (T, H), one sequence of H heads, x[None] makes "
                                 "it (1, T, H): the analysis needs (S, T, H) with S >= 3 sequences (np.stack "
                                 "them); if it is (T, S), transpose it (x.T)")
            a = a[:, :, None]
        if a.ndim != 3:
            raise ValueError(f"{what} must be (S, T, H) (or (S, T) for one head); got shape {a.shape}")
        if 0 in a.shape:
            raise ValueError(f"{what} are empty: shape (S, T, H) = {a.shape}; every dimension must be >= 1")
        a = a.astype(np.float64)
        lo, hi = a.min(axis=(0, 1)), a.max(axis=(0, 1))                    # (H,) each; NaN propagates
        for h in range(a.shape[2]):                                         # every value before any work
            try:
                gates.check_log_gates(float(hi[h]), float(lo[h]), in_range=True)
            except ValueError as exc:
                raise ValueError(f"{what}, head {h}: {exc}") from None
        out[str(name)] = a
    if len(out) < len(items):
        raise ValueError("two layers have the same name once written as strings; give every layer its own name")
    if layout:
        traces.check_layout("analyse", {n: a.shape for n, a in out.items()})
    return out


MIN_TOKENS = 4              # tokens per sequence the per-head analysis needs (its lag sums over documents)


def _check_tokens(tokens):
    """The tokens a model's gates are captured on, before any forward: (S, T) ids, or (S, T, features) for a model
    that takes features (an nn.LSTM), with S >= 3 sequences (the errors are jackknifed over them) and
    T >= max(S, MIN_TOKENS)."""
    want = ("(S, T) token ids, int64 (floats (S, T, features) for a model that takes features, such as an "
            "nn.LSTM)")
    if isinstance(tokens, torch.Tensor):
        shape, dtype = tuple(tokens.shape), str(tokens.dtype).removeprefix("torch.")
        ok = not (tokens.is_complex() or tokens.dtype == torch.bool)
    else:
        try:
            a = np.asarray(tokens)
        except (ValueError, TypeError):
            raise ValueError(f"tokens must be {want}; got a {type(tokens).__name__} that is not one array "
                             "(rows of different lengths?)") from None
        shape, dtype = a.shape, str(a.dtype)
        ok = np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)
    if not ok:
        raise ValueError(f"tokens must be {want}; got dtype {dtype}")
    t = tokens if isinstance(tokens, torch.Tensor) else torch.from_numpy(a) if a.dtype.kind == "f" else None
    if t is not None and torch.is_floating_point(t) and not bool(torch.isfinite(t).all()):
        raise ValueError(f"tokens hold NaN or infinite values ({int((~torch.isfinite(t)).sum())} of {t.numel()}); "
                         "features must be finite")
    if len(shape) < 2:
        ints = isinstance(tokens, tuple) and all(isinstance(v, int) for v in tokens)
        raise ValueError(f"tokens must be {want}; got a {type(tokens).__name__} of shape {shape}"
                         + (" (a tuple of ints is read as the ids, not as a shape: torch.randint(vocab, "
                            f"{tokens}) draws ids of that shape)" if ints else ""))
    S, T = shape[:2]
    if S < 3 or T < max(S, MIN_TOKENS):
        raise ValueError(f"tokens must be {want} with S >= 3 sequences (the errors are jackknifed over them) and "
                         f"T >= max(S, {MIN_TOKENS}) tokens each; got shape {shape} (S = {S}, T = {T})")


# the arguments of a model's capture, with their defaults: given to anything else they would be ignored
CAPTURE_ARGS = {"n_seq": 32, "seq_len": 2048, "batch": 8, "per_channel": False}


def _named(keys):
    """'batch= is' / 'n_seq=, seq_len= are': the arguments named in a message."""
    return ", ".join(f"{k}=" for k in keys) + (" is" if len(keys) == 1 else " are")


def _check_capture_args(x, tokens, given):
    """ValueError for an argument of analyse() that the input x would ignore: the capture's arguments (`given`:
    {name: value} of CAPTURE_ARGS) with traces, n_seq and seq_len beside tokens=; and the held-out sizes of this
    package's FoX model (n_seq >= 3 sequences, seq_len >= max(n_seq, MIN_TOKENS) bytes) before any is read."""
    changed = [k for k, v in given.items() if v is not CAPTURE_ARGS[k] and v != CAPTURE_ARGS[k]]
    if not isinstance(x, torch.nn.Module):
        if changed:
            raise ValueError(f"{_named(changed)} for a model's capture (a torch.nn.Module); x is {_kind(x)}, which "
                             "holds the gates already: drop " + ("it" if len(changed) == 1 else "them"))
        return
    held = [k for k in changed if k in ("n_seq", "seq_len")]
    if held and (tokens is not None or not isinstance(x, FoXLM)):
        raise ValueError(f"{_named(held)} for this package's FoX model's held-out text; "
                         + (f"tokens= are given: drop {'it' if len(held) == 1 else 'them'}" if tokens is not None
                            else f"{type(x).__name__} is captured on tokens=: give those instead"))
    if tokens is None and isinstance(x, FoXLM):
        n_seq, seq_len = given["n_seq"], given["seq_len"]
        for k, v in (("n_seq", n_seq), ("seq_len", seq_len)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"{k} must be an integer; got {v!r}")
        if n_seq < 3 or seq_len < max(n_seq, MIN_TOKENS):
            raise ValueError(f"n_seq must be >= 3 sequences (the errors are jackknifed over them) and seq_len >= "
                             f"max(n_seq, {MIN_TOKENS}) bytes each; got n_seq={n_seq}, seq_len={seq_len}")


def _check_analysis_args(eps, L, n_boot, seed):
    """The analysis' own arguments, before a trace is read or a model run: the thresholds (gates.levels, as the
    analysis converts them), n_boot (an int >= 0, as heads.driver asks) and seed (driver.root_seed)."""
    with warnings.catch_warnings():             # the analysis itself warns, where it converts them
        warnings.simplefilter("ignore", gates.ThresholdWarning)
        gates.levels(eps, L, default=driver.EPS_SCAN, distinct=True)
    driver.check_n_boot(n_boot)
    if seed is not None:
        driver.root_seed(seed)


def _kind(x):
    """What x is, for a message: the user's word for it."""
    if isinstance(x, (str, os.PathLike)):
        return "a trace file path"
    return "a mapping of traces" if isinstance(x, Mapping) else f"an array of log-gates ({type(x).__name__})"


def analyse(x, *, eps=None, L=None, n_boot=driver.N_BOOT, seed=None, tokens=None, n_seq=32, seq_len=2048, batch=8,
            per_channel=False, progress=False):
    """The per-head verdict and windows of x at thresholds eps= or L= (keywords, at most one; each a number or
    a sequence; neither: the eps scan heads.driver.EPS_SCAN).

    x: a path to a trace file (models.traces.save_trace), a mapping {layer name: (S, T, H) log-gates <= 0},
      one (S, T, H) or (S, T) array or tensor, or a gated torch.nn.Module. A model's gates are captured on
      `tokens` ((S, T) ids, S >= 3 and T >= S, or (S, T, features) for a model that takes features; for this
      package's FoX model the default is n_seq held-out sequences of seq_len bytes; only for a model), `batch`
      sequences per forward, on the model's device (on the CPU with the CPU fallbacks).
    n_boot, seed: the verdict's document bootstrap (heads.verdict); seed None draws fresh (recorded).
    Returns a HeadsResult (.heads, .at(eps=...), .table(), .to_json()).
    """
    if tokens is not None and not isinstance(x, torch.nn.Module):
        raise ValueError(f"tokens= is for a model (a torch.nn.Module, its gates captured on them); x is "
                         f"{_kind(x)}, which holds the gates already: drop tokens=")
    _check_capture_args(x, tokens, dict(n_seq=n_seq, seq_len=seq_len, batch=batch, per_channel=per_channel))
    _check_analysis_args(eps, L, n_boot, seed)
    if isinstance(x, (str, os.PathLike)):
        driver.check_n_boot(n_boot, next(iter(traces.open_traces(os.fspath(x))[0].values())).shape[0])
        traces.check_trace_file(os.fspath(x))       # every value before the work, streamed (a file of any size)
        results, info = driver.analyse_traces(os.fspath(x), eps=eps, L=L, n_boot=n_boot, seed=seed,
                                              progress=progress)
        info["split"] = "user data"
        return HeadsResult(results, info)
    if isinstance(x, torch.nn.Module):
        if tokens is None:
            if not isinstance(x, FoXLM):
                raise ValueError(f"{type(x).__name__}: give tokens= (S, T) ids to capture its gates on")
            driver.check_n_boot(n_boot, n_seq)
            tokens, _ = data.heldout_tokens(n_seq=n_seq, seq_len=seq_len)
        else:
            _check_tokens(tokens)
            driver.check_n_boot(n_boot, tokens.shape[0] if hasattr(tokens, "shape") else len(tokens))
        layers = _as_traces(hf_capture.capture_traces(x, tokens, batch=batch, per_channel=per_channel,
                                                      progress=progress), layout=False)
        what = f"model {type(x).__name__}"
    else:
        layers = _as_traces(x)
        driver.check_n_boot(n_boot, next(iter(layers.values())).shape[0])
        what = "traces"
    results, used = driver.analyse_layers(layers, eps=eps, L=L, n_boot=n_boot, seed=seed, progress=progress)
    T = next(iter(layers.values())).shape[1]
    rows = driver.query_rows(T).numpy()
    heads_of = [(n, h) for n, tr in layers.items() for h in range(tr.shape[2])]
    mass_L = math.log(1e3)
    for r, (n, h) in zip(results, heads_of):
        driver.decay_window_L(r, layers[n][:, :, h], mass_L, rows)
    return HeadsResult(results, _user_info(layers, used, n_boot, what, len(results)))
