"""Models and their gates: the attention op (attention), the FoX model (fox), attention kinds (kinds), capture and
trace files (traces), gate adapters of every family (adapters; LSTMs: lstm_gates, the textgenrnn LSTM: lstm),
Hugging Face loading and capture (hf_load, hf_capture) and the CPU stand-ins of GPU-only ops (cpu_standins)."""

__all__ = ["adapters", "attention", "cpu_standins", "fallbacks", "fox", "hf_capture", "hf_load", "kinds", "lstm",
           "lstm_gates", "traces"]
