"""foxwindow: how far gated attention looks back.

The eps-window of a query is the first-passage time of the walk sum -log g_t over L = ln(1/eps). The public
names below are imported on first use (`import foxwindow` itself loads nothing heavy):

    gate laws          LogitNormalGate, AR1LogitGate, EmpiricalGate, ConstantGate; threshold (L = ln 1/eps)
    windows            windows(log_g, eps=...): the per-query eps-windows of a trace
    exact, Monte Carlo exact_first_passage(gate, eps=...), markov_first_passage(gate, eps=...),
                       first_passage_mc(gate, eps=...)
    capture            capture_traces(model, ids): {layer: (S, T, H)} log-decay traces of any gated nn.Module
                       (FoX, fla, Hugging Face, LSTMs; the CPU fallbacks on the CPU); capture_log_decays(model,
                       ...): one forward pass; load_pretrained(dir) / load_checkpoint(path): a Hugging Face style
                       checkpoint / this package's FoX checkpoint
    trace files        save_trace(path, traces, meta=None, force=False), load_trace(path, mmap=False)
    analysis           analyse(x, eps=...): the per-head verdict and windows -> HeadsResult

Thresholds are given by keyword, eps= or L= (exactly one), everywhere. The subpackages: laws/, heads/, models/,
uses/, training/, kernels/ (docs/LAYOUT.md); the commands: `python -m foxwindow --help` (foxwindow.cli).
"""
import importlib

__version__ = "0.3.0"

# public name -> the module that defines it
_WHERE = {
    "LogitNormalGate": "foxwindow.laws.gates",
    "AR1LogitGate": "foxwindow.laws.gates",
    "EmpiricalGate": "foxwindow.laws.gates",
    "ConstantGate": "foxwindow.laws.gates",
    "threshold": "foxwindow.laws.gates",
    "windows": "foxwindow.laws.gates",
    "first_passage_mc": "foxwindow.laws.gates",
    "exact_first_passage": "foxwindow.laws.exact",
    "markov_first_passage": "foxwindow.laws.exact",
    "capture_traces": "foxwindow.models.hf_capture",
    "capture_log_decays": "foxwindow.models.adapters",
    "load_pretrained": "foxwindow.models.hf_load",
    "load_checkpoint": "foxwindow.models.fox",
    "save_trace": "foxwindow.models.traces",
    "load_trace": "foxwindow.models.traces",
    "analyse": "foxwindow.heads.api",
    "HeadsResult": "foxwindow.heads.result",
}

__all__ = list(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value                       # once: later lookups skip this function
        return value
    raise AttributeError(f"module 'foxwindow' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
