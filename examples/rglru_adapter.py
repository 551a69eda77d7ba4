"""A gate adapter of your own: the RG-LRU of transformers' RecurrentGemma (Griffin), for `forget.py --model`.

    python forget.py --model DIR --adapter examples/rglru_adapter.py:RGLRU

The RG-LRU multiplies its state by a_t = exp(-c softplus(Lambda) r_t) per channel, r_t = sigmoid(W_r x_t + b_r)
computed head-block by head-block (block-diagonal W_r), c = 8. log_decay recomputes log a_t from the layer's own
parameters and the activations the layer is called with, exactly as the layer does (same ops, same dtype).
The layer's `reset` (a_t = 0 at position 0 of each document) is the start of the trace, not a decay.
"""
import torch
import torch.nn.functional as F

from foxwindow.models.adapters import GateAdapter


def rglru_log_decay(layer, x, kw):
    """(B, T, H, K) log-decays of a RecurrentGemmaRglru called with activations x (B, T, H*K)."""
    B, T, W = x.shape
    H, K = layer.num_attention_heads, layer.block_width
    xh = x.reshape(B * T, H, K).permute(1, 0, 2)                                  # (H, B*T, K)
    r = torch.baddbmm(layer.recurrent_gate_bias[:, None, :], xh, layer.recurrent_gate_weight)
    gate = torch.sigmoid(r.transpose(0, 1).reshape(B, T, W))                    # r_t per channel
    return (-8.0 * gate * F.softplus(layer.recurrent_param)).reshape(B, T, H, K)


RGLRU = GateAdapter(
    family="rglru",
    layer_classes=("modeling_recurrent_gemma.RecurrentGemmaRglru",),
    log_decay=rglru_log_decay,
    num_heads=lambda layer: layer.num_attention_heads,
    kind="recurrent",
    per_channel=True,
    model_types=("recurrent_gemma",),
    note="per channel of the RG-LRU state (X = 8 softplus(Lambda) r_t); the per-head trace is the channel mean; "
         "the model's local-attention layers have no gate and are not read",
)
