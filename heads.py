"""Per-head verdict: do a trained FoX model's gates obey the window laws?

For every layer and head, from log-gate traces (S sequences, T positions):
  - kappa, sigma^2 of X = -log g; rho_k of X; tau = 1 + 2 sum rho_k (Geyer's initial positive
    sequence); sigma_LR^2 = sigma^2 tau;
  - per-row windows W_i(eps) over a scan of eps, on query rows in the second half of each sequence;
    an eps at which any such row is censored (its window reaches the sequence start) is reported
    but kept out of every fit (averaging censored rows would bias the variance down), and so is an
    eps outside the regime the laws claim (L/kappa >= 4 tau);
  - the falsifier: the slope of Var[W] against L = ln(1/eps) versus sigma^2/kappa^3 (iid law) and
    sigma_LR^2/kappa^3 (autocorrelation-adjusted law), with jackknife-over-sequences standard errors
    (rows of one sequence are strongly dependent; sequences are the independent units);
  - the attention-mass window (smallest d holding 1 - eps of row i's actual attention) against the
    decay-only window, to show how much the content term q.k moves it.
Verdicts: "iid law holds", "autocorrelation-adjusted law holds", "falsified" (with reasons), or
"undetermined" (too few uncensored eps, or no forgetting at all).

Critical value: one default everywhere, the two-sided 95% Student-t quantile with S - 1 degrees of
freedom, Bonferroni-corrected over the heads analysed (critical_z). analyse_model and analyse_traces
pass the number of heads they analyse; a single analyse_head call reproduces their verdict with the
same n_heads. The command line is `python forget.py` (this module has none of its own).
"""
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from scipy import stats

import data
import forget
import outputs
import renewal
from fox_attention import cum_log_gate, fox_logits
from model import load_model

EPS_SCAN = (0.5, 0.3, 0.1, 0.03, 0.01, 3e-3, 1e-3, 3e-4, 1e-4, 1e-5, 1e-6)
MAX_LAG = 256


def _jackknife(values_loo):
    """Standard error from leave-one-out estimates (S,) or (S, ...)."""
    v = np.asarray(values_loo, dtype=np.float64)
    S = v.shape[0]
    return np.sqrt((S - 1) / S * np.sum((v - v.mean(axis=0)) ** 2, axis=0))


def _loo(per_seq):
    """Leave-one-sequence-out totals of per-sequence sums (S, ...) -> (S, ...)."""
    return per_seq.sum(axis=0, keepdims=True) - per_seq


@dataclass
class HeadResult:
    layer: int
    head: int
    kappa: float
    se_kappa: float
    sigma2: float
    se_sigma2: float
    excess_kurtosis: float
    tau: float
    se_tau: float
    sigma2_lr: float
    eps_list: list
    L_list: list
    censored_frac: list          # per eps: fraction of analysed rows whose window hit the start
    mean_W: list
    se_mean_W: list
    var_W: list
    se_var_W: list
    law_mean_iid: list
    law_mean_lr: list
    law_var_iid: list
    law_var_lr: list
    slope: float = float("nan")
    slope_se: float = float("nan")
    se_sigma2_lr: float = float("nan")
    slope_ci: list = field(default_factory=lambda: [float("nan"), float("nan")])
    pred_slope_iid: float = float("nan")
    pred_slope_lr: float = float("nan")
    z_iid: float = float("nan")
    z_lr: float = float("nan")
    verdict: str = "undetermined"
    reasons: list = field(default_factory=list)
    decay_window_mean: float = float("nan")
    decay_window_censored: float = float("nan")   # fraction of those rows whose window hit the start
    mass_window_mean: float = float("nan")
    mass_eps: float = float("nan")


def critical_z(n_heads, n_seq):
    """The default critical value: two-sided 95% Student-t quantile with n_seq - 1 degrees of freedom
    (jackknife over sequences), Bonferroni over n_heads heads."""
    if isinstance(n_heads, bool) or not isinstance(n_heads, (int, np.integer)) or n_heads < 1:
        raise ValueError(f"n_heads must be an int >= 1; got {n_heads!r}")
    if n_seq < 2:
        raise ValueError(f"n_seq must be >= 2; got {n_seq!r}")
    return float(stats.t.isf(0.05 / (2 * n_heads), n_seq - 1))


def analyse_head(lg, eps_list=EPS_SCAN, z=None, layer=0, head=0, n_heads=1):
    """Analyse one head's log-gate traces lg (S, T): S >= 3 sequences of T >= S tokens, numpy or torch,
    any float dtype, values <= 0. Returns a HeadResult.

    eps_list: non-empty sequence of thresholds in (0, 1).
    z: the critical value for "law holds" (|measured - predicted slope| <= z * SE of the difference), a
       finite number > 0; None (default) gives critical_z(n_heads, S), the value forget.py uses.
    n_heads: heads analysed together (for the Bonferroni default of z); int >= 1.
    """
    if isinstance(lg, torch.Tensor):
        lg = lg.detach().cpu().numpy()
    x = forget.increments_from_log_gates(np.asarray(lg, dtype=np.float64))       # (S, T)
    if x.ndim != 2 or x.shape[0] < 3:
        raise ValueError(f"lg: need traces (S, T) with S >= 3 sequences for jackknife errors; got {x.shape}")
    S, T = x.shape
    if S > T:
        raise ValueError(f"lg: shape {x.shape} reads as {S} sequences x {T} tokens; expected (S sequences, "
                         "T tokens) with T >= S: is the array transposed (T, S)?")
    if isinstance(eps_list, (str, bytes)) or not hasattr(eps_list, "__iter__"):
        raise ValueError(f"eps_list must be a sequence of thresholds in (0, 1); got {eps_list!r}")
    eps_list = [float(e) for e in eps_list]
    if not eps_list:
        raise ValueError("eps_list is empty; give at least one threshold in (0, 1)")
    for e in eps_list:
        forget.threshold(e)
    if z is None:
        z = critical_z(n_heads, S)
    elif isinstance(z, bool) or not isinstance(z, (int, float, np.floating)) or not (math.isfinite(z) and z > 0):
        raise ValueError(f"z must be a finite number > 0 (or None for the default); got {z!r}")
    # gate statistics from per-sequence sums, so leave-one-out moments are exact and cheap
    p1, p2 = x.sum(1), (x * x).sum(1)
    n = T * S

    def moments(s1, s2, cnt):
        m = s1 / cnt
        return m, s2 / cnt - m * m

    kappa, sigma2 = moments(p1.sum(), p2.sum(), n)
    k_loo, v_loo = moments(_loo(p1), _loo(p2), n - T)
    xc = x - kappa
    kurt = float(np.mean(xc ** 4) / sigma2 ** 2 - 3) if sigma2 > 0 else float("nan")

    eps_list = list(eps_list)
    Ls = [forget.threshold(e) for e in eps_list]
    res = HeadResult(layer, head, float(kappa), float(_jackknife(k_loo)), float(sigma2), float(_jackknife(v_loo)), kurt,
                     float("nan"), float("nan"), float("nan"), eps_list, Ls, [], [], [], [], [], [], [], [], [])
    if kappa <= 0 or sigma2 <= 1e-12 * kappa * kappa:                             # rounding leaves ~1e-17
        res.reasons.append("no forgetting (gate = 1)" if kappa <= 0 else "constant gate: lattice (ALiBi) window")
        return res

    # autocovariance within sequences (each about its own mean: a document-level shift in kappa is
    # non-stationarity, diagnosed below, not long memory), pooled over sequences: (S, K+1)
    K = min(MAX_LAG, T - 1)
    xd = x - x.mean(1, keepdims=True)
    f = np.fft.rfft(xd, 2 * T, axis=1)
    xx = np.fft.irfft(f * np.conj(f), axis=1)[:, : K + 1]                         # sum_t xd_t xd_{t+k}
    nk = (T - np.arange(K + 1)) * 1.0
    g_full = xx.sum(0) / (nk * S)
    rho = g_full / g_full[0]
    cut = renewal.geyer_cut(rho)                                                 # Geyer's initial positive sequence
    tau = 1 + 2 * rho[1:cut].sum()
    g_loo = _loo(xx) / (nk * (S - 1))
    tau_loo = 1 + 2 * (g_loo[:, 1:cut] / g_loo[:, :1]).sum(1)
    res.tau, res.se_tau, res.sigma2_lr = float(tau), float(_jackknife(tau_loo)), float(sigma2 * tau)
    res.se_sigma2_lr = float(_jackknife(v_loo * tau_loo))

    # windows of rows in the second half of each sequence (their walks are in the data)
    r0 = T // 2
    lg_t = torch.from_numpy(-x)
    m_iid = forget.Moments.from_raw(kappa, p2.sum() / n, float(np.mean(x ** 3)))
    usable, v_rows, v_loo_rows, n_lattice = [], [], [], 0
    for e, L in zip(eps_list, Ls):
        W, cens = forget.windows(lg_t, e, dim=1)                                  # (S, T)
        W, cens = W[:, r0:].numpy().astype(np.float64), cens[:, r0:].numpy()
        cf = float(cens.mean())
        s1, s2 = W.sum(1), (W * W).sum(1)
        nr = W.shape[1]
        mean, var = s1.sum() / (nr * S), s2.sum() / (nr * S) - (s1.sum() / (nr * S)) ** 2
        mean_loo = _loo(s1) / (nr * (S - 1))
        var_loo = _loo(s2) / (nr * (S - 1)) - mean_loo ** 2
        res.censored_frac.append(cf)
        res.mean_W.append(float(mean))
        res.se_mean_W.append(float(_jackknife(mean_loo)))
        res.var_W.append(float(var))
        res.se_var_W.append(float(_jackknife(var_loo)))
        res.law_mean_iid.append(renewal.renewal_mean(m_iid, L) - 1)
        res.law_mean_lr.append(renewal.dependent_mean(kappa, sigma2 * tau, L) - 1)
        res.law_var_iid.append(renewal.leading_var(m_iid, L))
        res.law_var_lr.append(renewal.dependent_var(kappa, sigma2 * tau, L))
        # the regime both laws claim: no censoring, L/kappa >= 4 tau, and away from the lattice limit
        # (the smaller of the two predicted variances >= 0.3; below it the expansions break down)
        lattice = sigma2 * min(tau, 1.0) * L / kappa ** 3 < 0.3
        n_lattice += cf == 0.0 and lattice
        if cf == 0.0 and L / kappa >= 4 * max(tau, 1.0) and not lattice:
            usable.append(L)
            v_rows.append(var)
            v_loo_rows.append(var_loo)

    if len(usable) < 3:
        why = f"only {len(usable)} eps uncensored (windows < {r0} tokens) and in the asymptotic regime " \
              f"(L/kappa >= 4 tau = {4 * max(tau, 1):.0f}"
        if n_lattice:
            why += f", sigma^2 L/kappa^3 >= 0.3; {n_lattice} eps are near the lattice (ALiBi) limit"
        res.reasons.append(why + ")")
        return res

    Lu = np.array(usable)
    A = np.stack([Lu, np.ones_like(Lu)], 1)
    slope = np.linalg.lstsq(A, np.array(v_rows), rcond=None)[0][0]
    slope_loo = np.linalg.lstsq(A, np.stack(v_loo_rows, 0), rcond=None)[0][0]    # (S,)
    pred_iid, pred_lr = sigma2 / kappa ** 3, sigma2 * tau / kappa ** 3
    piid_loo = v_loo / k_loo ** 3
    plr_loo = v_loo * tau_loo / k_loo ** 3
    se_slope = float(_jackknife(slope_loo))
    se_d_iid = float(_jackknife(slope_loo - piid_loo))
    se_d_lr = float(_jackknife(slope_loo - plr_loo))
    res.slope, res.slope_se = float(slope), se_slope
    res.slope_ci = [float(slope - z * se_slope), float(slope + z * se_slope)]
    res.pred_slope_iid, res.pred_slope_lr = float(pred_iid), float(pred_lr)
    res.z_iid = float((slope - pred_iid) / se_d_iid) if se_d_iid > 0 else float("inf")
    res.z_lr = float((slope - pred_lr) / se_d_lr) if se_d_lr > 0 else float("inf")

    # a law "holds" only if the test could have seen it fail: the band of the difference must be
    # narrower than half the predicted slope; rejecting both laws needs no such precision
    tight_iid, tight_lr = z * se_d_iid <= 0.5 * pred_iid, z * se_d_lr <= 0.5 * pred_lr
    if abs(res.z_iid) <= z and tight_iid:
        res.verdict = "iid law holds"
    elif abs(res.z_lr) <= z and tight_lr:
        res.verdict = "autocorrelation-adjusted law holds"
    elif abs(res.z_iid) > z and abs(res.z_lr) > z:
        res.verdict = "falsified"
    else:
        res.reasons.append(f"slope too imprecise to test: +-{z * se_d_lr / pred_lr:.0%} of the adjusted prediction")
    res.reasons += _diagnose(x, kappa, sigma2, tau, kurt, Lu, res)
    return res


def _diagnose(x, kappa, sigma2, tau, kurt, Lu, res):
    """Why a law may fail here: each reason is a measured property, reported with its number."""
    S, T = x.shape
    why = []
    # documents: per-sequence kappa spread against the spread a stationary process would give
    ks = x.mean(1)
    expected = sigma2 * tau / T
    ratio = ks.var(ddof=1) / expected
    if ratio > stats.chi2.isf(1e-3, S - 1) / (S - 1):
        why.append(f"non-stationary across documents (per-sequence kappa spread {ratio:.1f}x a stationary one)")
    # positions: first half against second half
    a, b = x[:, : T // 2].mean(), x[:, T // 2:].mean()
    se = math.sqrt(2 * sigma2 * tau / (S * T / 2))
    if abs(a - b) > 4 * se:
        why.append(f"non-stationary across positions (kappa {a:.4f} first half vs {b:.4f} second)")
    if kurt > 20:
        why.append(f"heavy-tailed increments (excess kurtosis {kurt:.0f})")
    n_cens = sum(c > 0 for c in res.censored_frac)
    if n_cens:
        why.append(f"{n_cens} of {len(res.censored_frac)} eps censored (excluded)")
    return why


# ----------------------------------------------------------------------------- the model


def capture(model, tokens):
    """Log-gate traces and the attention input of every layer, in one forward pass.

    tokens (S, T) int64. Returns (traces {layer: (S, T, H) float32}, inputs {layer: (S, T, d) float32}).
    """
    import fox_attention as fa
    inputs, handles = {}, []
    for l, blk in enumerate(model.blocks):
        handles.append(blk.attn.register_forward_pre_hook(
            lambda mod, args, l=l: inputs.__setitem__(l, args[0].detach().float())))
    try:
        _, cache = fa.run_with_cache(model, tokens, names_filter=lambda n: n.endswith("hook_log_fgate"))
    finally:
        for h in handles:
            h.remove()
    traces = {l: cache[f"blocks.{l}.attn.hook_log_fgate"] for l in range(len(model.blocks))}
    return traces, inputs


def _rows(T):
    """Query rows whose windows are reported: 256 evenly spaced in the second half of the sequence."""
    return torch.arange(T // 2, T, max(1, T // 256))


def _decay_window(r, lg, eps, rows):
    """Mean decay window of `rows` of traces lg (S, T) into r; censored rows enter with their lower
    bound, so with censoring the mean is a lower bound (r.decay_window_censored says how often)."""
    W, cens = forget.windows(lg, eps, dim=1)                                      # (S, T)
    r.mass_eps = eps
    r.decay_window_mean = float(W[:, rows].mean())
    r.decay_window_censored = float(cens[:, rows].mean())


@torch.no_grad()
def mass_windows(attn, x, eps, rows):
    """Attention-mass window per head: smallest d with sum_{j=i-d..i} A_ij >= 1 - eps, for query rows
    `rows` (R,) of x (S, T, d). Returns (S, R, H) int64. Uses the layer's own projections and gates."""
    S, T, _ = x.shape
    H, D = attn.num_heads, attn.head_dim
    q = attn.q_proj(x).view(S, T, H, D)[:, rows].transpose(1, 2)                  # (S, H, R, D)
    k = attn.k_proj(x).view(S, T, H, D).transpose(1, 2)                            # (S, H, T, D)
    c = cum_log_gate(attn.log_fgate(x))                                            # (S, H, T) float64
    logits = fox_logits(q, k, c[:, :, rows], c, attn.scale, q_pos=rows, dtype=torch.float64)
    A = torch.softmax(logits, -1)                                                   # (S, H, R, T)
    # suffix mass suf_j = sum_{j' >= j} A_ij' is the mass within distance i - j; the window is i - j*,
    # j* the largest j with suf_j >= 1 - eps (suf_0 = 1, and suf_j = 0 past the query)
    suf = A.flip(-1).cumsum(-1).flip(-1)
    jstar = (suf >= 1 - eps).sum(-1) - 1                                           # (S, H, R)
    d = rows[None, None, :] - jstar
    return d.transpose(1, 2)


def analyse_model(checkpoint=None, n_seq=32, seq_len=2048, eps_list=EPS_SCAN, mass_eps=1e-3,
                  device="cpu", progress=True, save_traces=None):
    """Run the per-head analysis on a checkpoint's held-out text. Returns (results, info).
    save_traces: optional .npz path for the captured log-gate traces and their metadata."""
    import fox_attention as fa
    from tqdm import tqdm
    import outputs
    t0 = time.perf_counter()
    path = checkpoint or DEFAULT_CHECKPOINT
    if save_traces:                             # before the capture, not after it
        outputs.check_writable(save_traces, force=True, what="save_traces")
    model, meta = load_model(path, device=device)
    tokens, spans = data.heldout_tokens(n_seq=n_seq, seq_len=seq_len)
    # capture a few sequences at a time (rows are independent in eval mode): same traces, a progress bar
    # on the longest step, and less peak memory
    per = 4
    traces, inputs = {}, {}
    for s0 in tqdm(range(0, n_seq, per), desc="capture", unit=f"x{per} seq", disable=not progress, file=sys.stderr):
        tr, inp = capture(model, tokens[s0:s0 + per].to(device))
        for l in tr:
            traces.setdefault(l, []).append(tr[l])
            inputs.setdefault(l, []).append(inp[l])
    traces = {l: torch.cat(v, 0) for l, v in traces.items()}                         # (S, T, H) per layer
    inputs = {l: torch.cat(v, 0) for l, v in inputs.items()}                         # (S, T, d) per layer
    t_capture = time.perf_counter() - t0
    if save_traces:
        fa.save_trace(save_traces, {f"blocks.{l}.attn.hook_log_fgate": t for l, t in traces.items()},
                      dict(model=meta.get("name", path), checkpoint=path, spans=spans, eps=list(eps_list),
                           heads=model.cfg.n_heads, seq_len=seq_len))
    H = model.cfg.n_heads
    n_heads = len(traces) * H
    z = critical_z(n_heads, n_seq)              # Bonferroni over the heads analysed (module docstring)
    rows = _rows(seq_len)
    results = []
    bar = tqdm(total=n_heads, desc="heads", disable=not progress, file=sys.stderr)
    for l, tr in traces.items():
        lg = tr.cpu().numpy()                                                        # (S, T, H)
        mw = mass_windows(model.blocks[l].attn, inputs[l].cpu(), mass_eps, rows) if not model.cfg.fixed_gate else None
        for h in range(H):
            r = analyse_head(lg[:, :, h], eps_list, z=z, layer=l, head=h, n_heads=n_heads)
            _decay_window(r, lg[:, :, h], mass_eps, rows.numpy())
            if mw is not None:
                r.mass_window_mean = float(mw[:, :, h].double().mean())
            results.append(r)
            bar.update()
    bar.close()
    info = dict(checkpoint=path, model=meta.get("name", "fox_shakespeare"), n_seq=n_seq, seq_len=seq_len,
                spans=spans, z=z, capture_s=t_capture, total_s=time.perf_counter() - t0,
                val_bpc=meta.get("val_bpc"), rows="second half of each sequence")
    return results, info


DEFAULT_CHECKPOINT = outputs.repo_path("checkpoints/fox_shakespeare.pt")   # any cwd, installed or not


def print_table(results, info):
    print(f"Per-head window laws: {info['checkpoint']}, {info['n_seq']} held-out sequences x {info['seq_len']} "
          f"tokens; windows W = N - 1 of rows in each sequence's second half.\nslope: Var[W] against L = ln(1/eps) "
          f"over uncensored eps with L/kappa >= 4 tau, CI = +-{info['z']:.2f} jackknife SE (t, Bonferroni 95% over heads); "
          f"iid / LR: sigma^2/kappa^3 and sigma_LR^2/kappa^3.")
    hdr = (f"{'L.H':>4s} {'kappa':>8s} {'sigma2':>8s} {'tau':>10s} {'slope [CI]':>22s} {'iid':>8s} {'LR':>8s} "
           f"{'W_dec':>6s} {'W_mass':>6s}  verdict")
    print(hdr)
    print("-" * (len(hdr) + 30))
    for r in results:
        ci = f"{r.slope:7.2f} [{r.slope_ci[0]:.2f},{r.slope_ci[1]:.2f}]" if math.isfinite(r.slope) else "-"
        wdec = (">" if r.decay_window_censored > 0 else "") + f"{r.decay_window_mean:.0f}"
        print(f"{r.layer:>2d}.{r.head:<1d} {r.kappa:8.4f} {r.sigma2:8.4f} {r.tau:5.2f}±{r.se_tau:<4.2f} {ci:>22s} "
              f"{r.pred_slope_iid:8.2f} {r.pred_slope_lr:8.2f} {wdec:>6s} {r.mass_window_mean:6.0f}  "
              f"{r.verdict}" + (f" ({'; '.join(r.reasons)})" if r.reasons else ""))
    counts = {}
    for r in results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    print("summary: " + ", ".join(f"{v}: {c}" for v, c in counts.items())
          + f"; W_dec / W_mass: mean decay / attention-mass window at eps = {results[0].mass_eps:g}"
          + " ('>': some windows reach the sequence start, a lower bound)"
          + f"; capture {info['capture_s']:.1f} s, total {info['total_s']:.1f} s")


def to_json(results, info):
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, list):
            return [clean(u) for u in v]
        return v
    return dict(info=info, heads=[{k: clean(v) for k, v in asdict(r).items()} for r in results])


def analyse_traces(path, eps_list=EPS_SCAN, mass_eps=1e-3):
    """Per-head analysis of traces saved with fox_attention.save_trace (any model's gates): each
    (S, T, H) entry is one layer. No attention-mass windows (they need the model). Returns (results, info)."""
    import fox_attention as fa
    t0 = time.perf_counter()
    traces, meta = load_traces_checked(path)
    S = next(iter(traces.values())).shape[0]
    n_heads = sum(t.shape[2] for t in traces.values())
    z = critical_z(n_heads, S)                  # Bonferroni over the heads analysed (module docstring)
    results = []
    for l, (name, tr) in enumerate(traces.items()):
        for h in range(tr.shape[2]):
            r = analyse_head(tr[:, :, h], eps_list, z=z, layer=l, head=h, n_heads=n_heads)
            _decay_window(r, tr[:, :, h], mass_eps, _rows(tr.shape[1]).numpy())
            results.append(r)
    info = dict(checkpoint=path, model=meta.get("model", "?"), n_seq=S, seq_len=next(iter(traces.values())).shape[1],
                spans=meta.get("spans"), z=z, capture_s=0.0, total_s=time.perf_counter() - t0, layers=list(traces))
    return results, info


MIN_TRACE_LEN = 16


def load_traces_checked(path):
    """fox_attention.load_trace plus the layout checks the analysis needs: every trace (S, T, H) with
    S >= 3 sequences and T >= max(S, H, 16) tokens, the same S and T in every layer. A (B, H, T) array
    saved as if it were (B, T, H) is caught here (it reads as a few tokens and many heads) unless the
    metadata's 'heads' already rejected it in load_trace. Raises ValueError naming the layout."""
    import fox_attention as fa
    traces, meta = fa.load_trace(path)
    shapes = {name: t.shape for name, t in traces.items()}
    for name, (S, T, H) in shapes.items():
        if T < H or T < MIN_TRACE_LEN or T < S:
            raise ValueError(f"{path}: trace '{name}' read as (B, T, H) = ({S}, {T}, {H}): {S} sequences x {T} "
                             f"tokens, {H} heads; traces must be (B, T, H) with T >= max(B, H, {MIN_TRACE_LEN}): "
                             "a (B, H, T) array was probably saved as is (transpose it to (B, T, H))")
        if S < 3:
            raise ValueError(f"{path}: trace '{name}' holds {S} sequences; the jackknife needs at least 3")
    if len({s[:2] for s in shapes.values()}) > 1:
        raise ValueError(f"{path}: layers disagree in (sequences, tokens): {shapes}")
    return traces, meta


def check(args):
    """Check the analysis inputs before any work (ValueError naming the argument): the trace file loads
    with a usable layout, or the checkpoint loads and the corpus holds the held-out windows."""
    if args.traces:
        load_traces_checked(args.traces)
        return
    try:
        load_model(args.checkpoint or DEFAULT_CHECKPOINT)
    except (FileNotFoundError, ValueError) as exc:
        raise ValueError(f"--checkpoint: {exc}") from None
    try:
        data.heldout_tokens(n_seq=args.n_seq, seq_len=args.seq_len)
    except ValueError as exc:
        raise ValueError(f"--n-seq {args.n_seq} x --seq-len {args.seq_len}: {exc}") from None


def main(args):
    """Entry point used by `python forget.py` (args from forget.main, already checked there)."""
    import outputs
    if args.traces:
        results, info = analyse_traces(args.traces, mass_eps=args.eps)
    else:
        results, info = analyse_model(args.checkpoint, n_seq=args.n_seq, seq_len=args.seq_len, mass_eps=args.eps,
                                      device=args.device, progress=not args.no_progress, save_traces=args.save_traces)
    print_table(results, info)
    if args.json:
        outputs.write_json(args.json, to_json(results, info))


if __name__ == "__main__":
    import outputs
    sys.exit(outputs.describe(__doc__))
