"""foxwindow: how far gated attention looks back.

The Forgetting Transformer's effective window as the first-passage time of the walk sum -log g_t over
L = ln(1/eps): exact numerics and Monte Carlo (forget, exact), the renewal laws (renewal), gate traces
of real models (traces, adapters, hf_models) and the per-head analysis (heads), the FoX model and its
fused kernel (model, fox_attention, kernels). Import the modules by name: `from foxwindow import forget`.
The commands are listed by `python -m foxwindow --help` (foxwindow.cli).
"""
__version__ = "0.2.0"
