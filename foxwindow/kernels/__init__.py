"""Fused kernels for forgetting attention."""
from . import fox_bwd_onepass  # noqa: F401  (registers the one-pass backward with fox_triton)
from .fox_triton import fox_attention_triton

__all__ = ["fox_attention_triton"]
