"""Fused kernels for forgetting attention."""
from .fox_triton import fox_attention_triton

__all__ = ["fox_attention_triton"]
