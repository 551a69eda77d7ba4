"""The retention gates of any torch.nn.LSTM / LSTMCell (forget gate f) and nn.GRU / GRUCell (update gate z),
recomputed from the module's own weights, the input it was called with and the hidden states it produced
(models/lstm.py's and models/gru.py's docstrings: the unit as a gated memory).

    lstm_log_forget(lstm, x, hx=None, units=None)     any nn.LSTM (any num_layers, batch_first either way,
                                                      proj_size, bidirectional): [(B, T, H) float32 log f per
                                                      layer and direction]
    cell_log_forget(cell, x, hx=None, units=None)     one nn.LSTMCell step: (B, H) float32 log f
    rnn_log_gate(module, x, hx, units, output)        the same for an nn.LSTM or nn.GRU (log z), with the
                                                      layer and direction of each trace
    capture_rnn_gates(model, *inputs, units=None)     every nn.LSTM / LSTMCell / GRU / GRUCell of a model, one
                                                      forward: {name: (B, T, H) float32} (a cell's calls
                                                      stacked over time; a bidirectional layer's backward
                                                      direction as "<name>.reverse", time-reversed)
    capture_lstm_gates(model, *inputs, units=None)    the same restricted to nn.LSTM / nn.LSTMCell
    looks_forward(names)                              the backward directions among trace names

BIDIRECTIONAL modules: each direction is its own trace; the backward one is stored in its reading order (last
token first), so its windows, read back along the trace as every window is, look forward in the text.

The "torch-lstm" and "torch-gru" families of models/adapters.py read a batch_first unidirectional module through
rnn_log_gate.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["lstm_log_forget", "cell_log_forget", "rnn_log_gate", "cell_log_gate", "capture_rnn_gates",
           "capture_lstm_gates", "check_units", "check_rnn", "looks_forward", "REVERSE", "LOOKS_FORWARD"]


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


def _kind(module):
    """'lstm' or 'gru' for an nn.LSTM / nn.GRU; ValueError otherwise."""
    if isinstance(module, nn.LSTM):
        return "lstm"
    if isinstance(module, nn.GRU):
        return "gru"
    if isinstance(module, (nn.LSTMCell, nn.GRUCell)):
        raise ValueError(f"an nn.{type(module).__name__} is one step: use cell_log_forget / models.gru.cell_log_update "
                         "(or capture_rnn_gates on the model)")
    raise ValueError(f"expected a torch.nn.LSTM or nn.GRU; got {type(module).__name__} (a vanilla RNN has no "
                     "retention gate; other gated layers: foxwindow.adapters)")


def check_rnn(module, want=None):
    kind = _kind(module)
    if want is not None and kind != want:
        raise ValueError(f"expected a torch.nn.{want.upper()}; got {type(module).__name__}"
                         + (" (its update gate: foxwindow.models.gru.gru_log_update)" if kind == "gru" else ""))
    if module.training and module.dropout > 0 and module.num_layers > 1:
        raise ValueError(f"the nn.{type(module).__name__} is in training mode with dropout={module.dropout} between "
                         "layers: the gates are random; call model.eval() first")
    return kind


def _check_lstm(lstm):
    check_rnn(lstm, "lstm")


def direction_keys(base, bidirectional):
    """Trace names of one layer's directions: [base] or [base, base + '.reverse']."""
    return [base, base + REVERSE] if bidirectional else [base]


REVERSE = ".reverse"
LOOKS_FORWARD = ("the backward direction of a bidirectional layer, stored time-reversed (its reading order, last "
                 "token first): its windows, read back along the trace, look forward in the text")


def looks_forward(names):
    """The trace names of backward directions (capture_rnn_gates names them '<layer>.reverse')."""
    return [n for n in names if n.split("#")[0].endswith(REVERSE)]


def _layer_weights(lstm, layer, sfx=""):
    """(W_ih (G H, in), W_hh (G H, R), b_ih (G H,), b_hh (G H,), W_hr (P, H) or None) of layer `layer`, direction
    sfx ('' forward, '_reverse' backward); G = 4 (LSTM) or 3 (GRU)."""
    w_ih, w_hh = getattr(lstm, f"weight_ih_l{layer}{sfx}"), getattr(lstm, f"weight_hh_l{layer}{sfx}")
    if lstm.bias:
        b_ih, b_hh = getattr(lstm, f"bias_ih_l{layer}{sfx}"), getattr(lstm, f"bias_hh_l{layer}{sfx}")
    else:
        b_ih = b_hh = torch.zeros(w_ih.shape[0], dtype=w_ih.dtype, device=w_ih.device)
    w_hr = getattr(lstm, f"weight_hr_l{layer}{sfx}") if getattr(lstm, "proj_size", 0) > 0 else None
    return w_ih, w_hh, b_ih, b_hh, w_hr


def _one_layer(rnn, layer):
    """A single-layer batch_first nn.LSTM / nn.GRU (both directions when the module is bidirectional) holding
    layer `layer`'s weights: it runs the same fused op."""
    w_ih = getattr(rnn, f"weight_ih_l{layer}")
    kw = dict(proj_size=rnn.proj_size) if isinstance(rnn, nn.LSTM) else {}
    one = type(rnn)(w_ih.shape[1], rnn.hidden_size, num_layers=1, bias=rnn.bias, batch_first=True,
                    bidirectional=rnn.bidirectional, device=w_ih.device, dtype=w_ih.dtype, **kw)
    with torch.no_grad():
        for name, p in one.named_parameters():
            p.copy_(getattr(rnn, name.replace("_l0", f"_l{layer}")))
    return one.eval()


def _batched(module, x, what):
    if isinstance(x, nn.utils.rnn.PackedSequence):
        raise ValueError("PackedSequence input: pad it (nn.utils.rnn.pad_packed_sequence) before capturing gates")
    if not isinstance(x, torch.Tensor) or x.dim() not in (2, 3):
        raise ValueError(f"x must be a (B, T, in), (T, B, in) or unbatched (T, in) tensor; got "
                         f"{type(x).__name__ if not isinstance(x, torch.Tensor) else tuple(x.shape)}")
    if x.shape[-1] != module.input_size:
        raise ValueError(f"x has {x.shape[-1]} features per token; the nn.{what} takes input_size={module.input_size}")
    unbatched = x.dim() == 2
    return (x.unsqueeze(0) if unbatched else (x if module.batch_first else x.transpose(0, 1))), unbatched


def rnn_log_gate(module, x, hx, units, output):
    """The log retention gate (LSTM forget f, GRU update z) of every layer and direction of an nn.LSTM / nn.GRU:
    [(layer, direction, (B, T, H_sel) float32 CPU log gate in the direction's reading order)], with the
    hidden states. See lstm_log_forget."""
    kind = check_rnn(module)
    what = kind.upper()
    xb, unbatched = _batched(module, x, what)
    sel = check_units(units, module.hidden_size, f"{kind}_log_gate")
    B, T = xb.shape[:2]
    L, H, D = module.num_layers, module.hidden_size, 2 if module.bidirectional else 1
    R = getattr(module, "proj_size", 0) or H
    if kind == "lstm":
        if hx is None:
            h0 = xb.new_zeros(L * D, B, R)
        else:
            if not (isinstance(hx, (tuple, list)) and len(hx) == 2):
                raise ValueError("hx must be the pair (h0, c0)")
            h0, c0 = hx
            if unbatched:
                h0, c0 = h0.unsqueeze(1), c0.unsqueeze(1)
            if tuple(h0.shape) != (L * D, B, R) or tuple(c0.shape) != (L * D, B, H):
                raise ValueError(f"hx shapes {tuple(h0.shape)}, {tuple(c0.shape)}; the nn.LSTM needs h0 "
                                 f"{(L * D, B, R)} and c0 {(L * D, B, H)}")
        c0 = xb.new_zeros(L * D, B, H) if hx is None else c0
    else:
        if isinstance(hx, (tuple, list)):
            raise ValueError("an nn.GRU's hx is one tensor h0, not a pair")
        h0 = xb.new_zeros(L * D, B, H) if hx is None else (hx.unsqueeze(1) if unbatched else hx)
        if tuple(h0.shape) != (L * D, B, H):
            raise ValueError(f"hx shape {tuple(h0.shape)}; the nn.GRU needs h0 {(L * D, B, H)}")
    given = None
    if output is not None:
        given = output.data if isinstance(output, nn.utils.rnn.PackedSequence) else output
        given = given.unsqueeze(0) if unbatched else (given if module.batch_first else given.transpose(0, 1))
        if tuple(given.shape) != (B, T, D * R):
            raise ValueError(f"the module's output has shape {tuple(output.shape)}; expected (B, T, {D * R}) = "
                             f"{(B, T, D * R)} in the module's layout")
    res, hiddens, inp = [], [], xb
    rows = slice(H, 2 * H)                       # LSTM gates i, f, g, o; GRU gates r, z, n: row block 1 either way
    with torch.no_grad():
        for layer in range(L):
            st = slice(layer * D, (layer + 1) * D)
            state = (h0[st].contiguous(), c0[st].contiguous()) if kind == "lstm" else h0[st].contiguous()
            out = given if (L == 1 and given is not None) else _one_layer(module, layer)(inp, state)[0]
            for d in range(D):
                w_ih, w_hh, b_ih, b_hh, _ = _layer_weights(module, layer, "_reverse" if d else "")
                w_g, w_hg, b_g = w_ih[rows], w_hh[rows], b_ih[rows] + b_hh[rows]
                if sel is not None:
                    w_g, w_hg, b_g = w_g[sel], w_hg[sel], b_g[sel]
                h = out[..., d * R:(d + 1) * R]
                first = h0[layer * D + d].unsqueeze(1)
                if d == 0:
                    h_prev = torch.cat([first, h[:, :-1]], dim=1)               # h_{t-1}
                else:
                    h_prev = torch.cat([h[:, 1:], first], dim=1)                # the backward direction's h_{t+1}
                lg = F.logsigmoid((inp @ w_g.T + h_prev @ w_hg.T + b_g).float()).cpu()
                res.append((layer, d, lg.flip(1) if d else lg))                 # reading order
            hiddens.append(out)
            inp = out
    if given is not None and L > 1:
        err = (given.float() - hiddens[-1].float()).abs().max().item()
        tol = 1e-3 if given.dtype in (torch.float16, torch.bfloat16) else 1e-4
        if err > tol:
            raise ValueError(f"the layer-by-layer rerun does not reproduce the nn.{what}'s output (max |diff| "
                             f"{err:.3g}); was the module called with another state, or changed during the forward?")
    return res, hiddens


def lstm_log_forget(lstm, x, hx=None, units=None, output=None, return_hidden=False):
    """Log forget gates of every layer (and direction) of `lstm` (a torch.nn.LSTM) on input `x`.

    x: (B, T, in) when lstm.batch_first, (T, B, in) otherwise, or unbatched (T, in); any float dtype the
        module takes (a PackedSequence is refused: pad it). hx: the (h0, c0) the module was called with,
        each (num_layers * directions, B, R) (R = proj_size or hidden_size; unbatched without B), or None (zeros).
    units: None (every unit) or a sequence of unit indices kept in every layer, in that order.
    output: the module's own output for (x, hx), if at hand (its layout).
    The hidden states of each layer: a one-layer module's are `output` when given; otherwise every layer is
    rerun on its input with its own weights (the same fused op, no dropout), the last layer's rerun checked
    against `output` when given. Then log f_t = logsigmoid(W_if x_t + b_if + W_hf h_{t-1} + b_hf) from each
    layer's inputs x_t and hidden states h_{t-1} (h_0 from hx).
    Returns [log f: (B, T, H) float32 CPU tensor, entries <= 0] for layer 0, 1, ..; a bidirectional module gives
    two per layer (forward, then backward), the backward one in its reading order (time reversed: entry t is
    the gate at token T - 1 - t, so its windows look forward in the text). H = len(units) or hidden_size; an
    unbatched input gives B = 1. With return_hidden also each layer's (B, T, directions * R) hidden states.
    Raises ValueError for a module that is not an nn.LSTM, dropout in training mode, a wrong input layout, bad
    units, or a rerun that does not reproduce `output`.
    """
    _check_lstm(lstm)
    res, hiddens = rnn_log_gate(lstm, x, hx, units, output)
    logs = [lg for _, _, lg in res]
    return (logs, hiddens) if return_hidden else logs


def cell_log_gate(cell, x, hx, units, want):
    """Log retention gate of one nn.LSTMCell (forget f) / nn.GRUCell (update z) step: both sit in row block 1
    (LSTM gates i, f, g, o; GRU r, z, n)."""
    if not isinstance(cell, want):
        raise ValueError(f"expected a torch.nn.{want.__name__}; got {type(cell).__name__}")
    if not isinstance(x, torch.Tensor) or x.dim() not in (1, 2) or x.shape[-1] != cell.input_size:
        raise ValueError(f"x must be (B, {cell.input_size}) or ({cell.input_size},); got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    sel = check_units(units, cell.hidden_size, f"{want.__name__} gate")
    xb = x.unsqueeze(0) if x.dim() == 1 else x
    H = cell.hidden_size
    h = hx if want is nn.GRUCell else (None if hx is None else hx[0])
    h = xb.new_zeros(xb.shape[0], H) if h is None else h
    h = h.unsqueeze(0) if h.dim() == 1 else h
    rows = slice(H, 2 * H)
    with torch.no_grad():
        z = xb @ cell.weight_ih[rows].T + h @ cell.weight_hh[rows].T
        if cell.bias:
            z = z + cell.bias_ih[rows] + cell.bias_hh[rows]
        if sel is not None:
            z = z[:, sel]
        return F.logsigmoid(z.float()).cpu()


def cell_log_forget(cell, x, hx=None, units=None):
    """Log forget gate of one torch.nn.LSTMCell step: logsigmoid(W_if x + b_if + W_hf h + b_hf).

    x: (B, in) or unbatched (in,); hx: the (h, c) pair the cell was called with ((B, H) each) or None
    (zeros). units: None or unit indices kept. Returns (B, H) float32 CPU tensor (B = 1 when unbatched).
    Raises ValueError for a module that is not an nn.LSTMCell or a wrong input shape.
    """
    return cell_log_gate(cell, x, hx, units, nn.LSTMCell)


RNN_MODULES = (nn.LSTM, nn.LSTMCell, nn.GRU, nn.GRUCell)


def capture_rnn_gates(model, *inputs, units=None, names_filter=None, **kwargs):
    """Run model(*inputs, **kwargs) once under no_grad and read the retention gates of every nn.LSTM,
    nn.LSTMCell (forget gate f), nn.GRU and nn.GRUCell (update gate z, torch's h_t = (1 - z) n_t + z h_{t-1})
    in it (the model itself may be one).

    units: None or unit indices kept in every layer. names_filter: None, a list of module names or a
    callable name -> bool. Returns {name: (B, T, H) float32 CPU tensor of log f or log z, entries <= 0}: a
    module with num_layers > 1 gives "name.l0", "name.l1", ... (one layer: "name"); a bidirectional one
    adds "<that>.reverse" per layer, the backward direction in its reading order (time reversed: its windows
    look forward in the text; looks_forward(names) lists them); a cell's calls are stacked in call order as
    its T steps; a layer called more than once per forward keeps every call, the k-th extra one as "name#k".
    Each module's rerun is checked against the output it returned. Hooks are removed even if the forward
    raises. Raises ValueError when the model has none of these modules (or the filter keeps none), or for a
    layer the readers refuse (see lstm_log_forget).
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    found = [(n or type(m).__name__, m) for n, m in model.named_modules() if isinstance(m, RNN_MODULES)]
    if not found:
        kinds = sorted({type(m).__name__ for m in model.modules()})[:6]
        raise ValueError(f"{type(model).__name__} has no torch.nn.LSTM, nn.LSTMCell, nn.GRU or nn.GRUCell (its "
                         f"modules: {kinds}); other gated layers: foxwindow.adapters.capture_log_decays")
    if names_filter is not None:
        keep = names_filter if callable(names_filter) else (lambda n, w=set(
            [names_filter] if isinstance(names_filter, str) else names_filter): n in w)
        chosen = [(n, m) for n, m in found if keep(n)]
        if not chosen:
            raise ValueError(f"names_filter kept none of the recurrent modules {[n for n, _ in found][:4]}")
        found = chosen
    for n, m in found:
        if isinstance(m, (nn.LSTM, nn.GRU)):
            check_rnn(m)
    out, cells, handles = {}, {}, []

    def put(key, val):
        k, i = key, 0
        while k in out:
            i += 1
            k = f"{key}#{i}"
        out[k] = val

    def rnn_hook(name):
        def hook(mod, args, kw, res):
            x = args[0] if args else kw.get("input")
            hx = args[1] if len(args) > 1 else kw.get("hx")
            got, _ = rnn_log_gate(mod, x, hx, units, res[0])
            for layer, d, lg in got:
                base = name if mod.num_layers == 1 else f"{name}.l{layer}"
                put(base + (REVERSE if d else ""), lg)
        return hook

    def cell_hook(name):
        def hook(mod, args, kw, res):
            x = args[0] if args else kw.get("input")
            hx = args[1] if len(args) > 1 else kw.get("hx")
            cells.setdefault(name, []).append(cell_log_gate(mod, x, hx, units, type(mod)))
        return hook

    try:
        for n, m in found:
            make = rnn_hook if isinstance(m, (nn.LSTM, nn.GRU)) else cell_hook
            handles.append(m.register_forward_hook(make(n), with_kwargs=True))
        with torch.no_grad():
            model(*inputs, **kwargs)
    finally:
        for h in handles:
            h.remove()
    for name, steps in cells.items():
        sizes = {s.shape[0] for s in steps}
        if len(sizes) > 1:
            raise ValueError(f"{name}: the cell was called with batch sizes {sorted(sizes)}; its calls cannot be "
                             "stacked into one (B, T, H) trace")
        put(name, torch.stack(steps, dim=1))                                     # (B, T, H)
    missing = [n for n, m in found
               if not any(k == n or k.startswith(f"{n}.") or k.startswith(f"{n}#") for k in out)]
    if missing:
        raise ValueError(f"recurrent modules {missing[:4]} were not called in the forward pass")
    return out


def capture_lstm_gates(model, *inputs, units=None, names_filter=None, **kwargs):
    """capture_rnn_gates restricted to nn.LSTM and nn.LSTMCell (the forget gates). Raises ValueError when the
    model has no nn.LSTM / nn.LSTMCell."""
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    names = [n or type(m).__name__ for n, m in model.named_modules() if isinstance(m, (nn.LSTM, nn.LSTMCell))]
    if not names:
        kinds = sorted({type(m).__name__ for m in model.modules()})[:6]
        raise ValueError(f"{type(model).__name__} has no torch.nn.LSTM or nn.LSTMCell (its modules: {kinds}); "
                         "GRUs: capture_rnn_gates; other gated layers: foxwindow.adapters.capture_log_decays")
    if names_filter is None:
        keep = set(names)
    elif callable(names_filter):
        keep = {n for n in names if names_filter(n)}
    else:
        keep = set([names_filter] if isinstance(names_filter, str) else names_filter) & set(names)
    if not keep:
        raise ValueError(f"names_filter kept none of the LSTM modules {names[:4]}")
    return capture_rnn_gates(model, *inputs, units=units, names_filter=lambda n: n in keep, **kwargs)
