"""Past one process: torch.distributed set up from torchrun's environment, for training and gate capture.

    torchrun --nproc_per_node=2 train.py --batch 4 ...        # 2 ranks x 4 windows = the run of batch 8
    torchrun --nproc_per_node=2 forget.py --n-seq 32 ...      # each rank captures 16 sequences, rank 0 analyses

One job: everything that differs between one process and several. Nothing here knows the model, the
data or the laws; train.py, heads.py and fox_attention.py call it in a few lines each.

    setup, teardown, rank, world_size, is_main, barrier     process group from RANK / WORLD_SIZE / LOCAL_RANK
    shard_range, gather_traces, all_mean, any_true,        splitting sequences and putting results back together
    broadcast
    wrap, unwrap, clean_name                               DDP or FSDP2 fully_shard; names as in the plain model
    train_state, model_state, load_train_state             full model (+ optimizer) state of a wrapped model
    rng_states, set_rng_states                             every rank's RNG state, for an exact resume
    main_only                                              rank 0 alone runs a step (a folder name, a write)
                                                           and every rank shares its result or its error
    together                                               every rank runs its checks, all share the outcome
    same_everywhere, tensor_digest                         every rank read the same weights and text as rank 0

The data order of a sharded run is data.ShardedWindows; atomic writes are outputs'. This file imports
only outputs (the bottom layer), so any layer may use it (traces unwraps models with it).

Without torchrun (no WORLD_SIZE in the environment) every function acts as for a single process and
no process group is made, so the same code path runs both ways. The backend follows the device:
NCCL for CUDA, gloo for the CPU.
"""
import atexit
import gc
import hashlib
import os
import socket
import sys
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from foxwindow import outputs

__all__ = ["WRAPPER_PREFIXES", "DistEnv", "launched", "setup", "teardown", "rank", "world_size", "is_main", "barrier",
           "all_mean", "any_true", "broadcast", "shard_range", "gather_traces", "wrap", "unwrap", "clean_name",
           "train_state", "model_state", "rng_states", "set_rng_states", "load_train_state", "main_only",
           "together", "same_everywhere", "tensor_digest"]

# prefixes that wrappers insert into module and parameter names: DDP / DataParallel ("module."),
# torch.compile ("_orig_mod."), FSDP1 ("_fsdp_wrapped_module."), activation checkpointing
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


# ----------------------------------------------------------------------------- process group

@dataclass(frozen=True)
class DistEnv:
    """Where this process stands: rank in [0, world_size), local_rank on its node, the backend
    ('gloo', 'nccl' or None without a process group) and the device its tensors live on."""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: object = None
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self):
        return self.rank == 0


def _env_int(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer; got {v!r}") from None


def launched():
    """True when started by torchrun (or anything else that sets WORLD_SIZE > 1)."""
    return _env_int("WORLD_SIZE", 1) > 1


def _device_for(device, local_rank):
    """cpu -> cpu; cuda / None with CUDA present -> cuda:<local_rank>; cuda:N is kept. A device string
    outputs.device_arg refuses raises its ValueError (UsageError)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(outputs.device_arg("device", device))
    if dev.type == "cuda" and dev.index is None:
        if local_rank >= torch.cuda.device_count():
            raise ValueError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} CUDA devices")
        dev = torch.device("cuda", local_rank)
    return dev


def setup(device=None, backend=None, timeout_s=1800):
    """Join the process group torchrun describes in the environment, once. Returns a DistEnv.

    device: None (CUDA if present, else CPU), 'cpu', 'cuda' (means cuda:LOCAL_RANK) or 'cuda:N'.
    backend: None picks 'nccl' for CUDA and 'gloo' for the CPU; 'gloo' also works with CUDA tensors.
    timeout_s: seconds a collective may wait for the other ranks before failing.
    Without WORLD_SIZE > 1 no process group is made and a single-process DistEnv is returned.
    Raises ValueError on an inconsistent environment, an unknown backend or NCCL without CUDA.
    """
    rank, world, local = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1), _env_int("LOCAL_RANK", 0)
    # with one process RANK is not checked: a launcher may set it (RANK > 0: a process that does not write)
    if world < 1 or (world > 1 and not 0 <= rank < world) or local < 0:
        raise ValueError(f"bad torchrun environment: RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local}")
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number; got {timeout_s!r}")
    if backend not in (None, "gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo', 'nccl' or None; got {backend!r}")
    if world == 1 and not dist.is_initialized():
        # one process: the device as given (any torch device string), no process group
        return DistEnv(device=torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu")))
    dev = _device_for(device, local)
    if backend is None:
        backend = "nccl" if dev.type == "cuda" else "gloo"
    if backend == "nccl" and dev.type != "cuda":
        raise ValueError("backend 'nccl' needs CUDA devices; use 'gloo' on the CPU")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        for k in ("MASTER_ADDR", "MASTER_PORT"):
            if k not in os.environ:
                raise ValueError(f"WORLD_SIZE={world} is set in the environment but {k} is not: start the job "
                                 "with torchrun, or unset WORLD_SIZE to run as one process")
        if "TORCHELASTIC_RUN_ID" not in os.environ and rank == 0:
            # not torchrun (which starts every rank itself): say what is awaited, and for how long
            print(f"waiting up to {timeout_s:g} s for {world - 1} more rank(s) at {os.environ['MASTER_ADDR']}:"
                  f"{os.environ['MASTER_PORT']} (WORLD_SIZE={world} is set in the environment; unset it to run "
                  "as one process)", file=sys.stderr, flush=True)
        # NCCL told its device up front binds the communicator to it (barriers then know their GPU)
        bind = {"device_id": dev} if backend == "nccl" else {}
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s), **bind)
        atexit.register(teardown)   # a clean exit leaves the group (torch warns otherwise)
    return DistEnv(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local,
                   backend=dist.get_backend(), device=dev)


def teardown():
    """Leave the process group (if one was made); safe to call more than once."""
    if dist.is_initialized():
        # A 2-rank gloo job aborted at exit ("terminate called without an active exception", after this ran)
        # about once in six runs here; with both steps below, in none of 40. Wrapped models (DDP's reducer,
        # FSDP2's hooks) sit in reference cycles: free them while the group and the interpreter are alive,
        # not during the interpreter's shutdown; then wait for the other ranks, so none leaves while another
        # still talks to it. The wait is bounded: a rank whose peer died does not hang.
        gc.collect()
        if dist.get_backend() == "gloo":
            try:
                dist.monitored_barrier(timeout=timedelta(seconds=60))
            except RuntimeError:
                pass
        dist.destroy_process_group()


def rank():
    return dist.get_rank() if dist.is_initialized() else 0


def world_size():
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main():
    """True in the process that prints and writes: rank 0 of the process group, or, without one, the
    only process unless a launcher set RANK > 0 in the environment."""
    if dist.is_initialized():
        return dist.get_rank() == 0
    return _env_int("RANK", 0) == 0


def barrier():
    if dist.is_initialized():
        dist.barrier()


def _collective_device():
    # NCCL collectives move CUDA tensors; gloo moves CPU ones
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_mean(value):
    """Mean of a Python float over the ranks (the logged loss of the global batch when every rank
    holds the same number of windows). Single process: the value itself."""
    if not dist.is_initialized():
        return float(value)
    t = torch.tensor([float(value)], dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


def any_true(flag):
    """True on every rank when `flag` is true on any (a stop that every rank must agree on before its next
    collective). Single process: bool(flag)."""
    if not dist.is_initialized():
        return bool(flag)
    t = torch.tensor([1.0 if flag else 0.0], device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def together(fn, what="stopped before any work"):
    """fn() (the checks before any work) on every rank with one outcome for all. Ranks on separate machines see
    their own files, so a check may fail on one rank alone; a rank that stopped there would leave the others
    waiting in their first collective (for the process group's timeout, 30 minutes). Here every rank learns
    every rank's outcome: where fn raised on any rank, the ranks where it raised raise their own error and the
    others a ValueError "rank R (HOST) WHAT: MESSAGE" naming the first rank that failed (what: the words for
    where it failed). Returns fn()'s value. A collective: every rank must call it. Without a process group (one
    process): fn()."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return fn()
    err, out = None, None
    try:
        out = fn()
    except Exception as exc:               # any error: the others must hear of it, or they wait
        err = exc
    said = [None] * dist.get_world_size()
    dist.all_gather_object(said, None if err is None else (socket.gethostname(), _one_line(err)))
    if err is not None:
        raise err
    failed = [(r, x) for r, x in enumerate(said) if x is not None]
    if failed:
        r, (host, msg) = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise ValueError(f"rank {r} ({host}){more} {what}: {msg}")
    return out


def same_everywhere(parts, what):
    """Check that every rank holds what rank 0 holds: parts {name: picklable value} (digests of the files or
    tensors each rank read on its own machine). Where a rank's differ, every rank raises the same ValueError
    naming `what`, the parts that differ and the ranks and hosts. A collective: every rank must call it. One
    process: nothing to compare."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    got = [None] * dist.get_world_size()
    dist.all_gather_object(got, (socket.gethostname(), dict(parts)))
    host0, ref = got[0]
    bad = [f"rank {r} ({host}): {', '.join(k for k in ref if p.get(k) != ref[k])}"
           for r, (host, p) in enumerate(got) if p != ref]
    if bad:
        raise ValueError(f"{what} differ between the ranks ({'; '.join(bad)} differ from rank 0's on {host0}); "
                         "every rank must read the same files")


def tensor_digest(tensors):
    """A digest (hex str) of named tensors {name: tensor} (a state_dict): each one's name, dtype, shape and bytes,
    read on the CPU one tensor at a time, so that it is the same on any device and machine."""
    h = hashlib.sha1()
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _one_line(err):
    """An error as one line: its message's first line, with its kind where the message alone does not say it (a
    built-in error other than ValueError and OSError: a MemoryError has no message, a KeyError's is the key)."""
    msg = str(err).splitlines()[0] if str(err).strip() else ""
    if msg and (isinstance(err, (ValueError, OSError)) or type(err).__module__ != "builtins"):
        return msg                                      # a message meant for the user (ModelError's too)
    return f"{type(err).__name__}: {msg}" if msg else type(err).__name__


def broadcast(obj, src=0):
    """Rank `src`'s picklable `obj` on every rank (e.g. a run folder name made from the time)."""
    if not dist.is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src, device=_collective_device())
    return box[0]


# ----------------------------------------------------------------------------- splitting and gathering

def shard_range(n, rank=None, world=None):
    """The contiguous block [start, stop) of n items this rank owns; blocks follow rank order and
    differ in size by at most one, so concatenating them in rank order restores the items.
    Raises ValueError if n < world (a rank would get nothing to run)."""
    r = (dist.get_rank() if dist.is_initialized() else 0) if rank is None else rank
    w = world_size() if world is None else world
    if not (isinstance(w, int) and w >= 1 and isinstance(r, int) and 0 <= r < w):
        raise ValueError(f"rank must lie in [0, world); got rank {r!r}, world {w!r}")
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n must be a positive int; got {n!r}")
    if n < w:
        raise ValueError(f"{n} items cannot be split over {w} ranks; use at least as many items as ranks")
    q, extra = divmod(n, w)
    start = r * q + min(r, extra)
    return start, start + q + (1 if r < extra else 0)


def gather_traces(traces, dim=0, to_all=False):
    """Concatenate every rank's {name: tensor} along `dim` in rank order.

    traces: dict {name: tensor}, e.g. (S_r, T, H) float32 log gates of this rank's S_r sequences;
    every rank must hold the same names, with shapes that agree outside `dim`. The values travel
    pickled (bit for bit) through torch.distributed's object collectives and come back on the CPU.
    Returns the merged dict on rank 0 (on every rank with to_all=True) and None on the others; a
    single process gets its own dict back (on the CPU). Raises ValueError naming the rank and the
    name that disagree.
    """
    if not isinstance(traces, dict) or not traces:
        raise ValueError("traces must be a non-empty dict {name: tensor}")
    mine = {}
    for k, v in traces.items():
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"trace {k!r} must be a torch.Tensor; got {type(v).__name__}")
        mine[k] = v.detach().cpu()
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return mine
    w = dist.get_world_size()
    parts = [None] * w
    if to_all:
        dist.all_gather_object(parts, mine)
    else:
        dist.gather_object(mine, parts if dist.get_rank() == 0 else None, dst=0)
        if dist.get_rank() != 0:
            return None
    names = list(parts[0])
    out = {}
    for r, p in enumerate(parts):
        if list(p) != names:
            raise ValueError(f"rank {r} captured {sorted(p)[:4]}..., rank 0 {sorted(names)[:4]}...")
    for k in names:
        ref = parts[0][k]
        for r, p in enumerate(parts):
            a = p[k]
            if a.dim() != ref.dim() or a.dtype != ref.dtype or \
                    [s for i, s in enumerate(a.shape) if i != dim % a.dim()] != \
                    [s for i, s in enumerate(ref.shape) if i != dim % ref.dim()]:
                raise ValueError(f"trace {k!r}: rank {r} has {tuple(a.shape)} {a.dtype}, rank 0 "
                                 f"{tuple(ref.shape)} {ref.dtype}; they must agree outside dim {dim}")
        out[k] = torch.cat([p[k] for p in parts], dim=dim)
    return out


def gather_lists(items):
    """Concatenate every rank's list in rank order on rank 0 (pickled through torch.distributed's object
    collectives). Returns the whole list on rank 0 and None on the others; a single process gets its list."""
    items = list(items)
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return items
    parts = [None] * dist.get_world_size()
    dist.gather_object(items, parts if dist.get_rank() == 0 else None, dst=0)
    if dist.get_rank() != 0:
        return None
    return [x for p in parts for x in p]


# ----------------------------------------------------------------------------- model wrapping

def wrap(model, mode="ddp", env=None):
    """Wrap `model` (already on env.device) for data-parallel training.

    mode: 'ddp' (DistributedDataParallel: a full copy per rank, gradients all-reduced), 'fsdp' (FSDP2
    fully_shard: parameters, gradients and optimizer state sharded over the ranks; each entry of
    model.blocks becomes its own shard unit when the model has such a list) or 'none'.
    Without a process group the model is returned as it is (one process needs no wrapper).
    Build the optimizer after wrapping: fully_shard replaces the parameters with sharded ones.
    """
    if mode not in ("ddp", "fsdp", "none"):
        raise ValueError(f"mode must be 'ddp', 'fsdp' or 'none'; got {mode!r}")
    if mode == "none" or not dist.is_initialized():
        return model
    env = env or setup()
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP  # torch.distributed: only under torchrun
        ids = [env.device.index] if env.device.type == "cuda" else None
        return DDP(model, device_ids=ids)
    from torch.distributed.device_mesh import init_device_mesh  # torch.distributed: only under torchrun
    from torch.distributed.fsdp import fully_shard  # torch.distributed: only under torchrun
    mesh = init_device_mesh(env.device.type, (env.world_size,))
    for blk in getattr(model, "blocks", []):
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def unwrap(model):
    """The plain module inside DDP / DataParallel (.module), torch.compile (._orig_mod) and FSDP1
    (.module), repeatedly; its module names are those of the unwrapped model, so hook names such as
    'blocks.0.attn.hook_log_fgate' hold. FSDP2 (fully_shard) wraps nothing and is returned as is;
    its forward still gathers the shards, so every rank must run it."""
    seen = 0
    while seen < 16:
        seen += 1
        if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            model = model.module
            continue
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, torch.nn.Module):
            model = inner
            continue
        if type(model).__name__ == "FullyShardedDataParallel" and isinstance(getattr(model, "module", None),
                                                                              torch.nn.Module):
            model = model.module
            continue
        break
    return model


def clean_name(name):
    """A module or parameter name without the prefixes wrappers insert anywhere in it
    ('module.blocks.0.attn' -> 'blocks.0.attn', '_orig_mod.' and FSDP1's '_fsdp_wrapped_module.' too)."""
    if not isinstance(name, str):
        raise ValueError(f"name must be a string; got {type(name).__name__}")
    parts = (name + ".").split(".")
    keep = [p for p in parts[:-1] if p + "." not in WRAPPER_PREFIXES]
    return ".".join(keep)


# ----------------------------------------------------------------------------- state of a run

def train_state(model, optimizer):
    """(model state, optimizer state) as full, unsharded CPU tensors keyed by the plain model's
    parameter names, for any wrapping (none, DDP, FSDP2, torch.compile). A collective under
    FSDP2: every rank must call it."""
    from torch.distributed.checkpoint.state_dict import (  # torch.distributed: only under torchrun
        StateDictOptions,
        get_state_dict,
    )
    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_state_dict(model, optimizer, options=opts)


def model_state(model):
    """The model's full, unsharded state as CPU tensors keyed by the plain model's parameter names, on
    every rank (no optimizer state: for the final checkpoint and its score). A collective under FSDP2:
    every rank must call it, and each gathers the whole model once."""
    from torch.distributed.checkpoint.state_dict import (  # torch.distributed: only under torchrun
        StateDictOptions,
        get_model_state_dict,
    )
    # cpu_offload=True would leave the full state on rank 0 alone; every rank scores the model
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=False))
    return {k: v.detach().cpu() for k, v in full.items()}


def rng_states():
    """Every rank's torch RNG state (CPU, and CUDA once used), a list in rank order on every rank:
    what dropout draws next. A collective: every rank must call it."""
    mine = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        mine["cuda"] = torch.cuda.get_rng_state()
    if not dist.is_initialized():
        return [mine]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, mine)
    return out


def set_rng_states(states):
    """Restore this rank's entry of a rng_states() list. Returns False, setting nothing, when the list
    came from another number of ranks (then random draws such as dropout masks differ from the
    uninterrupted run)."""
    if not isinstance(states, list) or len(states) != world_size():
        return False
    mine = states[rank()]
    torch.set_rng_state(mine["cpu"])
    if "cuda" in mine and torch.cuda.is_available():
        torch.cuda.set_rng_state(mine["cuda"])
    return True


def load_train_state(model, optimizer, model_state, optim_state):
    """Load full states (as returned by train_state, read on every rank) into a wrapped or plain
    model and its optimizer; each rank keeps its own shard under FSDP2."""
    from torch.distributed.checkpoint.state_dict import (  # torch.distributed: only under torchrun
        StateDictOptions,
        set_state_dict,
    )
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state,
                   options=StateDictOptions(full_state_dict=True))


# ----------------------------------------------------------------------------- rank 0 alone

def main_only(fn):
    """Run fn() on rank 0 alone and share its outcome: every rank returns rank 0's (picklable) result or
    raises its error (the same type where it can be rebuilt from a message, else RuntimeError, naming rank 0),
    so no rank waits for one that failed. Use it for what one process must do for all: choosing a run
    folder, checking and writing files.
    Without a process group: fn() runs in the main process (is_main()) and None is returned elsewhere.
    A collective when a process group exists: every rank must call it.
    """
    if not dist.is_initialized():
        return fn() if is_main() else None
    result, err, mine = None, None, None
    if dist.get_rank() == 0:
        try:
            result = fn()
        except Exception as exc:   # shared with the other ranks below, so none waits forever
            mine, err = exc, (type(exc), str(exc))
    result, err = broadcast((result, err))
    if mine is not None:
        raise mine
    if err is not None:
        kind, msg = err
        try:
            exc = kind(f"on rank 0: {msg}")
        except Exception:
            exc = RuntimeError(f"on rank 0: {kind.__name__}: {msg}")
        raise exc
    return result
