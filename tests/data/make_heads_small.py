"""Writes tests/data/heads_small.json: the per-head document (schema 1, docs/HEADS_JSON.md) of a small
synthetic model (three heads: iid, AR(1) and regime-switching logits; 8 documents x 256 tokens; seed 0).

    python tests/data/make_heads_small.py
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from foxwindow import outputs  # noqa: E402
from foxwindow.heads import calibration as verdict_calibration  # noqa: E402
from foxwindow.heads import driver, table  # noqa: E402
from foxwindow.laws import gates as forget  # noqa: E402
from foxwindow.laws import lawtable  # noqa: E402

FAMILIES = ("iid", "ar1", "regime_switching")


def small_document(seed=0, S=8, T=256, n_boot=200):
    rng = np.random.default_rng(seed)
    lg = np.stack([-verdict_calibration.increments(f, 1.5, rng, S, T) for f in FAMILIES], 2)   # (S, T, H)
    eps = sorted(set(lawtable.EPS_SCAN) | {1e-3}, reverse=True)
    Ls = [forget.threshold(e) for e in eps]
    results, seed = driver.analyse_layers({"synthetic": lg}, L=Ls, n_boot=n_boot, seed=seed, pmf_L=math.log(1e3))
    info = dict(checkpoint=None, model="synthetic (" + ", ".join(FAMILIES) + " logits at mean 1.5)", n_seq=S,
                seq_len=T, analysed_len=T, n_boot=n_boot, seed=seed, what="synthetic", family="synthetic",
                unit="head", split="user data", capture_s=0.0, total_s=0.0, layers=["synthetic"])
    return table.to_json(results, info)


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "heads_small.json")
    outputs.write_json(out, small_document())
    print(out)
