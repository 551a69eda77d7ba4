"""Tests for data.py and train.py: the corpus split, held-out windows, batches, the training loop."""
import math

import pytest
import torch

from foxwindow.models.fox import FoXConfig, FoXLM, load_checkpoint
from foxwindow.training import data, train


def test_heldout_tokens_deterministic():
    t1, s1 = data.heldout_tokens(n_seq=4, seq_len=256)
    t2, s2 = data.heldout_tokens(n_seq=4, seq_len=256)
    assert t1.shape == (4, 256) and t1.dtype == torch.long and torch.equal(t1, t2) and s1 == s2
    texts = dict(data.load_split("val"))
    for row, sp in zip(t1, s1):
        assert bytes(row.tolist()) == texts[sp["file"]][sp["start"]:sp["end"]]
    split = data.split_files()
    assert not set(split["train"]) & set(split["val"]) and {s["file"] for s in s1} <= set(split["val"])
    with pytest.raises(ValueError, match="windows"):
        data.heldout_tokens(n_seq=10, seq_len=10 ** 6)


def test_training_steps_run(tmp_path):
    out = str(tmp_path / "tiny.pt")
    train.main(["--steps", "4", "--context", "64", "--batch", "2", "--d-model", "32", "--n-layers", "1",
                "--n-heads", "2", "--eval-seqs", "2", "--warmup", "1", "--lr", "1e-2", "--out", out,
                "--log-every", "0", "--device", "cpu"])
    m, meta = load_checkpoint(out)
    assert meta["steps"] == 4 and math.isfinite(meta["final_train_loss"]) and math.isfinite(meta["val_bpc"])
    # the same few steps on one fixed batch must lower the loss
    torch.manual_seed(0)
    m = FoXLM(FoXConfig(d_model=32, n_layers=1, n_heads=2, context=64))
    x, y = data.get_batch(data.train_stream(), 2, 64, torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        _, loss = m(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(li) for li in losses) and losses[-1] < losses[0]


def test_train_config_errors():
    for kw, msg in [(dict(steps=0), r"steps \(--steps\) must be >= 1"), (dict(warmup=-1), "warmup"),
                    (dict(lr=float("nan")), "lr"), (dict(lr=0.0), "lr"), (dict(weight_decay=-0.1), "weight_decay"),
                    (dict(batch=2.0), "batch"), (dict(grad_clip=0), "grad_clip"), (dict(device="gpu7"), "device")]:
        with pytest.raises(ValueError, match=msg):
            train.TrainConfig(**kw)


def test_train_loop_records_and_stops_on_nonfinite_loss():
    torch.manual_seed(0)
    w = torch.nn.Linear(3, 1)
    cfg = train.TrainConfig(steps=3, warmup=1, lr=0.1, log_every=0)
    x = torch.randn(8, 3)
    hist, wall = train.train_loop(w, cfg, lambda step: ((w(x) ** 2).mean(), {"step": float(step)}), desc="toy")
    assert [h["step"] for h in hist] == [0.0, 1.0, 2.0] and hist[-1]["loss"] < hist[0]["loss"] and wall >= 0
    with pytest.raises(RuntimeError, match="toy: loss became nan at step 0"):
        train.train_loop(w, cfg, lambda step: (w(x).sum() * float("nan"), {}), desc="toy")


def test_only_the_main_process_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    assert not train.is_main_process()
    out = str(tmp_path / "m.pt")
    meta = train.train(FoXConfig(d_model=16, n_layers=1, n_heads=2, context=32),
                       train.TrainConfig(steps=1, batch=1, context=32, eval_seqs=1, log_every=0, threads=1), out,
                       next_batch=lambda step: data.get_batch(data.train_stream(), 1, 32, torch.Generator()))
    assert math.isfinite(meta["val_bpc"]) and list(tmp_path.iterdir()) == []
