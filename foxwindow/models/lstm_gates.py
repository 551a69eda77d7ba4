"""The forget gates of any torch.nn.LSTM / LSTMCell, recomputed from the module's own weights, the input it was
called with and the hidden states it produced (models/lstm.py's docstring: the unit as a gated memory).

    lstm_log_forget(lstm, x, hx=None, units=None)     any nn.LSTM (any num_layers, batch_first either
                                                      way, proj_size): [(B, T, H) float32 log f per layer]
    cell_log_forget(cell, x, hx=None, units=None)     one nn.LSTMCell step: (B, H) float32 log f
    capture_lstm_gates(model, *inputs, units=None)    every nn.LSTM / nn.LSTMCell of a model, one forward:
                                                      {name: (B, T, H) float32} (a cell's calls stacked
                                                      over time)

The "torch-lstm" family of models/adapters.py reads a batch_first nn.LSTM through lstm_log_forget.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["lstm_log_forget", "cell_log_forget", "capture_lstm_gates", "check_units"]


def check_units(units, hidden, what):
    """None -> None; else a list of distinct ints in [0, hidden)."""
    if units is None:
        return None
    try:
        sel = [int(u) for u in units]
    except (TypeError, ValueError):
        raise ValueError(f"{what}: units must be a sequence of ints; got {units!r}") from None
    if not sel:
        raise ValueError(f"{what}: units is empty")
    bad = [u for u in sel if not 0 <= u < hidden]
    if bad:
        raise ValueError(f"{what}: units {bad[:5]} outside [0, {hidden}) (the layer has {hidden} units)")
    if len(set(sel)) != len(sel):
        raise ValueError(f"{what}: units has repeated entries")
    return sel


def _check_lstm(lstm):
    if isinstance(lstm, nn.LSTMCell):
        raise ValueError("an nn.LSTMCell is one step: use cell_log_forget (or capture_lstm_gates on the model)")
    if not isinstance(lstm, nn.LSTM):
        raise ValueError(f"expected a torch.nn.LSTM; got {type(lstm).__name__} (a GRU or vanilla RNN has no forget "
                         "gate; other gated layers: foxwindow.models.adapters)")
    if lstm.bidirectional:
        raise ValueError("bidirectional nn.LSTM: the reverse direction's gates decay over later tokens, not earlier "
                         "ones; not supported (capture a unidirectional LSTM)")
    if lstm.training and lstm.dropout > 0 and lstm.num_layers > 1:
        raise ValueError(f"the nn.LSTM is in training mode with dropout={lstm.dropout} between layers: the "
                         "gates are random; call model.eval() first")


def _layer_weights(lstm, layer):
    """(W_ih (4H, in), W_hh (4H, R), b_ih (4H,), b_hh (4H,), W_hr (P, H) or None) of layer `layer`."""
    w_ih, w_hh = getattr(lstm, f"weight_ih_l{layer}"), getattr(lstm, f"weight_hh_l{layer}")
    if lstm.bias:
        b_ih, b_hh = getattr(lstm, f"bias_ih_l{layer}"), getattr(lstm, f"bias_hh_l{layer}")
    else:
        b_ih = b_hh = torch.zeros(w_ih.shape[0], dtype=w_ih.dtype, device=w_ih.device)
    w_hr = getattr(lstm, f"weight_hr_l{layer}") if lstm.proj_size > 0 else None
    return w_ih, w_hh, b_ih, b_hh, w_hr


def _one_layer(lstm, layer):
    """A single-layer batch_first nn.LSTM holding layer `layer`'s weights (it runs the same fused op)."""
    w_ih, w_hh, b_ih, b_hh, w_hr = _layer_weights(lstm, layer)
    one = nn.LSTM(w_ih.shape[1], lstm.hidden_size, num_layers=1, bias=lstm.bias, batch_first=True,
                  proj_size=lstm.proj_size, device=w_ih.device, dtype=w_ih.dtype)
    with torch.no_grad():
        one.weight_ih_l0.copy_(w_ih)
        one.weight_hh_l0.copy_(w_hh)
        if lstm.bias:
            one.bias_ih_l0.copy_(b_ih)
            one.bias_hh_l0.copy_(b_hh)
        if w_hr is not None:
            one.weight_hr_l0.copy_(w_hr)
    return one.eval()


def lstm_log_forget(lstm, x, hx=None, units=None, output=None, return_hidden=False):
    """Log forget gates of every layer of `lstm` (a unidirectional torch.nn.LSTM) on input `x`.

    x: (B, T, in) when lstm.batch_first, (T, B, in) otherwise, or unbatched (T, in); any float dtype the
        module takes (a PackedSequence is refused: pad it). hx: the (h0, c0) the module was called with,
        each (num_layers, B, R) (R = proj_size or hidden_size; unbatched (num_layers, R)), or None (zeros).
    units: None (every unit) or a sequence of unit indices kept in every layer, in that order.
    output: the module's own output for (x, hx), if at hand (its layout).
    The hidden states of each layer: a one-layer module's are `output` when given; otherwise every layer is
    rerun on its input with its own weights (the same fused op, no dropout), the last layer's rerun checked
    against `output` when given. Then log f_t = logsigmoid(W_if x_t + b_if + W_hf h_{t-1} + b_hf) from each
    layer's inputs x_t and hidden states h_{t-1} (h_0 from hx).
    Returns [log f of layer l: (B, T, H) float32 CPU tensor, entries <= 0] for l = 0 .. num_layers - 1
    (H = len(units) or hidden_size; an unbatched input gives B = 1); with return_hidden also the list of
    each layer's (B, T, R) hidden states (module dtype and device).
    Raises ValueError for a module that is not an nn.LSTM, a bidirectional one, dropout in training mode,
    a wrong input layout, bad units, or a rerun that does not reproduce `output`.
    """
    _check_lstm(lstm)
    if isinstance(x, nn.utils.rnn.PackedSequence):
        raise ValueError("PackedSequence input: pad it (nn.utils.rnn.pad_packed_sequence) before capturing gates")
    if not isinstance(x, torch.Tensor) or x.dim() not in (2, 3):
        raise ValueError(f"x must be a (B, T, in), (T, B, in) or unbatched (T, in) tensor; got "
                         f"{type(x).__name__ if not isinstance(x, torch.Tensor) else tuple(x.shape)}")
    if x.shape[-1] != lstm.input_size:
        raise ValueError(f"x has {x.shape[-1]} features per token; the nn.LSTM takes input_size={lstm.input_size}")
    sel = check_units(units, lstm.hidden_size, "lstm_log_forget")
    unbatched = x.dim() == 2
    xb = x.unsqueeze(0) if unbatched else (x if lstm.batch_first else x.transpose(0, 1))     # (B, T, in)
    B, T = xb.shape[:2]
    L, H = lstm.num_layers, lstm.hidden_size
    R = lstm.proj_size or H
    if hx is None:
        h0 = xb.new_zeros(L, B, R)
        c0 = xb.new_zeros(L, B, H)
    else:
        if not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise ValueError("hx must be the pair (h0, c0)")
        h0, c0 = hx
        if unbatched:
            h0, c0 = h0.unsqueeze(1), c0.unsqueeze(1)
        if tuple(h0.shape) != (L, B, R) or tuple(c0.shape) != (L, B, H):
            raise ValueError(f"hx shapes {tuple(h0.shape)}, {tuple(c0.shape)}; the nn.LSTM needs h0 {(L, B, R)} "
                             f"and c0 {(L, B, H)}")
    given = None
    if output is not None:
        given = output.data if isinstance(output, nn.utils.rnn.PackedSequence) else output
        given = given.unsqueeze(0) if unbatched else (given if lstm.batch_first else given.transpose(0, 1))
        if tuple(given.shape) != (B, T, R):
            raise ValueError(f"the module's output has shape {tuple(output.shape)}; expected (B, T, {R}) = "
                             f"{(B, T, R)} in the module's layout")
    logs, hiddens, inp = [], [], xb
    with torch.no_grad():
        for layer in range(L):
            if L == 1 and given is not None:
                out = given                                 # one layer: its output is the hidden states
            else:
                out, _ = _one_layer(lstm, layer)(inp, (h0[layer:layer + 1].contiguous(),
                                                       c0[layer:layer + 1].contiguous()))
            w_ih, w_hh, b_ih, b_hh, _ = _layer_weights(lstm, layer)
            rows = slice(H, 2 * H)                                              # the forget gate's rows
            w_if, w_hf, b_f = w_ih[rows], w_hh[rows], b_ih[rows] + b_hh[rows]
            if sel is not None:
                w_if, w_hf, b_f = w_if[sel], w_hf[sel], b_f[sel]
            h_prev = torch.cat([h0[layer].unsqueeze(1), out[:, :-1]], dim=1)    # (B, T, R): h_{t-1}
            z = inp @ w_if.T + h_prev @ w_hf.T + b_f                            # (B, T, H_sel)
            logs.append(F.logsigmoid(z.float()).cpu())
            hiddens.append(out)
            inp = out
    if given is not None and L > 1:
        err = (given.float() - hiddens[-1].float()).abs().max().item()
        tol = 1e-3 if given.dtype in (torch.float16, torch.bfloat16) else 1e-4
        if err > tol:
            raise ValueError(f"the layer-by-layer rerun does not reproduce the nn.LSTM's output (max |diff| "
                             f"{err:.3g}); was the module called with another state, or changed during the forward?")
    return (logs, hiddens) if return_hidden else logs


def cell_log_forget(cell, x, hx=None, units=None):
    """Log forget gate of one torch.nn.LSTMCell step: logsigmoid(W_if x + b_if + W_hf h + b_hf).

    x: (B, in) or unbatched (in,); hx: the (h, c) pair the cell was called with ((B, H) each) or None
    (zeros). units: None or unit indices kept. Returns (B, H) float32 CPU tensor (B = 1 when unbatched).
    Raises ValueError for a module that is not an nn.LSTMCell or a wrong input shape.
    """
    if not isinstance(cell, nn.LSTMCell):
        raise ValueError(f"expected a torch.nn.LSTMCell; got {type(cell).__name__}")
    if not isinstance(x, torch.Tensor) or x.dim() not in (1, 2) or x.shape[-1] != cell.input_size:
        raise ValueError(f"x must be (B, {cell.input_size}) or ({cell.input_size},); got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    sel = check_units(units, cell.hidden_size, "cell_log_forget")
    xb = x.unsqueeze(0) if x.dim() == 1 else x
    H = cell.hidden_size
    h = xb.new_zeros(xb.shape[0], H) if hx is None else hx[0]
    h = h.unsqueeze(0) if h.dim() == 1 else h
    rows = slice(H, 2 * H)
    with torch.no_grad():
        z = xb @ cell.weight_ih[rows].T + h @ cell.weight_hh[rows].T
        if cell.bias:
            z = z + cell.bias_ih[rows] + cell.bias_hh[rows]
        if sel is not None:
            z = z[:, sel]
        return F.logsigmoid(z.float()).cpu()


def capture_lstm_gates(model, *inputs, units=None, names_filter=None, **kwargs):
    """Run model(*inputs, **kwargs) once under no_grad and read the forget gates of every nn.LSTM and
    nn.LSTMCell in it (the model itself may be one).

    units: None or unit indices kept in every layer. names_filter: None, a list of module names or a
    callable name -> bool. Returns {name: (B, T, H) float32 CPU tensor of log f, entries <= 0}: an
    nn.LSTM with num_layers > 1 gives "name.l0", "name.l1", ... (one layer: "name"); an nn.LSTMCell's
    calls are stacked in call order as its T steps; a layer called more than once per forward keeps every
    call, the k-th extra one as "name#k". Each nn.LSTM's rerun is checked against the output it returned.
    Hooks are removed even if the forward raises. Raises ValueError when the model has no nn.LSTM /
    nn.LSTMCell (or the filter keeps none), or for a layer the readers refuse (see lstm_log_forget).
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    found = [(n or type(m).__name__, m) for n, m in model.named_modules() if isinstance(m, (nn.LSTM, nn.LSTMCell))]
    if not found:
        kinds = sorted({type(m).__name__ for m in model.modules()})[:6]
        raise ValueError(f"{type(model).__name__} has no torch.nn.LSTM or nn.LSTMCell (its modules: {kinds}); "
                         "other gated layers: foxwindow.models.adapters.capture_log_decays")
    if names_filter is not None:
        keep = names_filter if callable(names_filter) else (lambda n, w=set(
            [names_filter] if isinstance(names_filter, str) else names_filter): n in w)
        chosen = [(n, m) for n, m in found if keep(n)]
        if not chosen:
            raise ValueError(f"names_filter kept none of the LSTM modules {[n for n, _ in found][:4]}")
        found = chosen
    for n, m in found:
        if isinstance(m, nn.LSTM):
            _check_lstm(m)
    out, cells, handles = {}, {}, []

    def put(key, val):
        k, i = key, 0
        while k in out:
            i += 1
            k = f"{key}#{i}"
        out[k] = val

    def lstm_hook(name):
        def hook(mod, args, kw, res):
            x = args[0] if args else kw.get("input")
            hx = args[1] if len(args) > 1 else kw.get("hx")
            logs = lstm_log_forget(mod, x, hx, units=units, output=res[0])
            for layer, lg in enumerate(logs):
                put(name if mod.num_layers == 1 else f"{name}.l{layer}", lg)
        return hook

    def cell_hook(name):
        def hook(mod, args, kw, res):
            x = args[0] if args else kw.get("input")
            hx = args[1] if len(args) > 1 else kw.get("hx")
            cells.setdefault(name, []).append(cell_log_forget(mod, x, hx, units=units))
        return hook

    try:
        for n, m in found:
            make = lstm_hook if isinstance(m, nn.LSTM) else cell_hook
            handles.append(m.register_forward_hook(make(n), with_kwargs=True))
        with torch.no_grad():
            model(*inputs, **kwargs)
    finally:
        for h in handles:
            h.remove()
    for name, steps in cells.items():
        sizes = {s.shape[0] for s in steps}
        if len(sizes) > 1:
            raise ValueError(f"{name}: the LSTMCell was called with batch sizes {sorted(sizes)}; its calls cannot be "
                             "stacked into one (B, T, H) trace")
        put(name, torch.stack(steps, dim=1))                                     # (B, T, H)
    missing = [n for n, m in found
               if not any(k == n or k.startswith(f"{n}.l") or k.startswith(f"{n}#") for k in out)]
    if missing:
        raise ValueError(f"LSTM modules {missing[:4]} were not called in the forward pass")
    return out
