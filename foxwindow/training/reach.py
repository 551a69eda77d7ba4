"""How far each attention kind reaches: the predicted window, the gradient-attribution window and passkey retrieval.

    python reach.py                                  # all kinds, default budget, writes runs/reach-<timestamp>/
    python reach.py --kinds fox swa --steps 200 --out out/reach     # reach.json, reach.png, README.md there
    python reach.py --out results/kinds --force      # regenerate the shipped results on purpose (1044 s)

For each kind the same small byte-level LM (attention_kinds.build_model) is trained on the same budget
on a mixture: every step has a batch of Shakespeare windows (next-byte loss on every position) and a
batch of passkey examples (loss on the key digits only). A passkey example is filler text (Shakespeare)
(digits blanked out) with "#" + a random digit key hidden at a chosen depth and "#" again at the
end; the model must continue with the key. Depth d is the distance from the final "#" (the query) back to the first key
digit, which is also the distance from each later answer position to its digit.

Windows are distances (W, as in forget.py). Predicted window per layer at decay threshold eps:
    fox    first-passage law of the trained gates (increments of the held-out gates taken as iid,
           exact.exact_first_passage): mean W per head, the layer's largest head
    alibi  floor(L / m_h), L = ln(1/eps), the smallest slope's head
    swa    w - 1 (hard)
    bswa   block*mem + p for a query at offset p in its block: block*mem .. block*(mem+1) - 1 (hard)
    softmax, fam  none (unbounded: fam's feedback memory carries any past block forward)
Layers compose: the model bound is the sum over layers (n_layers (w - 1) for swa; for bswa, a query at
offset p reaches p + n_layers*mem*block). Soft windows (fox, alibi) bound where the decay passes eps,
not where attention stops.

Attribution window: for a query position i of held-out text, a_d = || grad_e(i-d) * e(i-d) ||_2, the
gradient-times-input norm of the input embedding at distance d, with respect to the log-probability
the model gives its own top prediction at i; the window is the smallest d whose prefix sum holds
1 - eps of sum_d a_d. Averaged over rows (and reported per row).
"""
import json
import math
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from foxwindow import outputs, safety
from foxwindow.laws import exact, gates, renewal
from foxwindow.models import kinds as ak
from foxwindow.models.traces import capture_gates
from foxwindow.training import data, train

__all__ = ["DEFAULT_KINDS", "MARK", "fox_gate_windows", "predicted_window", "attribution_profile",
           "attribution_window", "passkey_batch", "passkey_loss", "passkey_accuracy", "passkey_reach", "run_kind",
           "fmt_window", "print_table", "plot", "write_readme", "OUT_FILES", "finish", "check_args", "check_out",
           "readme_notes", "read_result", "main"]

DEFAULT_KINDS = {"softmax": {}, "fox": {}, "alibi": {}, "swa": {"w": 32}, "bswa": {"block": 32, "mem": 1},
                 "fam": {"block": 32, "mem": 1, "fam_len": 8, "state_passing": 0.5}}
MARK = ord("#")          # absent from the corpus, so it only ever means "key follows"

# ----------------------------------------------------------------------------- predicted windows


@torch.no_grad()
def fox_gate_windows(model, tokens, eps):
    """Per layer, per head: mean eps-window of the first-passage law of the held-out gates (iid
    increments with their empirical law) and the median per-query window of the trace itself.
    tokens (S, T) int64. Returns {"law_mean": [[W per head] per layer], "trace_median": [...],
    "censored_frac": [...]}."""
    captured = capture_gates(model, tokens)
    out = {"law_mean": [], "trace_median": [], "censored_frac": []}
    for li in range(len(model.blocks)):
        lg = captured[f"blocks.{li}.attn.attention.hook_log_fgate"].double().numpy()     # (S, T, H)
        law, med, cens = [], [], []
        for h in range(lg.shape[2]):
            fp = exact.exact_first_passage(gates.EmpiricalGate(lg[:, :, h]), eps=eps)
            law.append(float(fp.mean))
            w, c = gates.windows(lg[:, :, h], eps=eps, dim=-1)
            med.append(float(np.median(w)))
            cens.append(float(c.mean()))
        out["law_mean"].append(law)
        out["trace_median"].append(med)
        out["censored_frac"].append(cens)
    return out


def predicted_window(kind, params, model, n_layers, eps, query_pos, gate_tokens=None):
    """{"per_layer": window or [lo, hi] or None, "model": window for a query at query_pos or None, "note", ...}."""
    if kind == "swa":
        return {"per_layer": params["w"] - 1, "model": n_layers * (params["w"] - 1), "note": "hard"}
    if kind == "bswa":
        b, m = params["block"], params["mem"]
        return {"per_layer": [b * m, b * (m + 1) - 1], "model": query_pos % b + n_layers * m * b,
                "note": f"hard; query at offset {query_pos % b} in its block"}
    if kind == "alibi":
        slopes = model.blocks[0].attn.attention.slopes.tolist()
        per_head = [renewal.alibi_window(m, eps) for m in slopes]
        return {"per_layer": max(per_head), "model": n_layers * max(per_head), "per_head": per_head,
                "note": f"soft, decay {eps:g}"}
    if kind == "fox":
        g = fox_gate_windows(model, gate_tokens, eps)
        per_layer = [max(w) for w in g["law_mean"]]
        return {"per_layer": [round(w, 1) for w in per_layer], "model": round(sum(per_layer), 1), **g,
                "note": f"soft, decay {eps:g}; first-passage law mean, largest head"}
    return {"per_layer": None, "model": None, "note": "unbounded"}


# ----------------------------------------------------------------------------- attribution window


def attribution_profile(model, tokens, positions):
    """Gradient-times-input attribution by distance. tokens (R, T) int64; positions: query indices.
    Returns (R, P, T) float64: [r, p, d] = || grad * e ||_2 at input i_p - d (zero for d > i_p), the
    gradient of log p(top prediction at i_p) with respect to the input embeddings."""
    was = model.training
    model.eval()
    R, T = tokens.shape
    out = torch.zeros(R, len(positions), T, dtype=torch.float64)
    try:
        for pi, i in enumerate(positions):
            if not 0 <= i < T:
                raise ValueError(f"position {i} outside [0, {T})")
            e = model.embed(tokens).detach().requires_grad_(True)                  # (R, T, d)
            logits = model.head(model.forward_embeddings(e))                        # (R, T, V)
            lp = F.log_softmax(logits[:, i], -1)
            top = lp.detach().argmax(-1)
            # rows are independent, so one backward of the sum gives each row its own gradient
            lp.gather(1, top[:, None]).sum().backward()
            a = (e.grad * e.detach()).norm(dim=-1).double()                         # (R, T)
            out[:, pi, :i + 1] = a[:, :i + 1].flip(-1)                              # distance d = i - j
    finally:
        model.train(was)
    return out


def attribution_window(profile, eps):
    """Smallest d with sum_{d' <= d} a_d' >= (1 - eps) sum_d a_d, over the last axis. Returns int64."""
    cs = torch.as_tensor(profile, dtype=torch.float64).cumsum(-1)
    return (cs < (1 - eps) * cs[..., -1:]).sum(-1)


# ----------------------------------------------------------------------------- passkey task


def passkey_batch(stream, n, T, depths, key_len, gen):
    """n passkey examples of T + 1 bytes (inputs [:, :-1], targets [:, 1:]).
    stream: uint8 filler text; depths (n,) ints in [key_len, T - key_len - 1].
    Returns (seq (n, T + 1) int64, keys (n, key_len) int64 digit bytes, qpos int: index of the final '#')."""
    qpos = T - key_len
    starts = torch.randint(0, len(stream) - T - 2, (n,), generator=gen).tolist()
    seq = torch.stack([stream[s:s + T + 1] for s in starts]).long()
    # digits are rare in the corpus (about 1 byte in 6500); removing them makes the key the only number
    seq = seq.masked_fill((seq >= ord("0")) & (seq <= ord("9")), ord(" "))
    keys = torch.randint(0, 10, (n, key_len), generator=gen) + ord("0")
    for r, d in enumerate(depths):
        d = int(d)
        if not key_len <= d <= T - key_len - 1:
            raise ValueError(f"depth {d} outside [{key_len}, {T - key_len - 1}] for context {T}, key length {key_len}")
        h = qpos - d - 1                                   # the hidden '#'; its digits start at qpos - d
        seq[r, h] = MARK
        seq[r, h + 1:h + 1 + key_len] = keys[r]
        seq[r, qpos] = MARK
        seq[r, qpos + 1:] = keys[r]
    return seq, keys, qpos


def passkey_loss(model, seq, qpos, key_len):
    """Cross-entropy on the key digits only: inputs at qpos .. qpos + key_len - 1 predict the key."""
    logits = model(seq[:, :-1])
    ans = logits[:, qpos:qpos + key_len]
    return F.cross_entropy(ans.reshape(-1, ans.size(-1)), seq[:, qpos + 1:qpos + 1 + key_len].reshape(-1)), ans


@torch.no_grad()
def passkey_accuracy(model, stream, T, depths, key_len, n_per_depth, seed, batch=32):
    """Exact-match accuracy (every digit the argmax given the true previous digits, i.e. greedy decoding)
    and per-digit accuracy at each depth. Returns (acc [len(depths)], digit_acc [len(depths)])."""
    was = model.training
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    acc, dacc = [], []
    for d in depths:
        hit, dig, n = 0, 0, 0
        while n < n_per_depth:
            m = min(batch, n_per_depth - n)
            seq, keys, qpos = passkey_batch(stream, m, T, [d] * m, key_len, gen)
            _, ans = passkey_loss(model, seq, qpos, key_len)
            ok = ans.argmax(-1) == keys                                            # (m, key_len)
            hit += ok.all(-1).sum().item()
            dig += ok.float().mean(-1).sum().item()
            n += m
        acc.append(hit / n)
        dacc.append(dig / n)
    model.train(was)
    return acc, dacc


def passkey_reach(depths, acc, level=0.5, contiguous=False):
    """Largest depth with accuracy >= level (None if none). contiguous=True: the largest depth d such that
    every tested depth <= d reaches the level (robust to a lucky far depth)."""
    if contiguous:
        best = None
        for d, a in sorted(zip(depths, acc)):
            if a < level:
                break
            best = d
        return best
    ok = [d for d, a in zip(depths, acc) if a >= level]
    return max(ok) if ok else None


# ----------------------------------------------------------------------------- one kind


def run_kind(kind, params, args, text_stream, val_text):
    """Train the LM around `kind` (params) on the text + passkey mixture and measure it. Returns the result dict."""
    cfg = train.train_config(args, batch=args.text_batch + args.key_batch, log_every=0)
    torch.manual_seed(cfg.seed)
    model = ak.build_model(kind, n_layers=args.n_layers, d_model=args.d_model, n_heads=args.n_heads,
                           context=cfg.context, **params)
    n_params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(cfg.seed)        # same batches and keys for every kind
    T, K = cfg.context, args.key_len
    lo, hi = K, T - K - 1

    def step_loss(step):
        lm = pk = torch.zeros(())
        if args.text_batch:
            x, y = data.get_batch(text_stream, args.text_batch, T, gen)
            _, lm = model(x, y)
        if args.key_batch:
            depths = torch.randint(lo, hi + 1, (args.key_batch,), generator=gen).tolist()
            seq, _, qpos = passkey_batch(text_stream, args.key_batch, T, depths, K, gen)
            pk, _ = passkey_loss(model, seq, qpos, K)
        return lm + pk, {"lm": lm.item(), "key": pk.item()}

    hist, wall = train.train_loop(model, cfg, step_loss, desc=kind)
    model.eval()
    bpc, _ = train.evaluate_bpc(model, T, n_seq=cfg.eval_seqs)
    acc, dacc = passkey_accuracy(model, val_text, T, args.depths, K, args.n_eval, args.seed + 1)
    toks, _ = data.heldout_tokens(n_seq=args.attr_rows, seq_len=T)
    pos = [T - 1]
    prof = attribution_profile(model, toks, pos)
    aw = attribution_window(prof, args.attr_eps)[:, 0]
    pred = predicted_window(kind, params, model, args.n_layers, args.eps, T - 1, gate_tokens=toks)
    mean_prof = (prof[:, 0] / prof[:, 0].sum(-1, keepdim=True)).mean(0)
    return {
        "kind": kind, "params": params, "n_params": n_params, "train_wall_s": round(wall, 1),
        "final_lm_loss": round(float(np.mean([h["lm"] for h in hist[-20:]])), 4),
        "final_key_loss": round(float(np.mean([h["key"] for h in hist[-20:]])), 4),
        "val_bpc": round(bpc, 4),
        "predicted": pred,
        "attribution": {"query_pos": pos, "eps": args.attr_eps, "rows": args.attr_rows,
                        "window_mean": round(aw.double().mean().item(), 1),
                        "window_sd": round(aw.double().std().item(), 1),
                        "window_median": float(aw.double().median().item()), "per_row": aw.tolist(),
                        "window_of_mean_profile": int(attribution_window(mean_prof, args.attr_eps)),
                        "mean_profile": [round(x, 6) for x in mean_prof.tolist()]},
        "passkey": {"depths": args.depths, "accuracy": acc, "digit_accuracy": [round(x, 4) for x in dacc],
                    "n_per_depth": args.n_eval, "reach": passkey_reach(args.depths, acc),
                    "reach_contiguous": passkey_reach(args.depths, acc, contiguous=True)},
    }


# ----------------------------------------------------------------------------- output


def fmt_window(w):
    if w is None:
        return "none"
    if isinstance(w, list) and len(w) == 2 and all(isinstance(x, int) for x in w):
        return f"{w[0]}-{w[1]}"
    if isinstance(w, list):
        return "/".join(f"{x:g}" for x in w)
    return f"{w:g}"


def _dash(x):
    """A missing value printed as a dash."""
    return "-" if x is None else x


def print_table(results, context):
    rows = []
    for r in results:
        p = r["predicted"]
        m = p["model"]
        model_w = "none" if m is None else (f"{m:g}" + (" (>T)" if m >= context else ""))
        a = r["attribution"]
        pk = r["passkey"]
        rows.append([r["kind"], fmt_window(p["per_layer"]), model_w, f"{a['window_mean']:.1f} +- {a['window_sd']:.1f}",
                     _dash(pk["reach"]), _dash(pk["reach_contiguous"]), f"{r['final_key_loss']:.2f}",
                     f"{r['val_bpc']:.4f}", f"{r['train_wall_s']:.0f}"])
    hdr = ["kind", "predicted/layer", "predicted model", "attribution", "passkey reach", "contiguous reach",
           "key loss", "val bpc", "train s"]
    print(train.table(rows, hdr))
    return rows, hdr


def plot(results, path, context):
    import matplotlib  # matplotlib: heavy, only when plotting
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: heavy, only when plotting
    fig, ax = plt.subplots(figsize=(8, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["o-", "s--", "^-.", "v:", "D-", "P--", "X-."]
    for n, (c, r) in enumerate(zip(colors, results)):
        pk = r["passkey"]
        reach = "-" if pk["reach"] is None else pk["reach"]
        # identical curves (kinds that learned nothing answer alike) would hide each other: jitter x a little
        x = [d + (n - len(results) / 2) * 0.8 for d in pk["depths"]]
        ax.plot(x, pk["accuracy"], styles[n % len(styles)], color=c, ms=5, alpha=0.85,
                label=f"{r['kind']} (reach {reach}, key loss {r['final_key_loss']:.2f})")
        m = r["predicted"]["model"]
        if m is not None and m < context:
            ax.axvline(m, color=c, ls="--", lw=1)
        elif m is not None:
            ax.annotate(f"{r['kind']}: {m:g} >", xy=(context, 0.02 + 0.06 * results.index(r)), color=c,
                        ha="right", fontsize=8)
    ax.axhline(0.5, color="gray", lw=0.8, ls=":")
    ax.axhline(0.1, color="gray", lw=0.6, ls="-", alpha=0.4)
    ax.annotate("chance 0.1", xy=(context * 0.6, 0.03), color="gray", fontsize=7)
    ax.set_xlabel("passkey depth (bytes from the query back to the key)")
    ax.set_ylabel("exact-match accuracy")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlim(0, context)
    ax.set_title("Passkey accuracy vs depth; dashed: each kind's predicted model window")
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=120)
    plt.close(fig)


def write_readme(path, info, rows, hdr, fig_name, json_name, notes=""):
    a = info["args"]
    kinds = ", ".join(f"{r['kind']} {r['params']}" if r["params"] else r["kind"] for r in info["results"])
    if a["text_batch"]:
        data = (f"per step {a['text_batch']} Shakespeare windows (next-byte loss everywhere) plus {a['key_batch']} "
                f"passkey examples (loss on the {a['key_len']} key digit(s) only)")
    else:
        data = (f"passkey examples only, {a['key_batch']} per step (loss on the {a['key_len']} key digit(s)); the "
                "models never see a next-byte loss, so val bpc and the attribution window describe models not "
                "trained on text")
    md = ["# Reach of attention kinds", "",
          f"Made by `python reach.py {info['argv']}` in {info['wall_s']:.0f} s on {info['device']} "
          f"(torch {info['torch']}, seed {a['seed']}).", "",
          f"Each kind ({kinds}) wraps the same byte-level LM: {a['n_layers']} layers, d_model {a['d_model']}, "
          f"{a['n_heads']} heads, no positional embedding, context {a['context']}. "
          f"Every kind trains {a['steps']} steps "
          f"(AdamW, lr {a['lr']}, warmup {a['warmup']}, cosine) on the same batches: {data}. Passkey depth is "
          "uniform over the context; filler is training text with digits blanked.", "",
          f"- predicted window: per layer and for the model (layers add up), decay threshold eps = {a['eps']:g}; "
          "fox from the first-passage law of its trained gates on held-out text (mean W, largest head); "
          "\"(>T)\" marks windows beyond the context; bswa's model value is for the query position used "
          "(the last of the context).",
          f"- attribution: gradient-times-input window at eps = {a['attr_eps']:g} for the last position of "
          f"{a['attr_rows']} held-out windows, mean +- sd over rows.",
          f"- passkey reach: largest tested depth with exact-match accuracy >= 0.5 ({a['n_eval']} held-out examples "
          "per depth; filler from held-out works); contiguous reach: largest depth such that every smaller tested "
          "depth also reaches 0.5; \"-\" if none. Tested depths: " + ", ".join(map(str, a["depths"])) + ".",
          "- key loss: mean passkey loss (nats) over the last 20 training steps; ln 10 = 2.30 is chance, i.e. the "
          "kind did not learn retrieval at all within the budget, and its passkey reach then says nothing about "
          "its window.",
          f"- val bpc: bits per byte on {a['eval_seqs']} held-out windows (train.evaluate_bpc).", "",
          "| " + " | ".join(hdr) + " |", "| " + " | ".join("---" for _ in hdr) + " |"]
    md += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    if notes:
        md += ["", notes.strip()]
    md += ["", f"Figure: `{fig_name}`. All numbers, per-depth accuracies, per-head windows and attribution profiles: "
           f"`{json_name}`.", ""]
    outputs.write_text(path, "\n".join(md))


OUT_FILES = ("reach.json", "reach.png", "README.md")


def finish(info, args):
    """Table, JSON, figure and README from the collected results, into the folder args.out (checked
    writable before the work)."""
    for r in info["results"]:
        pk = r["passkey"]
        pk["reach"] = passkey_reach(pk["depths"], pk["accuracy"])
        pk["reach_contiguous"] = passkey_reach(pk["depths"], pk["accuracy"], contiguous=True)
    rows, hdr = print_table(info["results"], info["args"]["context"])
    js, fig, readme = (os.path.join(args.out, f) for f in OUT_FILES)
    notes = getattr(args, "kept_notes", "")
    if args.notes:
        with open(args.notes) as fh:
            notes = fh.read()
    elif notes:
        print(f"kept the notes of the README in {args.out} (pass --notes FILE to replace them)")
    # all three rendered to temporary files first, then renamed together: an interruption leaves the
    # folder's previous set, never a new figure beside an old JSON
    with outputs.atomic(js) as tj, outputs.atomic(fig) as tf, outputs.atomic(readme) as tr:
        plot(info["results"], tf, info["args"]["context"])
        outputs.write_result(tj, info, "reach")
        write_readme(tr, info, rows, hdr, OUT_FILES[1], OUT_FILES[0], notes)
    print(f"wrote {js}, {fig}, {readme}")


def check_args(a):
    """Every argument checked before any work; UsageError naming the argument."""
    for name in ("n_eval", "key_len"):
        outputs.positive("--" + name.replace("_", "-"), getattr(a, name))
    outputs.positive("--attr-rows", a.attr_rows, lo=2)         # the sd over rows needs two
    for flag, vals in (("--kinds", a.kinds), ("--depths", a.depths)):
        twice = sorted({v for v in vals if vals.count(v) > 1}, key=vals.index)
        if twice:
            raise outputs.UsageError(f"{flag} lists {', '.join(map(str, twice))} more than once; each is "
                                     "run once: drop the repeats")
    for name in ("text_batch", "key_batch"):
        outputs.positive("--" + name.replace("_", "-"), getattr(a, name), lo=0)
    if a.text_batch + a.key_batch == 0:
        raise outputs.UsageError("--text-batch and --key-batch are both 0: nothing to train on")
    train.train_config(a, batch=a.text_batch + a.key_batch, log_every=0)
    train.check_sizes(a)
    outputs.eps_arg("--eps", a.eps)
    outputs.eps_arg("--attr-eps", a.attr_eps)
    if a.context < 2 * a.key_len + 2:
        raise outputs.UsageError(f"--context {a.context} too short for --key-len {a.key_len}")
    bad = [d for d in a.depths if not a.key_len <= d <= a.context - a.key_len - 1]
    if bad:
        raise outputs.UsageError(f"--depths {bad} outside [{a.key_len}, {a.context - a.key_len - 1}] "
                                 f"for --context {a.context} and --key-len {a.key_len}")
    for k in a.kinds:
        try:
            ak.AttentionRegistry.validate(k, **DEFAULT_KINDS.get(k, {}))
        except (KeyError, ValueError, TypeError) as exc:
            raise outputs.UsageError(f"--kinds {k}: {exc}") from None
    train.check_corpus(a.context, a.eval_seqs, extra=((a.attr_rows, "--attr-rows"),))


def check_out(a):
    """The output folder: a fresh runs/reach-<timestamp>/ by default; a given --out must be a folder whose
    reach.json / reach.png / README.md are replaced only with --force."""
    if a.out is None:
        a.out = outputs.run_dir("reach", make=False)
    elif os.path.splitext(a.out)[1].lower() in (".png", ".json", ".pdf", ".md"):
        raise outputs.UsageError(f"--out {a.out}: --out is the output folder (it receives {', '.join(OUT_FILES)}); "
                                 "got a file name")
    a.out = outputs.check_dir(a.out, OUT_FILES, force=a.force, what="--out")
    a.kept_notes = ""
    if a.notes:
        a.notes = outputs.input_file("--notes", a.notes)
        outputs.text_file("--notes", a.notes)                # before the training: a README takes text
    else:       # a README being replaced keeps its hand-written notes (the text between the table and "Figure:")
        a.kept_notes = readme_notes(os.path.join(a.out, "README.md"))


def readme_notes(path):
    """The hand-written notes of a README written by write_readme (the text between the results table and the
    closing "Figure:" line), or "" when the file is absent or holds none."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().split("\n")
    except (OSError, UnicodeDecodeError):
        return ""
    table = [i for i, li in enumerate(lines) if li.startswith("|")]
    fig = [i for i, li in enumerate(lines) if li.startswith("Figure: `")]
    if not table or not fig or fig[-1] < table[-1]:
        return ""
    return "\n".join(lines[table[-1] + 1:fig[-1]]).strip()


REPLOT_LIMIT = 16 << 20         # bytes; a results JSON is tens of kB (results/kinds/reach.json: 29 kB)
REPLOT_DEPTH = 16               # nesting; the results JSON nests 5 deep


def _refuse(name, field, why):
    return outputs.UsageError(f"--replot {safety.shown(name)}: {field} {why}")


def _number(name, field, v, lo=0.0, hi=None, integer=False, above=False):
    """v itself when it is a finite number (an int with integer=True) >= lo (> lo with above) and <= hi."""
    ok = isinstance(v, int if integer else (int, float)) and not isinstance(v, bool)
    try:
        ok = ok and math.isfinite(float(v))
    except OverflowError:                   # an int beyond float64
        ok = False
    ok = ok and (v > lo if above else v >= lo) and (hi is None or v <= hi)
    if not ok:
        want = f"{'an integer' if integer else 'a finite number'} {'>' if above else '>='} {lo:g}"
        raise _refuse(name, field, f"must be {want}{f' and <= {hi:g}' if hi is not None else ''}; got "
                                   f"{safety.shown(repr(v))[:60]}")
    return v


def _walk(name, doc):
    """Every value of the document, without recursion: nesting past REPLOT_DEPTH, NaN / inf and strings with
    control characters (they would reach the README) are refused, the field named."""
    stack = [("the document", doc, 0)]
    while stack:
        where, v, depth = stack.pop()
        if depth > REPLOT_DEPTH:
            raise _refuse(name, where, f"is nested more than {REPLOT_DEPTH} deep; a reach.py result is not")
        if isinstance(v, float) and not math.isfinite(v):
            raise _refuse(name, where, f"is {v}; a result holds finite numbers")
        if isinstance(v, str) and safety.shown(v) != v:
            raise _refuse(name, where, f"holds control characters ({safety.shown(v)[:60]})")
        if isinstance(v, dict):
            stack += [(f"{where}.{k}" if depth else k, u, depth + 1) for k, u in v.items()]
            stack += [(f"{where} key", k, depth + 1) for k in v]
        elif isinstance(v, list):
            stack += [(f"{where}[{i}]", u, depth + 1) for i, u in enumerate(v)]


def _depths(name, field, v, a):
    lo, hi = a["key_len"], a["context"] - a["key_len"] - 1
    if not isinstance(v, list) or not v or len(set(map(repr, v))) != len(v):
        raise _refuse(name, field, "must be a non-empty list of distinct depths")
    return [_number(name, f"{field}[{i}]", d, lo, hi, integer=True) for i, d in enumerate(v)]


def read_result(path, name):
    """The results JSON of an earlier run (--replot), every field the table, figure and README read checked:
    UsageError naming the field."""
    text = outputs.text_file("--replot", path, limit=REPLOT_LIMIT)
    try:
        info = json.loads(text)
    except safety.JSON_ERRORS as exc:
        raise _refuse(name, "the file", f"is not valid JSON ({safety.json_error(exc)})") from None
    if not (isinstance(info, dict) and isinstance(info.get("results"), list) and isinstance(info.get("args"), dict)):
        raise _refuse(name, "the file", "is not a reach.py results JSON (needs 'args' and 'results')")
    if info.get("kind", "reach") != "reach":
        raise _refuse(name, "kind", f"is {safety.shown(repr(info['kind']))[:60]}; a reach.py result's is 'reach'")
    _walk(name, info)
    a = info["args"]
    for old, new in (("layers", "n_layers"), ("heads", "n_heads")):    # results written before the renaming
        if old in a:
            a[new] = a.pop(old)
    need = dict(context=2, seed=0, n_layers=1, d_model=1, n_heads=1, steps=1, warmup=0, text_batch=0, key_batch=0,
                key_len=1, n_eval=1, attr_rows=1, eval_seqs=1)
    for k, lo in need.items():
        _number(name, f"args.{k}", a.get(k), lo, integer=True)
    _number(name, "args.lr", a.get("lr"), 0, above=True)
    for k in ("eps", "attr_eps"):
        _number(name, f"args.{k}", a.get(k), 0, 1, above=True)
    _depths(name, "args.depths", a.get("depths"), a)
    for k in ("argv", "device", "torch"):
        if not isinstance(info.get(k), str):
            raise _refuse(name, k, "must be a string")
    _number(name, "wall_s", info.get("wall_s"))
    if not info["results"]:
        raise _refuse(name, "results", "is empty; nothing to show")
    seen = set()
    for i, r in enumerate(info["results"]):
        at = f"results[{i}]"
        if not isinstance(r, dict):
            raise _refuse(name, at, "must be an object")
        kind = r.get("kind")
        if kind not in ak.AttentionRegistry.names() or kind in seen:
            raise _refuse(name, f"{at}.kind", f"{safety.shown(repr(kind))[:60]} is not one of "
                                             f"{ak.AttentionRegistry.names()} listed once")
        seen.add(kind)
        try:
            if not isinstance(r.get("params"), dict):
                raise ValueError("not an object")
            ak.AttentionRegistry.validate(kind, **r["params"])
        except ValueError as exc:
            raise _refuse(name, f"{at}.params", f"are not {kind}'s parameters ({exc})") from None
        for k in ("final_key_loss", "val_bpc", "train_wall_s"):
            _number(name, f"{at}.{k}", r.get(k))
        parts = [r.get(k) for k in ("predicted", "attribution", "passkey")]
        if not all(isinstance(x, dict) for x in parts):
            raise _refuse(name, at, "needs the objects 'predicted', 'attribution' and 'passkey'")
        pred, attr, pk = parts
        if pred.get("model") is not None:
            _number(name, f"{at}.predicted.model", pred.get("model"))
        per = pred.get("per_layer")
        for j, w in enumerate(per if isinstance(per, list) and per else [] if per is None else [per]):
            _number(name, f"{at}.predicted.per_layer" + (f"[{j}]" if isinstance(per, list) else ""), w)
        for k in ("window_mean", "window_sd"):
            _number(name, f"{at}.attribution.{k}", attr.get(k))
        depths = _depths(name, f"{at}.passkey.depths", pk.get("depths"), a)
        acc = pk.get("accuracy")
        if not isinstance(acc, list) or len(acc) != len(depths):
            raise _refuse(name, f"{at}.passkey.accuracy", f"must be a list of {len(depths)} accuracies, one per depth")
        for j, x in enumerate(acc):
            _number(name, f"{at}.passkey.accuracy[{j}]", x, 0, 1)
    return info


@outputs.scoped
def main(argv=None):
    p = outputs.parser(__doc__.split("\n")[0])
    p.add_argument("--kinds", nargs="+", default=list(DEFAULT_KINDS),
                   help="attention kinds to train, from the registry")
    # the run flags of train.py (per kind), less those this command sets itself
    train.add_train_args(p, skip=("batch", "weight_decay", "device", "log_every"), steps=600, context=256, lr=1e-2,
                         threads=1)
    train.add_size_args(p, d_model=64, n_layers=2, n_heads=4)
    p.add_argument("--text-batch", type=int, default=8, help="Shakespeare windows per step")
    p.add_argument("--key-batch", type=int, default=16, help="passkey examples per step")
    p.add_argument("--key-len", type=int, default=1, help="digits in a passkey")
    p.add_argument("--depths", type=int, nargs="+", default=[4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 254],
                   help="passkey depths tested")
    p.add_argument("--n-eval", type=int, default=64, help="passkey examples per depth")
    p.add_argument("--eps", type=float, default=1e-3, help="decay threshold of the predicted windows")
    p.add_argument("--attr-eps", type=float, default=0.05, help="attribution mass left outside the window")
    p.add_argument("--attr-rows", type=int, default=16, help="held-out rows of the attribution window")
    p.add_argument("--out", default=None,
                   help="output folder for reach.json, reach.png and README.md (default: a fresh "
                        "runs/reach-<timestamp>/); existing files there are replaced only with --force")
    p.add_argument("--notes", default=None, help="a text file appended to the README (observations)")
    p.add_argument("--replot", default=None, metavar="JSON",
                   help="no training: rebuild table, figure and README from a results JSON (written to --out)")
    outputs.add_common(p)
    args = p.parse_args(argv)
    if args.replot:
        # the training and measurement flags have no effect on a replot: refused rather than ignored
        kept = ("replot", "out", "notes", "force", "debug", "break_lock", "help")
        ignored = [act.option_strings[0] for act in p._actions if act.dest not in kept
                   and getattr(args, act.dest, act.default) != act.default]
        if ignored:
            raise outputs.UsageError(f"{' and '.join(ignored)} would be ignored: --replot rebuilds the table, figure "
                                     "and README from the JSON, without training; drop them")
        src = outputs.input_file("--replot", args.replot, note=False)        # rebuilt in place on purpose
        info = read_result(src, args.replot)
        check_out(args)
        return finish(info, args)
    check_args(args)
    check_out(args)
    torch.set_num_threads(args.threads)
    kinds = [(k, ak.AttentionRegistry.validate(k, **DEFAULT_KINDS.get(k, {}))) for k in args.kinds]
    text_stream, val_text = data.train_stream(), data.val_stream()
    t0 = time.time()
    results = [run_kind(k, prm, args, text_stream, val_text) for k, prm in kinds]
    wall = time.time() - t0
    info = {"args": {k: v for k, v in vars(args).items() if k not in ("force", "debug", "break_lock")},
            "argv": " ".join(argv if argv is not None else sys.argv[1:]), "wall_s": round(wall, 1),
            "device": f"CPU ({platform.processor() or platform.machine()}, {args.threads} threads)",
            "torch": torch.__version__, "results": results}
    finish(info, args)


if __name__ == "__main__":
    raise SystemExit(outputs.cli(main))
