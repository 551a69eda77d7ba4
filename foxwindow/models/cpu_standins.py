"""PyTorch stand-ins for the Triton / CUDA-only ops of gated models' code, patched in while a model runs on
the CPU (fallbacks.attention_ops). Each computes what the op computes, in float32 like its kernel, and is the
defining code's own reference where it has one:

    fla                 rms_norm (rms_norm_ref), rmsnorm_fn (layernorm_gated.rms_norm_ref), swish_fwd, swiglu
    official FoX code   layernorm.rms_norm / group_norm (group_norm_ref), fuse_norm_gate.group_norm_gated
                        (group_norm_gated_ref), glu_linear / swiglu_linear (CUDA jiterator), token_shift,
                        rotary.apply_rotary_emb_func (apply_rotary_emb_torch)

The attention ops themselves (fla's and the official forgetting attention) are replaced by this project's
exact reference in fallbacks.attention_ops.
"""
import sys

import torch

__all__ = ["StandinError", "CPU_STANDINS"]


class StandinError(ValueError):
    """An op's case that its CPU stand-in does not cover (reported in one line by --model)."""


def _swiglu(x, y):
    """SwiGLU silu(x) * y, fla's formula (silu in float32), for its Triton-only op on the CPU."""
    return (torch.nn.functional.silu(x.float()) * y.float()).to(x.dtype)


def _res_dtype(x, residual, residual_in_fp32):
    return residual.dtype if residual is not None else (torch.float32 if residual_in_fp32 else x.dtype)


def _fla_rms_norm(x, weight, bias, residual=None, eps=1e-5, prenorm=False, residual_in_fp32=False):
    """fla.modules.norm.layernorm.rms_norm on the CPU: fla's own rms_norm_ref, in float32 as its kernel."""
    ref = sys.modules["fla.modules.norm.layernorm"].rms_norm_ref
    out, res = ref(x, weight, bias, residual=residual, eps=eps, prenorm=True, upcast=True)
    return out if not prenorm else (out, res.to(_res_dtype(x, residual, residual_in_fp32)))


def _fla_rmsnorm_gated(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    """fla.modules.norm.layernorm_gated.rmsnorm_fn on the CPU: fla's own rms_norm_ref (float32)."""
    ref = sys.modules["fla.modules.norm.layernorm_gated"].rms_norm_ref
    return ref(x, weight, bias, z=z, eps=eps, group_size=group_size, norm_before_gate=norm_before_gate, upcast=True)


def _fla_swish_fwd(x, output_contiguous=False):
    """fla's swish kernel (silu in float32, stored in x's dtype) on the CPU."""
    return torch.nn.functional.silu(x.float()).to(x.dtype)


_OFF = "forgetting_transformer.model.forgetting_transformer"


def _official_group_norm(x, weight, bias, residual=None, eps=1e-5, prenorm=False, residual_in_fp32=False,
                         is_rms_norm=False, num_groups=1):
    """The official FoX layernorm.group_norm / rms_norm on the CPU: its own group_norm_ref in float32."""
    ref = sys.modules[_OFF + ".layernorm"].group_norm_ref
    out, res = ref(x, weight, bias, num_groups, residual=residual, eps=eps, is_rms_norm=is_rms_norm, prenorm=True,
                   upcast=True)
    return out if not prenorm else (out, res.to(_res_dtype(x, residual, residual_in_fp32)))


def _official_rms_norm(x, weight, bias, residual=None, eps=1e-5, prenorm=False, residual_in_fp32=False):
    return _official_group_norm(x, weight, bias, residual, eps, prenorm, residual_in_fp32, True, 1)


def _official_group_norm_gated(x, g, weight, bias, activation="swish", residual=None, prenorm=False,
                               residual_in_fp32=False, is_rms_norm=False, num_groups=1, eps=1e-6):
    """The official FoX fuse_norm_gate.group_norm_gated (the output norm with the output gate) on the CPU:
    its own group_norm_gated_ref (sigmoid gate, the only one its layer builds)."""
    if activation != "sigmoid":
        raise StandinError(f"the CPU stand-in of the official FoX gated norm has only the sigmoid gate, not "
                         f"{activation}; use a GPU")
    ref = sys.modules[_OFF + ".fuse_norm_gate"].group_norm_gated_ref
    out, res = ref(x, g, weight, bias, num_groups, residual=residual, eps=eps, is_rms_norm=is_rms_norm, prenorm=True,
                   upcast=True)
    return out if not prenorm else (out, res.to(_res_dtype(x, residual, residual_in_fp32)))


def _official_glu_linear(x, y, weight, bias):
    """glu_linear (CUDA jiterator): sigmoid(x) * y in float32, then the linear map."""
    z = (torch.sigmoid(x.float()) * y.float()).to(torch.promote_types(x.dtype, y.dtype))
    return torch.nn.functional.linear(z.to(weight.dtype), weight, bias)


def _official_swiglu_linear(x, y, weight, bias):
    """swiglu_linear (CUDA jiterator): silu(x) * y in float32, then the linear map."""
    z = (torch.nn.functional.silu(x.float()) * y.float()).to(torch.promote_types(x.dtype, y.dtype))
    return torch.nn.functional.linear(z.to(weight.dtype), weight, bias)


def _official_token_shift(x, prev_weight, curr_weight):
    """token_shift (Triton): out_t = x_t curr_t + x_{t-1} prev_t per head, x_{-1} = 0, in float32. x (B, T, H, D)."""
    prev = torch.nn.functional.pad(x, (0, 0, 0, 0, 1, 0))[:, :-1]
    out = x.float() * curr_weight[..., None].float() + prev.float() * prev_weight[..., None].float()
    return out.to(x.dtype)


def _official_rotary(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    """apply_rotary_emb (Triton) on the CPU: the official rotary.py's own apply_rotary_emb_torch, in float32."""
    if cu_seqlens is not None or not isinstance(seqlen_offsets, int):
        raise StandinError("the CPU stand-in of the official FoX rotary embedding has no packed sequences or "
                         "per-sequence offsets; use a GPU")
    T = x.shape[1]
    ref = sys.modules[_OFF + ".rotary"].apply_rotary_emb_torch
    cos, sin = cos[seqlen_offsets:seqlen_offsets + T].float(), sin[seqlen_offsets:seqlen_offsets + T].float()
    return ref(x.float(), cos, sin, interleaved).to(x.dtype)


# (module, name, PyTorch stand-in) patched while a model runs on the CPU, when the module is loaded: Triton /
# CUDA-only ops of fla and of the official FoX code, replaced by the defining code's own references where
# it has them (rms_norm_ref, group_norm_ref, group_norm_gated_ref, apply_rotary_emb_torch)
CPU_STANDINS = (
    ("fla.modules.mlp", "swiglu", _swiglu),
    ("fla.modules.norm.layernorm", "rms_norm", _fla_rms_norm),
    ("fla.modules.norm.layernorm_gated", "rmsnorm_fn", _fla_rmsnorm_gated),
    ("fla.modules.activations.ops", "swish_fwd", _fla_swish_fwd),
    (_OFF + ".layernorm", "rms_norm", _official_rms_norm),
    (_OFF + ".layernorm", "group_norm", _official_group_norm),
    (_OFF + ".fuse_norm_gate", "group_norm_gated", _official_group_norm_gated),
    (_OFF + ".modeling_forgetting_transformer", "glu_linear", _official_glu_linear),
    (_OFF + ".modeling_forgetting_transformer", "swiglu_linear", _official_swiglu_linear),
    (_OFF + ".modeling_forgetting_transformer", "token_shift", _official_token_shift),
    (_OFF + ".rotary", "apply_rotary_emb_func", _official_rotary),
)
